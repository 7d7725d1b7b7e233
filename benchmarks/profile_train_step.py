"""profile: where the time of an XLA-compiled ViT training step on CPU goes, and where the first `fit` call's goes.

Runs `model.fit` of one of the training workloads (AdamW, random data from
a repeated in-memory batch) under the TensorFlow profiler and prints:

- the step: the XLA CPU runtime's per-operation events (thunks) summed by part of the model
  (matrix products of the dense layers and of attention, forward and backward; softmax,
  LayerNorm, GELU, loss, the optimizer update, copies/transposes), read from the TensorFlow
  op names XLA keeps in its HLO metadata (an XLA dump), as shares of the thunk time; then the
  slowest operations with their HLO shapes. Wall time per step against the thunk time says
  what the host adds (input pipeline, dispatch, callbacks).
- with --first-fit: the first `fit` call (one epoch of --steps steps) split into
  tf.function tracing, XLA compilation, running the steps, and the rest (data adapter,
  iterator, callbacks), from the profiler's host events. Tracing under the profiler is slower
  than without it; the wall of an unprofiled first call is printed for comparison (--plain).

Shares inside one process hold up on a loaded machine; absolute milliseconds do not.

    python -m benchmarks profile [--workload train_default|train_ti4] [--steps 4]
        [--first-fit [--plain]] [--top 20] [--no-jit] [--impl keras_vit]

The XLA dump needs XLA_FLAGS before TensorFlow compiles anything: the profile runs in a worker
process started with them, and its report is printed as it comes.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import tempfile

from benchmarks import timing
from benchmarks.workers import ResultLog, run_worker
from benchmarks.workloads import KERAS_IMPLS, TRAINING, compile_for_training, keras_model, repeated_batch, workload


def _profiler_planes_module():
    # The profiler's XSpace protobuf: TensorFlow ships no public reader of its own trace files.
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    return xplane_pb2


def _planes(logdir):
    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    space = _profiler_planes_module().XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space.planes


def thunk_events(logdir):
    """[(operation name, start ps, end ps)] of the XLA CPU thunks in a profile, on every thread."""
    events = []
    for plane in _planes(logdir):
        for line in plane.lines:
            if "Eigen" not in line.name:  # XLA's intra-op threads run the thunks
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if "::" in name or name.startswith("end:"):
                    continue
                start = line.timestamp_ns * 1000 + event.offset_ps
                events.append((name, start, start + event.duration_ps))
    return events


def thunk_times(logdir):
    """{operation name: total ms} and {operation name: count} of the XLA CPU thunks in a profile."""
    times, counts = collections.Counter(), collections.Counter()
    for name, start, end in thunk_events(logdir):
        times[name] += (end - start) / 1e9
        counts[name] += 1
    return times, counts


def covered_ps(spans):
    """Picoseconds covered by the union of (start, end) spans: overlapping spans count once."""
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def host_seconds(logdir, names):
    """{event name: seconds covered} on the host threads; nested events of one name count once."""
    spans = collections.defaultdict(list)
    for plane in _planes(logdir):
        for line in plane.lines:
            if "Eigen" in line.name:
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name in names:
                    start = line.timestamp_ns * 1000 + event.offset_ps
                    spans[name].append((start, start + event.duration_ps))
    return {name: covered_ps(spans[name]) / 1e12 for name in names}


INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\S+) (\S+?)\((.*)$")


def read_hlo(dump):
    """{instruction: (shape, opcode, TensorFlow op_type, op_name, operands, called computation)}."""
    instructions, computation_ops, current = {}, collections.defaultdict(list), None
    for path in glob.glob(os.path.join(dump, "*one_step_on_data*cpu_after_optimizations.txt")):
        with open(path) as f:
            for line in f:
                header = re.match(r"^(?:ENTRY )?%(\S+) \(", line)
                if header:
                    current = header.group(1)
                    continue
                match = INSTRUCTION.match(line)
                if not match:
                    continue
                name, shape, opcode, rest = match.groups()
                meta = re.search(r'op_type="([^"]*)" op_name="([^"]*)"', rest)
                called = re.search(r"calls=%([^\s,]+)", rest)
                operands = re.findall(r"%([\w.-]+)", rest.split(")")[0])
                instructions[name] = (shape, opcode, *(meta.groups() if meta else ("", "")), operands,
                                      called.group(1) if called else None)
                computation_ops[current].append((opcode, *(meta.groups() if meta else ("", ""))))
    return instructions, computation_ops


def category(name, instructions, computation_ops, depth=0):
    """The part of the model an XLA operation belongs to, from its TensorFlow op name."""
    if name not in instructions:
        return "other"
    shape, opcode, op_type, op_name, operands, called = instructions[name]
    inner = computation_ops.get(called, [])
    if not op_name:
        named = [(t, n) for _, t, n in inner if n]
        if named:
            op_type, op_name = named[0]
        elif operands and depth < 3:  # e.g. wrapped_reduce-window: take its input's part
            return category(operands[0], instructions, computation_ops, depth + 1)
    inner_names = " ".join(n for _, _, n in inner)
    # Gradient sums of several branches (AddN) carry no gradient_tape name of their own.
    backward = "gradient_tape" in op_name or "gradient_tape" in inner_names or op_type == "AddN"
    direction = "backward" if backward else "forward"
    opcodes = {opcode} | {op for op, _, _ in inner}
    if op_name.startswith("adam") or "AssignVariable" in op_type or "Assign" in op_name:
        return "optimizer update"
    if {"dot", "convolution"} & opcodes or name.startswith(("MatMul", "dot")):
        rank = shape.split("]")[0].count(",") + 1
        if "convolution" in opcodes or "embedding" in op_name:
            return f"patch embedding matmul {direction}"
        if rank > 2 and "attention" in op_name:
            return f"attention scores/context matmuls {direction}"
        return f"dense matmuls (qkv, output, MLP, head) {direction}"
    if "Softmax" in op_name and "compile_loss" not in op_name:
        return f"attention softmax {direction}"
    if "compile_loss" in op_name:
        return "loss"
    if re.search(r"/(norm\d?|encoder_norm)_?\d*/", op_name):
        return f"LayerNorm {direction}"
    if "Gelu" in op_name or "Gelu" in inner_names or "/Erf" in op_name or "/Erf" in inner_names:
        return f"GELU {direction}"
    if op_type in ("Transpose", "ConcatV2", "Slice", "StridedSlice", "Reshape", "Pack", "Split") or {
            "copy", "transpose", "concatenate", "slice"} & opcodes or op_name == "XLA_Args":
        return f"copies/transposes/slices {direction}"
    if "BiasAdd" in op_name:
        return f"bias add {direction}"
    return f"other {direction}"


def profile_steps(model, data, args, batch, dump):
    import tensorflow as tf

    run = timing.keras_epochs(model, data)
    run(2)  # tracing and compilation outside the profile
    logdir = tempfile.mkdtemp(prefix="profile_")
    tf.profiler.experimental.start(logdir)
    wall = run(args.steps).wall_s
    tf.profiler.experimental.stop()
    times, counts = thunk_times(logdir)
    instructions, computation_ops = read_hlo(dump)
    total = sum(times.values())
    per_step = wall * 1e3 / args.steps
    print(f"{args.steps} steps: wall {per_step:.0f} ms per step; XLA thunks {total / args.steps:.0f} ms per step, "
          f"summed over {tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} threads "
          "(thunks of one step can run side by side)")
    parts = collections.Counter()
    for name, ms in times.items():
        parts[category(name, instructions, computation_ops)] += ms
    print("\nby part (ms per step, share of thunk time):")
    for part, ms in parts.most_common():
        print(f"  {ms / args.steps:8.1f}  {ms / total:6.1%}  {part}")
    for label, keys in (("matmuls", ("matmul",)), ("forward", ("forward",)), ("backward", ("backward",))):
        share = sum(ms for part, ms in parts.items() if any(k in part for k in keys)) / total
        print(f"  all {label}: {share:.1%}")
    # XLA runs independent thunks side by side (a product's input and kernel gradients, say), so
    # summed thunk time is not wall time: the union of the spans is.
    events = thunk_events(logdir)
    spans = [(start, end) for _, start, end in events]
    matmul_spans = [(start, end) for name, start, end in events
                    if "matmul" in category(name, instructions, computation_ops)]
    any_ms, matmul_ms = (covered_ps(s) / 1e9 / args.steps for s in (spans, matmul_spans))
    print(f"\nwall per step covered by some thunk: {any_ms:.0f} ms; by some matrix product: {matmul_ms:.0f} ms "
          f"(summed {sum(ms for part, ms in parts.items() if 'matmul' in part) / args.steps:.0f} ms); no thunk running: "
          f"{per_step - any_ms:.0f} ms. With every other operation free, a step would take at least the products' "
          f"{matmul_ms:.0f} ms: at most {batch / matmul_ms * 1e3:.1f} images/s")
    print("\nslowest operations (ms per step, HLO shape, TensorFlow op, part):")
    for name, ms in times.most_common(args.top):
        shape, opcode, _, op_name = instructions.get(name, ("", "", "", ""))[:4]
        print(f"  {ms / args.steps:8.1f}  {name:28s} {shape} {opcode} {op_name}  "
              f"[{category(name, instructions, computation_ops)}]")


def profile_first_fit(model, data, args):
    import tensorflow as tf

    run = timing.keras_epochs(model, data)
    logdir = None
    if not args.plain:
        logdir = tempfile.mkdtemp(prefix="profile_")
        tf.profiler.experimental.start(logdir)
    first = run(args.steps).wall_s
    if logdir:
        tf.profiler.experimental.stop()
    second = run(args.steps).wall_s
    print(f"first fit call ({args.steps} steps): {first:.1f} s wall; second call: {second:.1f} s"
          + (" (profiler off)" if args.plain else " (profiler on during the first)"))
    if not logdir:
        return
    tracing, compiling = host_seconds(logdir, ("tf.function-graph_building", "CpuCompiler::CompileCpuExecutable")).values()
    parts = {"tf.function tracing (graph building)": tracing,
             "XLA compilation (CpuCompiler::CompileCpuExecutable)": compiling,
             "steps (second call's wall, same step count)": second,
             "rest: data adapter, iterator, callbacks, Python": first - tracing - compiling - second}
    for part, seconds in parts.items():
        print(f"  {seconds:7.1f} s  {seconds / first:6.1%}  {part}")
    print("\nlongest host events (seconds covered; events nest, so these overlap):")
    longest = collections.Counter()
    for plane in _planes(logdir):
        for line in plane.lines:
            if "Eigen" not in line.name:
                for event in line.events:
                    longest[plane.event_metadata[event.metadata_id].name] = max(
                        longest[plane.event_metadata[event.metadata_id].name], 0)
    for name, seconds in sorted(host_seconds(logdir, tuple(longest)).items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {seconds:7.1f} s  {name[:100]}")


def profile_job(workload_name, steps, top, first_fit, plain, no_jit, impl, dump):
    """The worker's side: builds, compiles and profiles; prints the report, returns the headline figures."""
    import tensorflow as tf

    args = argparse.Namespace(steps=steps, top=top, plain=plain)
    w = workload(workload_name)
    model, _ = keras_model(impl, w)
    compile_for_training(model, jit_compile=not no_jit)
    data = repeated_batch(w)
    print(f"{workload_name}: batch {w['batch']}, {model.count_params()} parameters, TF {tf.__version__}", flush=True)
    if first_fit:
        profile_first_fit(model, data, args)
    else:
        profile_steps(model, data, args, w["batch"], dump)
    return {"workload": workload_name, "impl": impl, "steps": steps, "first_fit": first_fit}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks profile", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=TRAINING)
    parser.add_argument("--impl", default="keras_vit", choices=KERAS_IMPLS)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--first-fit", action="store_true", help="split the first fit call instead of a step")
    parser.add_argument("--plain", action="store_true", help="with --first-fit: no profiler, walls only")
    parser.add_argument("--no-jit", action="store_true", help="compile without XLA (--first-fit only)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds for the profiled process")
    args = parser.parse_args(argv)
    ResultLog("profile", None, argv)
    dump = tempfile.mkdtemp(prefix="xla_dump_")
    flags = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text").strip()
    # The report is the worker's stdout: pass every line through.
    result = run_worker("benchmarks.profile_train_step:profile_job",
                        {"workload_name": args.workload, "steps": args.steps, "top": args.top,
                         "first_fit": args.first_fit, "plain": args.plain, "no_jit": args.no_jit, "impl": args.impl,
                         "dump": dump},
                        env={"XLA_FLAGS": flags}, timeout=args.timeout, echo=("",))
    if "error" in result:
        raise SystemExit(f"profile failed: {result['error']}")
    return result

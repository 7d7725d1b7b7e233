"""compare: CPU speed of keras_vit against keras-hub, timm and the matmul roofline, side by side in one run.

Every measurement runs in its own worker process; implementations alternate within each round,
so a change in the machine's load hits all of them alike. Workloads (`benchmarks/workloads.py`):

- infer_b16: ViT-B/16 at 224 px, inference, batch 8 (Keras: `predict_on_batch`; timm: eager, no_grad).
- train_ti4: ViT-Ti/4 at 32 px, batch 128, AdamW.
- train_default: `keras-vit train`'s default model (patch 7, D 128, 6 layers, 4 heads, MLP 256,
  28x28x1, 10 classes) at the default batch of 256.

Training (`timing.train_figures`): a first `fit` epoch of SHORT steps ("first fit": tracing and
compilation included), a warm SHORT epoch, then a LONG one; one step = the median of the LONG
epoch's single steps. timm: a plain loop, timed the same way. The roofline is FLOPs (matrix
products counted from the shapes, x3 for training) over the machine's float32 matmul peak (the
best 3072^3 rate of XLA, TensorFlow's oneDNN, NumPy and PyTorch: `matmul_peak.library_gflops`),
measured in its own process in every round.

    python -m benchmarks compare [--workloads infer_b16,train_ti4,train_default]
        [--impls keras_vit,keras_hub,timm] [--precisions auto,float32,bfloat16]
        [--keras-backends tensorflow,torch,jax] [--rounds 3] [--steps 10,40] [--out DIR] [--torch-threads N]

Set-ups: each Keras implementation on each --keras-backends backend in each --precisions precision,
with that backend's compiler default for it (TensorFlow: XLA for float32, oneDNN without XLA for
bfloat16; JAX: jit; PyTorch: eager); `auto` (keras_vit only) is what `keras-vit train` picks for
the workload's model and batch on this machine, or `keras-vit predict` for inference
(`benchmarks.jobs.auto_precision`: a precision trial where the CPU has native bfloat16, the why
printed under the table); timm in float32 and under
`torch.autocast` bfloat16. Each table says keras_vit's best set-up against the best peer's, and
`auto` against keras_vit's best (issue 41's goal: >= 1x and within 5%).

Implementations: keras_vit (as shipped), keras_vit_fused / keras_vit_unfused (attention forced
to keras.ops.dot_product_attention / the explicit softmax), keras_hub, timm. timm's figure needs
a quiet machine: PyTorch's OpenMP threads wait for each other after every operation, so with
other jobs on the cores timm ran 7.8x slower on two threads than on one (`torch-threads`).
Needs `pip install -e .[bench]` (keras-hub) and `pip install --no-deps timm`; an implementation
that is not installed is skipped.
"""

from __future__ import annotations

import argparse

from benchmarks.timing import median_range
from benchmarks.workers import ResultLog, run_worker
from benchmarks.workloads import KERAS_IMPLS, WORKLOADS, architecture, available, vit_flops

IMPLS = (*KERAS_IMPLS, "timm")
COMPARED = ("infer_b16", "train_ti4", "train_default")
PRECISIONS = ("auto", "float32", "bfloat16")
KERAS_BACKENDS = ("tensorflow", "torch", "jax")


def roofline_summary(results):
    """(median machine peak in GFLOP/s, its summary line) of the roofline rounds in `results`; (None, None) if none."""
    rounds = [r for r in results if r.get("kind") == "roofline" and "gflops" in r]
    if not rounds:
        return None, None
    peak, low, high = median_range([r["gflops"] for r in rounds])
    names = dict.fromkeys(name for r in rounds for name in r.get("by_library", {}))
    by_library = ", ".join(
        f"{name} {median_range([r['by_library'][name] for r in rounds if name in r['by_library']])[0]:.0f}"
        for name in names)
    size = rounds[0].get("size", 3072)
    line = (f"matmul roofline (float32, {size}^3, the best library each round): {peak:.0f} GFLOP/s "
            f"(range {low:.0f}-{high:.0f} over {len(rounds)} rounds)"
            + (f"; medians by library: {by_library}" if by_library else ""))
    return peak, line


def cpu_line(results):
    shares = [r["cpu"] for r in results if r.get("cpu")]
    if not shares:
        return []
    return [f"\nCPU time during the workers (/proc/stat, all processes): busy "
            f"{min(s['busy'] for s in shares):.0%}-{max(s['busy'] for s in shares):.0%}, steal "
            f"{min(s['steal'] for s in shares):.0%}-{max(s['steal'] for s in shares):.0%}"]


def summarise(results, workloads, labels):
    """Markdown tables per workload: img/s of each set-up (`setups`' labels), against keras_vit's default
    (`auto`, else float32) on TensorFlow, the best peer's (timm, keras-hub) best set-up and the roofline."""
    peak, line = roofline_summary(results)
    lines = [line] if line else []
    for name in workloads:
        w = WORKLOADS[name]
        flops = vit_flops(**architecture(w)) * (3 if w["train"] else 1)
        limit = peak * 1e9 / flops if peak else None
        rows = {label: [r for r in results if r.get("workload") == name and _label(r) == label and "images_per_s" in r]
                for label in labels}
        rates = {label: median_range([r["images_per_s"] for r in rs])[0] for label, rs in rows.items() if rs}
        base = next((rates[k] for k in ("keras_vit auto", "keras_vit float32", "keras_vit") if k in rates), None)
        peers = {k: v for k, v in rates.items() if not k.startswith("keras_vit")}
        ours = {k: v for k, v in rates.items() if k.startswith("keras_vit")}
        best_peer = max(peers, key=peers.get) if peers else None
        lines.append(f"\n{name}: batch {w['batch']}, {flops / 1e9:.2f} GFLOP/image"
                     + (f", roofline {limit:.1f} img/s" if limit else ""))
        if ours and best_peer:
            best_ours = max(ours, key=ours.get)
            lines.append(f"best keras_vit: {best_ours} {ours[best_ours]:.1f} img/s = {ours[best_ours] / peers[best_peer]:.2f}x "
                         f"the best peer ({best_peer} {peers[best_peer]:.1f})")
        for label in [k for k in ours if k.endswith(" auto")]:
            backend = label[: -len(" auto")]  # "keras_vit" or "keras_vit[torch]"
            same = {k: v for k, v in ours.items() if k.rsplit(" ", 1)[0] == backend and k != label}
            if not same:
                continue
            best = max(same, key=same.get)
            setting = lambda k: (rows[k][0].get("precision"), rows[k][0].get("jit"))  # noqa: E731
            lines.append(f"{label} picks {setting(label)[0]}: " + (
                f"the setting of the fastest set-up on its backend, {best} ({ours[label] / same[best]:.2f}x its "
                "figure: the spread between processes)" if setting(label) == setting(best) else
                f"faster than every other set-up on its backend ({ours[label] / same[best]:.2f}x {best})"
                if ours[label] >= same[best] else
                f"{ours[label] / same[best]:.2f}x the fastest set-up on its backend ({best}, {setting(best)[0]})")
                + (f"; why: {rows[label][0]['auto']}" if rows[label][0].get("auto") else ""))
        header = "| set-up | resolved | img/s median (range) | vs keras_vit default | vs roofline |"
        sep = "|---|---|---|---|---|"
        if w["train"]:
            header += " step s | first fit s | fit overhead s |"
            sep += "---|---|---|"
        lines += [header, sep]
        for label, rs in rows.items():
            if not rs:
                continue
            rate, low, high = median_range([r["images_per_s"] for r in rs])
            resolved = (f"{rs[0]['precision']}, {'XLA/jit' if rs[0]['jit'] else 'no compiler'}"
                        if "jit" in rs[0] else "")
            line = (f"| {label} {rs[0]['version']} | {resolved} | {rate:.1f} ({low:.1f}-{high:.1f}) | "
                    + (f"{rate / base:.2f}x | " if base else "? | ") + (f"{rate / limit:.0%} |" if limit else "? |"))
            if w["train"]:
                line += (f" {median_range([r['step_s'] for r in rs])[0]:.3f} |"
                         f" {median_range([r['first_fit_s'] for r in rs])[0]:.1f} |"
                         f" {median_range([r['fit_overhead_s'] for r in rs])[0]:.2f} |")
            lines.append(line)
    lines += cpu_line(results)
    for r in results:
        if "error" in r:
            lines.append(f"FAILED {r.get('workload', '')} {_label(r) or r.get('kind')} round {r['round']}: {r['error']}")
    return "\n".join(lines)


def _label(result):
    """A result's set-up label; results written before set-ups had labels are float32 rows of their impl."""
    return result.get("setup") or (f"{result['impl']} float32" if "impl" in result else None)


def parse_steps(parser, text, strictly_increasing=True):
    """'SHORT,LONG' -> (short, long), or a parser error naming the flag."""
    try:
        short, long = (int(s) for s in text.split(","))
        if short < 1 or long < 1 or (strictly_increasing and not short < long):
            raise ValueError
    except ValueError:
        expected = "0 < SHORT < LONG, e.g. 10,40" if strictly_increasing else "positive step counts, e.g. 3,12"
        parser.error(f"--steps={text!r}: expected SHORT,LONG with {expected}")
    return short, long


def check_names(parser, flag, text, known):
    names = text.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"{flag}={text!r} names {unknown}; expected some of {list(known)}")
    return names


def setups(impls, precisions, keras_backends):
    """[(label, tags, worker target, kwargs)] of one round: each Keras implementation on each backend in
    each precision, then timm in each precision ("auto" is keras_vit's own rule: keras-hub and timm have none)."""
    jobs = []
    for impl in impls:
        if impl == "timm":
            for precision in precisions:
                if precision != "auto":
                    jobs.append((f"timm {precision}", {"impl": impl, "precision": precision},
                                 "benchmarks.jobs:timm_job", {"precision": precision}))
            continue
        for backend in keras_backends:
            for precision in precisions:
                if precision == "auto" and not impl.startswith("keras_vit"):
                    continue  # keras_vit's own rule: keras-hub has none
                where = "" if backend == "tensorflow" else f"[{backend}]"
                jobs.append((f"{impl}{where} {precision}", {"impl": impl, "backend": backend, "precision": precision},
                             "benchmarks.jobs:keras_job", {"impl": impl, "precision": precision, "jit": None,
                                                           "warm_short": True}))
    return jobs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks compare", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(COMPARED))
    parser.add_argument("--impls", default="keras_vit,keras_hub,timm")
    parser.add_argument("--precisions", default="auto,float32,bfloat16",
                        help="auto (keras_vit's rule; Keras only), float32, bfloat16 (Keras: mixed_bfloat16 with the "
                        "backend's compiler default; timm: torch.autocast)")
    parser.add_argument("--keras-backends", default="tensorflow", help=f"some of {','.join(KERAS_BACKENDS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", default="10,40", help="SHORT,LONG training steps per timed epoch")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per worker process")
    parser.add_argument("--torch-threads", type=int, help="torch.set_num_threads for timm (default: torch's, one per core)")
    parser.add_argument("--roofline-size", type=int, default=3072, help="side of the roofline's square matmul")
    parser.add_argument("--out", help="folder for compare-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    short, long = parse_steps(parser, args.steps)
    workloads = check_names(parser, "--workloads", args.workloads, COMPARED)
    impls = check_names(parser, "--impls", args.impls, IMPLS)
    precisions = check_names(parser, "--precisions", args.precisions, PRECISIONS)
    keras_backends = check_names(parser, "--keras-backends", args.keras_backends, KERAS_BACKENDS)
    missing = [impl for impl in impls if not available(impl)]
    impls = [impl for impl in impls if impl not in missing]
    log = ResultLog("compare", args.out, argv)
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}")
    results = []
    labels = [label for label, *_ in setups(impls, precisions, keras_backends)]
    for round_index in range(args.rounds):
        jobs = [({"kind": "roofline"}, "benchmarks.jobs:roofline_job", {"size": args.roofline_size}, None)]
        for wl in workloads:
            for label, tags, target, kwargs in setups(impls, precisions, keras_backends):
                kwargs = {**kwargs, "workload_name": wl, "steps": [short, long]}
                if tags["impl"] == "timm":
                    kwargs["threads"] = args.torch_threads
                env = {"KERAS_BACKEND": tags["backend"]} if "backend" in tags else None
                jobs.append(({"workload": wl, "setup": label, **tags}, target, kwargs, env))
        for tags, target, kwargs, env in jobs:
            result = {**tags, "round": round_index, **run_worker(target, kwargs, env=env, timeout=args.timeout)}
            results.append(result)
            log.add(result)
    log.summary(summarise(results, workloads, labels))
    return results

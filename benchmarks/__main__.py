"""The harness's one entry point: `python -m benchmarks SUBCOMMAND [--help | options]`."""

from __future__ import annotations

import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Before any TensorFlow import, as a keras_vit user's script or the CLI starts: keras_vit's import
# sets TensorFlow's oneDNN where its rule says so (keras_vit.machine), and the workers inherit it.
import keras_vit  # noqa: E402,F401

# subcommand: (module, the question it answers). benchmarks/README.md lists the same.
SUBCOMMANDS = {
    "compare": ("compare", "How fast does keras_vit train and infer against keras-hub, timm and the matmul roofline on this CPU?"),
    "backends": ("backends", "Which Keras backend (TensorFlow, JAX, PyTorch), precision and thread setting trains fastest here?"),
    "precision-xla": ("precision_xla", "Does --precision auto pick the fastest precision x XLA set-up on this machine?"),
    "distribution": ("distribution", "Per-device memory and step time of data vs model parallel on JAX (8 host devices)?"),
    "step": ("step", "Images/s of any implementation x precision x XLA x backend set-up, side by side?"),
    "ab-train-step": ("ab_train_step", "Does a candidate code change make a training step faster (variants in one process)?"),
    "ab-inference": ("ab_inference", "Does a change to the encoder block make bfloat16 inference faster (a git revision's against this checkout's, one process)?"),
    "profile": ("profile_train_step", "Where does a training step's time go, and the first fit call's?"),
    "matmul-peak": ("matmul_peak", "What is this machine's matrix-product peak, per library and precision?"),
    "matmul-bound": ("matmul_bound", "How fast could a step run if everything but its matrix products were free?"),
    "onednn": ("onednn", "Does TensorFlow's oneDNN make a training step faster here (processes alternating, off and on)?"),
    "torch-threads": ("torch_threads", "Is timm's CPU figure a thread-contention artefact (torch threads 1 vs 2)?"),
    "iterator-teardown": ("iterator_teardown", "How long does a fit epoch spend outside its steps, tf.data autotune on vs off?"),
    "folder-pipeline": ("folder_pipeline", "How fast and how lean is the image-folder input pipeline; does a folder train as well as arrays?"),
    "gpu-compare": ("gpu_compare", "ViT-B/16 training img/s and MFU on one GPU: keras_vit vs keras-hub vs timm?"),
    "budget": ("budget", "What accuracy does keras-vit train --budget-minutes N buy on a dataset, beside the anchor recipe?"),
    "train-fashion-mnist": ("train_fashion_mnist", "What test accuracy does a recipe reach on Fashion-MNIST in a wall-clock budget?"),
    "inspect": ("inspect_fashion_mnist", "Does a small trained ViT show the paper's Fig. 7 (position locality, attention distance)?"),
    "export-report": ("export_report", "Size, latency and agreement of every export format and quantization?"),
    "bfloat16": ("bfloat16_inference", "Does bfloat16 inference (Keras, SavedModel) agree with float32 on photos, and how much faster is it?"),
    "load-weights": ("load_weights", "How long and how much memory does loading ViT-B/16 weights take?"),
    "transfer": ("transfer", "Does a pre-trained backbone adapted to 50 images per class beat training from scratch, and by how much?"),
    "pretrain": ("pretrain", "Does masked-autoencoder pre-training on unlabeled images make a better start for few labels?"),
    "first-calls": ("first_calls", "What does a budgeted run pay before its steady steps (compilation of the first step and validation pass), and does the precision trial see it?"),
    "dino-step": ("dino_step", "What does a DINO step cost with local views, with and without XLA?"),
    "dense": ("dense", "How well does a linear probe segment from a backbone's frozen patch features (Fashion-MNIST canvases)?"),
    "image-text": ("image_text", "Do CLIP, SigLIP and SigLIP 2 towers give transformers' tokens, embeddings and scores on every backend and export, and how fast?"),
    "zeroshot-head": ("zeroshot_head", "Does fine-tuning from an image-text checkpoint's zero-shot head beat the zero head and the probe?"),
    "house": ("house", "How large are keras_vit's modules and functions, and do its imports run downward?"),
}


def usage():
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: python -m benchmarks SUBCOMMAND [options]   (SUBCOMMAND --help for its options)", ""]
    lines += [f"  {name:{width}s}  {question}" for name, (_, question) in SUBCOMMANDS.items()]
    lines += ["", "Figures: benchmarks/RESULTS.md; what each answers: benchmarks/README.md."]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        from benchmarks.workers import worker_main

        return worker_main(*argv[1:3])
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in SUBCOMMANDS:
        print(f"python -m benchmarks: unknown subcommand {argv[0]!r}; expected one of {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{SUBCOMMANDS[argv[0]][0]}")
    module.main(argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())

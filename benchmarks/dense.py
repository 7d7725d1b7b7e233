"""dense: how well does a linear probe segment from a backbone's frozen patch features?

The segmentation set is made from Fashion-MNIST (`keras_vit.data.canvas_segmentation_set`): 1 to
`--max-items` items, resized to `--item-size` px, at random places on `--canvas` px black
canvases; the mask is 0 on the background and the item's class + 1 on its pixels (11 classes).
Training canvases draw their items from the training split, test canvases from the test split.

The probe is DINOv2's linear segmentation head (`keras_vit.LinearSegmenter`: BatchNorm and a 1x1
convolution on the last block's, or the last four blocks', patch features, logits upsampled to
the image), fitted with `model.fit` on the frozen backbone (Adam, per-pixel cross-entropy). Each
backbone runs twice: with its weights, and with the same architecture's random initialisation,
the control that tells what the probe reads from the trained features rather than from the
architecture and the pixels.

    python -m benchmarks dense --backbone /tmp/xfer3/backbone/timm --data ../shared/data/fashion-mnist --out benchmarks/results

`--backbone` is a weights folder (timm, Hugging Face, .npz; e.g. the `transfer` benchmark's
pre-trained ViT-Ti/4) or a keras_vit variant name (random weights only).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

NUM_CLASSES = 11  # Fashion-MNIST's 10 and the background


def make_set(data, train, test, canvas, item_size, max_items, seed=0):
    """(train images, train masks), (test images, test masks): RGB uint8 canvases and their masks."""
    from keras_vit.data import canvas_segmentation_set, load_sample, read_idx_dataset

    splits = load_sample() if data is None else read_idx_dataset(data)
    made = []
    for (items, labels), count, split_seed in zip(splits, (train, test), (seed, seed + 1)):
        images, masks = canvas_segmentation_set(items, labels, count, canvas_size=canvas, item_size=item_size,
                                                max_items=max_items, seed=split_seed)
        made.append((np.repeat(images[..., None], 3, axis=-1), masks))
    return made


def backbones(backbone, random_control=True):
    """(name, model) pairs: the backbone with its weights (if it has any), then its architecture at random."""
    import keras_vit
    from keras_vit.models.vit import build

    if os.path.exists(backbone):
        from keras_vit import weights

        scaling = weights.Checkpoint(backbone).preprocessing.scaling
        trained = keras_vit.ViT(weights=backbone, image_size=None, include_top=False, preprocessing=scaling)
        pairs = [("trained", trained)]
    else:
        trained = keras_vit.ViT(backbone, image_size=None, include_top=False, preprocessing="symmetric")
        pairs = []
    if random_control or not pairs:
        pairs.append(("random", build(trained.vit_config)))
    return pairs


def probe_one(model, indices, train, test, epochs, batch_size, learning_rate, seed=0, jit_compile="auto"):
    """Fits one linear probe on the frozen `model`; its test mean IoU, pixel accuracy and seconds."""
    import keras

    import keras_vit
    from keras_vit.data import check_masks

    keras.utils.set_random_seed(seed)
    for images, masks in (train, test):
        check_masks(images, masks, NUM_CLASSES)
    probe = keras_vit.compile_segmenter(keras_vit.LinearSegmenter(model, NUM_CLASSES, indices=indices),
                                        optimizer=keras.optimizers.Adam(learning_rate), jit_compile=jit_compile)
    start = time.perf_counter()
    history = probe.fit(*train, epochs=epochs, batch_size=batch_size, verbose=0)
    fit_seconds = time.perf_counter() - start
    scores = probe.evaluate(*test, batch_size=batch_size, verbose=0, return_dict=True)
    return {"indices": indices, "mean_iou": round(float(scores["mean_iou"]), 4),
            "pixel_accuracy": round(float(scores["pixel_accuracy"]), 4),
            "train_loss": [round(float(v), 4) for v in history.history["loss"]],
            "fit_seconds": round(fit_seconds, 1)}


def run(args, argv=None):
    from benchmarks.workers import ResultLog

    log = ResultLog("dense", args.out, argv)
    train, test = make_set(args.data, args.train, args.test, args.canvas, args.item_size, args.max_items, args.seed)
    background = float((test[1] == 0).mean())
    log.add({"set": "fashion-mnist canvases", "train": len(train[0]), "test": len(test[0]), "canvas": args.canvas,
             "item_size": args.item_size, "max_items": args.max_items,
             "test_background_fraction": round(background, 4)})
    rows = ["| backbone | blocks | test mean IoU | pixel accuracy | loss by epoch | fit s |",
            "|---|---|---|---|---|---|"]
    results = []
    for name, model in backbones(args.backbone, not args.no_random):
        for indices in args.indices:
            result = {"backbone": name, **probe_one(model, indices, train, test, args.epochs, args.batch_size,
                                                     args.learning_rate, args.seed, False if args.no_jit else "auto")}
            log.add(result)
            results.append(result)
            rows.append(f"| {name} | last {indices} | {100 * result['mean_iou']:.1f}% | "
                        f"{100 * result['pixel_accuracy']:.1f}% | {', '.join(map(str, result['train_loss']))} | "
                        f"{result['fit_seconds']} |")
    # Predicting background everywhere: its IoU is its pixel share, every item class's 0.
    rows.append(f"\nAll-background guess: pixel accuracy {100 * background:.1f}%, "
                f"mean IoU {100 * background / NUM_CLASSES:.1f}%.")
    log.summary("\n".join(rows))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks dense", description=__doc__.split("\n")[0])
    parser.add_argument("--backbone", default="tiny", help="weights folder or keras_vit variant (default: tiny)")
    parser.add_argument("--no-random", action="store_true", help="skip the random-weights control")
    parser.add_argument("--data", help="Fashion-MNIST IDX folder (default: the shipped sample)")
    parser.add_argument("--train", type=int, default=2000, help="training canvases")
    parser.add_argument("--test", type=int, default=500, help="test canvases")
    parser.add_argument("--canvas", type=int, default=32, help="canvas side, px (a multiple of the patch)")
    parser.add_argument("--item-size", type=int, default=14, help="item side on the canvas, px")
    parser.add_argument("--max-items", type=int, default=3)
    parser.add_argument("--indices", default="1,4", help="comma-separated: probe the last n blocks, for each n")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-jit", action="store_true",
                        help="compile no XLA train step (smoke runs: saves the compile)")
    parser.add_argument("--out", help="folder for the .jsonl and .md")
    args = parser.parse_args(argv)
    args.indices = [int(n) for n in args.indices.split(",")]
    return run(args, argv)


if __name__ == "__main__":
    main()

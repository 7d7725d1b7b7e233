"""Fine-tune an original ViT `.npz` checkpoint at 384 px with the paper's SGD recipe.

What it shows: loading a Google ViT checkpoint (vit_jax / AugReg `.npz`, e.g. `ViT-B_16.npz`
pre-trained on ImageNet-21k) with `keras_vit.ViT(weights=...)`, replacing its head by a new,
zero-initialised one for `--num-classes` classes, raising the resolution to 384 px (the learned
position embedding is resampled from the checkpoint's 14x14 grid to 24x24, class-token row kept
apart, bilinearly as vit_jax does), and fine-tuning with the recipe of the paper and vit_jax:
SGD with momentum 0.9, learning rate 0.03 at batch 512 (scaled linearly with the batch) with a
linear warm-up then a cosine decay to zero, gradient clipping at global norm 1.0, inputs scaled
to [-1, 1] (`keras_vit.training.RECIPES["finetune"]`, data through `keras_vit.data`). The fine-tuned model is saved
as a `.keras` file and loaded back with no custom objects.

Command:
    python examples/finetune_pretrained.py --checkpoint ViT-B_16.npz      # Fashion-MNIST sample
    python examples/finetune_pretrained.py --checkpoint ViT-B_16.npz --dataset cifar10 --steps 10000 --batch-size 512
    python examples/finetune_pretrained.py --smoke    # generated tiny checkpoint, offline

Expected runtime: the default run (ViT-B/16 at 384 px, 500 steps of batch 32 on the 8,000-image
Fashion-MNIST sample) takes hours on a 2-core CPU and minutes on one GPU; the paper's CIFAR-10
run (batch 512, 10k steps) needs accelerators. Smoke: about 15 s on a 2-core CPU (most of it
importing TensorFlow).
It prints the checkpoint's architecture, the position-embedding grid before and after
resampling (smoke: `position embedding: 8x8 grid -> 12x12 grid`), the learning rate at a few
steps of the schedule, the training loss per epoch, then `test accuracy: ...` and
`reloaded <path>: same predictions`.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import keras
import numpy as np

import keras_vit
from keras_vit.data import load_source, make_pipeline
from keras_vit.training import get_recipe, make_loss, make_optimizer, make_schedule


def make_tiny_checkpoint(path):
    """Writes a random tiny ViT as an original-layout `.npz`, standing in for ViT-B_16.npz offline.

    The file has exactly the keys and shapes layout of a real checkpoint (embedding/kernel,
    Transformer/posembed_input/pos_embedding, Transformer/encoderblock_0/..., head/...), with a
    1000-class head and a 8x8 position-embedding grid (32 px images, 4 px patches).
    """
    pretrained = keras_vit.ViT("tiny", num_classes=1000, image_size=32)
    # Random but not zero: a real checkpoint's head is trained, ours would otherwise be zeros.
    head = pretrained.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape).astype("float32"))
    keras_vit.weights.save_npz(pretrained, path)
    return path


def pipeline(dataset, split, image_size, batch_size, recipe, training, limit=None):
    """A keras_vit tf.data pipeline of (RGB [0, 255] images at `image_size`, one-hot labels).

    scaling=None hands over raw pixels: the model maps them to [-1, 1] itself (its
    preprocessing="symmetric" layer). Grey images are repeated to RGB (the checkpoint expects 3
    channels) and upsampled; training adds the recipe's light augmentation (random resized
    crop, flip) and repeats the data, since the schedule counts steps, not epochs.
    """
    source = load_source(dataset, split)
    if limit:
        source.dataset, source.num_examples = source.dataset.take(limit), min(limit, source.num_examples or limit)
    data = make_pipeline(source, image_size=image_size, channels=3, scaling=None, batch_size=batch_size,
                         training=training, augment=recipe.augment, seed=0, repeat=training)
    return data, source.num_classes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="generated tiny checkpoint, a few steps, offline")
    parser.add_argument("--checkpoint", help="an original ViT .npz file, e.g. ViT-B_16.npz")
    parser.add_argument("--dataset", default="sample",
                        help="'sample' (the shipped Fashion-MNIST sample, offline), a folder of class "
                             "sub-folders, or a tensorflow-datasets name such as cifar10")
    parser.add_argument("--image-size", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=32, help="the paper uses 512")
    parser.add_argument("--steps", type=int, default=500, help="total optimizer steps (paper CIFAR-10: 10,000)")
    parser.add_argument("--eval-images", type=int, default=None, help="test images to evaluate on (default all)")
    parser.add_argument("--out", default=None, help="folder for the fine-tuned model (default: a temporary folder)")
    parser.add_argument("--jit-compile", default="auto", choices=["auto", "true", "false"])
    args = parser.parse_args(argv)

    out = args.out or tempfile.mkdtemp(prefix="finetune_")
    os.makedirs(out, exist_ok=True)
    if args.smoke:
        args.checkpoint = make_tiny_checkpoint(os.path.join(out, "tiny_pretrained.npz"))
        args.image_size, args.batch_size, args.steps = 48, 16, 8
        args.eval_images = args.eval_images or 64
        args.jit_compile = "false"  # XLA compilation would cost more than these few steps
    if not args.checkpoint:
        parser.error("--checkpoint PATH is required (an original .npz such as ViT-B_16.npz), or use --smoke")

    # 1. Read the checkpoint once; its architecture (patch size, width, depth, heads, grid,
    # head size, tanh GELU of the original code) comes from its keys and shapes.
    checkpoint = keras_vit.weights.Checkpoint(args.checkpoint)
    arch = checkpoint.architecture
    print(f"checkpoint {os.path.basename(args.checkpoint)}: patch {arch['patch_size']}, hidden "
          f"{arch['hidden_size']}, {arch['num_layers']} layers, {arch['num_heads']} heads, "
          f"{arch['num_classes']} classes, grid {arch['grid_size'][0]}x{arch['grid_size'][1]}")

    recipe = get_recipe("finetune")
    train_data, num_classes = pipeline(args.dataset, "train", args.image_size, args.batch_size, recipe, training=True)
    test_data, _ = pipeline(args.dataset, "test", args.image_size, args.batch_size, recipe, training=False,
                            limit=args.eval_images)

    # 2. Build at the new resolution with a new head. num_classes differs from the checkpoint's,
    # so its head is not loaded: the new one stays zero-initialised, as in the paper, and every
    # other weight comes from the checkpoint (keys and shapes checked before anything is
    # assigned). The position embedding is resampled to the 384 px grid while loading.
    # preprocessing="symmetric" puts the [-1, 1] scaling the checkpoint was trained with inside
    # the model, so the saved model and its exports take raw [0, 255] pixels.
    # representation_size=None drops an i21k checkpoint's pre-logits layer, as vit_jax does
    # when fine-tuning (without it the model keeps what the file holds).
    model = keras_vit.ViT(
        weights=checkpoint,
        image_size=args.image_size,
        num_classes=num_classes,
        preprocessing="symmetric",
        representation_size=None,
    )
    grid = model.get_layer("embedding").grid_size
    print(f"position embedding: {arch['grid_size'][0]}x{arch['grid_size'][1]} grid -> {grid[0]}x{grid[1]} grid "
          f"({model.count_params():,} parameters, new {num_classes}-class head)")

    # 3. The recipe of the paper and vit_jax, keras_vit.training.RECIPES["finetune"]: SGD with
    # momentum 0.9, no weight decay, global gradient-norm clipping at 1.0, learning rate 0.03
    # at batch 512 (scaled linearly for other batch sizes), 500 warm-up steps (at most a fifth
    # of the run) rising linearly from 0, then a cosine decay to 0. The schedule object is the
    # optimizer's learning rate, so the warm-up really happens.
    epochs = next(e for e in range(min(5, args.steps), 0, -1) if args.steps % e == 0)
    schedule = make_schedule(recipe, args.batch_size, args.steps // epochs, epochs)
    for step in sorted({0, schedule.warmup_steps // 2, schedule.warmup_steps, args.steps // 2, args.steps - 1}):
        print(f"  learning rate at step {step:5d}: {float(schedule(step)):.5f}")
    optimizer = make_optimizer(recipe, model, schedule)
    model.compile(
        optimizer=optimizer,
        loss=make_loss(recipe, model),  # cross-entropy on the pipeline's one-hot labels
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile={"auto": "auto", "true": True, "false": False}[args.jit_compile],
        run_eagerly=args.smoke,  # tracing the training graph costs more than 8 tiny steps
    )

    # The schedule counts optimizer steps, so train for exactly args.steps of them; "epochs" of
    # the repeated data set only decide how often Keras prints. The data set is shuffled above.
    model.fit(train_data, epochs=epochs, steps_per_epoch=args.steps // epochs, shuffle=False, verbose=2)
    print(f"optimizer steps: {int(optimizer.iterations.numpy())}, final learning rate "
          f"{float(schedule(optimizer.iterations)):.5f}")
    _, accuracy = model.evaluate(test_data, verbose=0)
    print(f"test accuracy: {accuracy:.4f}")

    # 4. Save and reload: every keras_vit layer is registered, so no custom_objects are needed.
    path = os.path.join(out, "finetuned.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    images = next(iter(test_data))[0][:4]
    same = np.allclose(model.predict(images, verbose=0), reloaded.predict(images, verbose=0), atol=1e-5)
    print(f"reloaded {path}: {'same predictions' if same else 'DIFFERENT predictions'}")
    if not same:
        raise SystemExit(1)
    return accuracy


if __name__ == "__main__":
    main()

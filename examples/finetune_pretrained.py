"""Fine-tune an original ViT `.npz` checkpoint at 384 px with the paper's SGD recipe.

What it shows: loading a Google ViT checkpoint (vit_jax / AugReg `.npz`, e.g. `ViT-B_16.npz`
pre-trained on ImageNet-21k) with `keras_vit.ViT(weights=...)`, replacing its head by a new,
zero-initialised one for `--num-classes` classes, raising the resolution to 384 px (the learned
position embedding is resampled from the checkpoint's 14x14 grid to 24x24, class-token row kept
apart, bilinearly as vit_jax does), and fine-tuning with the recipe of the paper and vit_jax:
SGD with momentum 0.9, learning rate 0.03 with a linear warm-up then a cosine decay to zero,
gradient clipping at global norm 1.0, inputs scaled to [-1, 1]. The fine-tuned model is saved
as a `.keras` file and loaded back with no custom objects.

Command:
    python examples/finetune_pretrained.py --checkpoint ViT-B_16.npz      # Fashion-MNIST sample
    python examples/finetune_pretrained.py --checkpoint ViT-B_16.npz --dataset cifar10 --steps 10000
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
import tensorflow as tf

import keras_vit
from keras_vit.data import fashion_mnist


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


def dataset(name, split, image_size, batch_size, training, limit=None):
    """A tf.data pipeline of (images, labels): float32 RGB pixels in [0, 255] at `image_size`.

    The model scales pixels to [-1, 1] itself (its `preprocessing="symmetric"` layer), so the
    pipeline only decodes, converts grey to RGB (the checkpoint expects 3 channels) and resizes.
    """
    if name == "fashion-mnist-sample":
        (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()
        x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
        if limit:
            x, y = x[:limit], y[:limit]
        data = tf.data.Dataset.from_tensor_slices((x[..., None], y.astype("int32")))
        num_classes = len(fashion_mnist.CLASS_NAMES)
    else:
        import tensorflow_datasets as tfds

        data, info = tfds.load(name, split=split, as_supervised=True, with_info=True)
        if limit:
            data = data.take(limit)
        num_classes = info.features["label"].num_classes

    def prepare(image, label):
        image = tf.cast(image, tf.float32)
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        # Bilinear upsampling, as vit_jax's input pipeline does for low-resolution data sets.
        image = tf.image.resize(image, (image_size, image_size), method="bilinear")
        if training:
            image = tf.image.random_flip_left_right(image)
        return image, label

    if training:
        data = data.shuffle(10_000, seed=0).repeat()
    data = data.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
    return data.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE), num_classes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="generated tiny checkpoint, a few steps, offline")
    parser.add_argument("--checkpoint", help="an original ViT .npz file, e.g. ViT-B_16.npz")
    parser.add_argument("--dataset", default="fashion-mnist-sample",
                        help="'fashion-mnist-sample' (shipped, offline) or a tensorflow-datasets name such as cifar10")
    parser.add_argument("--image-size", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=32, help="the paper uses 512")
    parser.add_argument("--steps", type=int, default=500, help="total optimizer steps (paper CIFAR-10: 10,000)")
    parser.add_argument("--warmup-steps", type=int, default=None, help="defaults to 10%% of --steps, at most 500")
    parser.add_argument("--learning-rate", type=float, default=0.03)
    parser.add_argument("--eval-images", type=int, default=None, help="test images to evaluate on (default all)")
    parser.add_argument("--out", default=None, help="folder for the fine-tuned model (default: a temporary folder)")
    parser.add_argument("--jit-compile", default="auto", choices=["auto", "true", "false"])
    args = parser.parse_args(argv)

    out = args.out or tempfile.mkdtemp(prefix="finetune_")
    os.makedirs(out, exist_ok=True)
    if args.smoke:
        args.checkpoint = make_tiny_checkpoint(os.path.join(out, "tiny_pretrained.npz"))
        args.image_size, args.batch_size, args.steps, args.warmup_steps = 48, 16, 8, 2
        args.eval_images = args.eval_images or 64
        args.jit_compile = "false"  # XLA compilation would cost more than these few steps
    if not args.checkpoint:
        parser.error("--checkpoint PATH is required (an original .npz such as ViT-B_16.npz), or use --smoke")
    warmup = args.warmup_steps if args.warmup_steps is not None else min(500, args.steps // 10)

    # 1. Read the checkpoint once; its architecture (patch size, width, depth, heads, grid,
    # head size, tanh GELU of the original code) comes from its keys and shapes.
    checkpoint = keras_vit.weights.Checkpoint(args.checkpoint)
    arch = checkpoint.architecture
    print(f"checkpoint {os.path.basename(args.checkpoint)}: patch {arch['patch_size']}, hidden "
          f"{arch['hidden_size']}, {arch['num_layers']} layers, {arch['num_heads']} heads, "
          f"{arch['num_classes']} classes, grid {arch['grid_size'][0]}x{arch['grid_size'][1]}")

    train_data, num_classes = dataset(args.dataset, "train", args.image_size, args.batch_size, training=True)
    test_data, _ = dataset(args.dataset, "test", args.image_size, args.batch_size, training=False,
                           limit=args.eval_images)

    # 2. Build at the new resolution with a new head. num_classes differs from the checkpoint's,
    # so its head is not loaded: the new one stays zero-initialised, as in the paper, and every
    # other weight comes from the checkpoint (keys and shapes checked before anything is
    # assigned). The position embedding is resampled to the 384 px grid while loading.
    # preprocessing="symmetric" puts the [-1, 1] scaling the checkpoint was trained with inside
    # the model, so the saved model and its exports take raw [0, 255] pixels.
    model = keras_vit.ViT(
        weights=checkpoint,
        image_size=args.image_size,
        num_classes=num_classes,
        preprocessing="symmetric",
    )
    grid = model.get_layer("embedding").grid_size
    print(f"position embedding: {arch['grid_size'][0]}x{arch['grid_size'][1]} grid -> {grid[0]}x{grid[1]} grid "
          f"({model.count_params():,} parameters, new {num_classes}-class head)")

    # 3. The recipe. CosineDecay starts at 0, rises linearly to warmup_target over warmup_steps,
    # then decays to 0 over decay_steps: passing the schedule itself as the learning rate is
    # what makes the warm-up happen (a schedule built and not passed does nothing).
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(args.steps - warmup, 1),
        warmup_target=args.learning_rate,
        warmup_steps=warmup,
    )
    for step in sorted({0, warmup // 2, warmup, (args.steps + warmup) // 2, args.steps - 1}):
        print(f"  learning rate at step {step:5d}: {float(schedule(step)):.5f}")
    optimizer = keras.optimizers.SGD(
        learning_rate=schedule,
        momentum=0.9,
        global_clipnorm=1.0,  # clip the norm of all gradients together, as vit_jax does
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile={"auto": "auto", "true": True, "false": False}[args.jit_compile],
    )

    # The schedule counts optimizer steps, so train for exactly args.steps of them; "epochs" of
    # the repeated data set only decide how often Keras prints. The data set is shuffled above.
    epochs = next(e for e in range(min(5, args.steps), 0, -1) if args.steps % e == 0)
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

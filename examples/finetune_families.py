"""Fine-tune DINOv2-, SigLIP- (and CLIP-, DeiT-) shaped backbones on the shipped Fashion-MNIST sample.

What it shows: building a family's backbone with `keras_vit.ViT(variant or weights=...)`, the
embedding it returns with `include_top=False` (DINOv2: the final-norm class token; SigLIP: the
attention-pool output; CLIP: the projected class token), and the two things people do with such
a backbone: a linear probe (backbone frozen, a new zero-initialised head trained with
`model.fit`) and full fine-tuning (everything trained, smaller learning rate). With `--weights`
a real checkpoint is loaded (a Hugging Face folder such as `facebook/dinov2-small` or
`google/siglip-base-patch16-224` saved with `save_pretrained`, or a timm safetensors file with
`--num-heads`); without it the backbones are random (the smoke run), so accuracies only show
that training moves.

Command:
    python examples/finetune_families.py --smoke                       # tiny DINOv2 and SigLIP shapes
    python examples/finetune_families.py --weights dinov2-small/ --image-size 224 --steps 500
    python examples/finetune_families.py --family siglip --weights siglip-base-patch16-224/

Expected runtime: smoke about 40 s on a 2-core CPU (most of it importing TensorFlow and compiling);
a real ViT-S/14 at 224 px for 500 steps of batch 32 takes about an hour on such a CPU and a few
minutes on one GPU.
It prints, per family, the embedding shape, `linear probe: test accuracy ...` and
`fine-tuned: test accuracy ...`.
"""

from __future__ import annotations

import argparse

import keras
import numpy as np

import keras_vit
from keras_vit.data.fashion_mnist import load_sample

# The tiny random shapes of the smoke run: rows of keras_vit.configs.VARIANTS.
SMOKE_VARIANTS = {"dinov2": "tiny_dinov2", "siglip": "tiny_siglip", "clip": "tiny_clip", "deit": "tiny_deit"}


def images_for(x, size):
    """Grayscale uint8 (N, 28, 28) -> float32 RGB (N, size, size, 3) in [-1, 1]."""
    x = np.repeat(x[..., None].astype("float32"), 3, axis=-1)
    x = keras.ops.convert_to_numpy(keras.ops.image.resize(x, (size, size)))
    return x / 127.5 - 1.0


def backbone_for(family, args):
    if args.weights:
        kwargs = {"num_heads": args.num_heads} if args.num_heads else {}
        return keras_vit.ViT(weights=args.weights, include_top=False, image_size=args.image_size, **kwargs)
    return keras_vit.ViT(SMOKE_VARIANTS[family], include_top=False, image_size=args.image_size)


def train(backbone, x, y, x_test, y_test, args, trainable, learning_rate):
    backbone.trainable = trainable
    inputs = keras.Input(backbone.input_shape[1:])
    head = keras.layers.Dense(10, kernel_initializer="zeros", dtype="float32", name="head")
    model = keras.Model(inputs, head(backbone(inputs, training=trainable)))
    model.compile(keras.optimizers.AdamW(learning_rate), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=args.batch_size, epochs=1, steps_per_epoch=args.steps, verbose=0)
    return model.evaluate(x_test, y_test, verbose=0)[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(SMOKE_VARIANTS), action="append",
                        help="family to run (repeatable; default: dinov2 and siglip)")
    parser.add_argument("--weights", help="a Hugging Face folder or timm safetensors file")
    parser.add_argument("--num-heads", type=int, help="heads of a timm file (timm does not store them)")
    parser.add_argument("--image-size", type=int, default=None, help="input side (default: 224, smoke 16)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--smoke", action="store_true", help="tiny random backbones, a few steps")
    args = parser.parse_args()
    families = args.family or ["dinov2", "siglip"]
    if args.smoke:
        args.steps, args.batch_size, args.weights = 4, 16, None
        args.image_size = args.image_size or 16
    args.image_size = args.image_size or 224
    (x_train, y_train), (x_test, y_test) = load_sample()
    count = args.steps * args.batch_size
    x = images_for(x_train[:count], args.image_size)
    x_eval = images_for(x_test[: 4 * args.batch_size], args.image_size)
    y, y_eval = y_train[:count], y_test[: 4 * args.batch_size]
    for family in families:
        backbone = backbone_for(family, args)
        print(f"{family}: {backbone.name}, embedding {backbone.output_shape[1:]}")
        probe = train(backbone, x, y, x_eval, y_eval, args, trainable=False, learning_rate=1e-3)
        print(f"{family}: linear probe: test accuracy {probe:.3f}")
        tuned = train(backbone, x, y, x_eval, y_eval, args, trainable=True, learning_rate=1e-4)
        print(f"{family}: fine-tuned: test accuracy {tuned:.3f}")


if __name__ == "__main__":
    main()

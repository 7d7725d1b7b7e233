"""Augmentation presets for the input pipeline (never inside the exported model).

The presets follow the AugReg levels (Steiner et al. 2021) and the DeiT recipe, built from
Keras 3 layers (RandAugment, MixUp, CutMix, RandomErasing) plus a random resized crop and a
horizontal flip written with tf.image, because Keras 3 has no random resized crop layer.
RandAugment magnitudes m are given on the 0..30 scale of timm/AugReg and mapped to Keras'
`factor = m / 30`.

| preset | crop scale | flip | RandAugment | MixUp / CutMix | RandomErasing |
|---|---|---|---|---|---|
| none | - | - | - | - | - |
| flip | - | yes | - | - | - |
| shift | shift by up to 1/16 of the side | yes | - | - | - |
| light | 0.35..1 | yes | - | - | - |
| medium | 0.35..1 | yes | 2 ops, m 10 | mixup 0.2 | - |
| strong | 0.08..1 | yes | 2 ops, m 9 | mixup 0.8 or cutmix 1.0 (DeiT) | p 0.25 |
| views | 0.14..1 | yes | - | - | - |

"views" is DINO's augmentation of each view (Caron et al. 2021) without its blur: colour jitter
(brightness 0.4, contrast 0.4, saturation 0.2, hue 0.1) with probability 0.8, grey with 0.2,
solarization with 0.1 (DINO's 0.2 on its second view, none on its first), and the crop scale DINO
gives its two global views when it takes no local ones. DINO blurs 224 px crops with a sigma of
0.1-2 px; on the small images a CPU run pre-trains on, that blur would erase what the model must see.

Example:

>>> get_preset("medium").mixup_alpha
0.2
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """One augmentation preset.

    Args:
        crop_scale: (float, float) or None. Area range of the random resized crop; None for no
            crop. Defaults to None.
        flip: bool. Random horizontal flip. Defaults to False.
        randaugment_ops: int. RandAugment operations per image; 0 for none. Defaults to 0.
        randaugment_magnitude: float. RandAugment magnitude on the 0..30 scale. Defaults to 0.
        mixup_alpha: float. MixUp Beta parameter; 0 for none. Defaults to 0.
        cutmix_alpha: float. CutMix Beta parameter; 0 for none. With MixUp too, each batch
            gets one of the two at random (DeiT). Defaults to 0.
        erasing_probability: float. Probability of RandomErasing per image. Defaults to 0.
        shift: float. Random translation by up to this fraction of the side, each way: the
            image is padded by reflection and cropped back to its size (2 px on 32 px CIFAR
            images for 1/16, the usual augmentation of short CIFAR runs). Defaults to 0.
        color_jitter: float. Probability of DINO's colour jitter (`COLOR_JITTER`; brightness and
            contrast only on grey images). Defaults to 0.
        grayscale: float. Probability of turning a colour image grey. Defaults to 0.
        solarize: float. Probability of inverting the pixels from 128 up. Defaults to 0.

    Example:

    >>> AugmentConfig(flip=True) == PRESETS["flip"], PRESETS["strong"].erasing_probability
    (True, 0.25)
    """

    crop_scale: tuple | None = None
    flip: bool = False
    randaugment_ops: int = 0
    randaugment_magnitude: float = 0.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    erasing_probability: float = 0.0
    shift: float = 0.0
    color_jitter: float = 0.0
    grayscale: float = 0.0
    solarize: float = 0.0


PRESETS: dict[str, AugmentConfig] = {
    "none": AugmentConfig(),
    "flip": AugmentConfig(flip=True),
    "shift": AugmentConfig(flip=True, shift=1 / 16),
    # The fine-tuning augmentation of small sets in timm's and LP-FT's CIFAR recipes: a 4 px
    # padded crop of a 32 px image and a flip.
    "pad_crop": AugmentConfig(flip=True, shift=1 / 8),
    "light": AugmentConfig(crop_scale=(0.35, 1.0), flip=True),
    "medium": AugmentConfig(
        crop_scale=(0.35, 1.0), flip=True, randaugment_ops=2, randaugment_magnitude=10, mixup_alpha=0.2
    ),
    "strong": AugmentConfig(
        crop_scale=(0.08, 1.0),
        flip=True,
        randaugment_ops=2,
        randaugment_magnitude=9,
        mixup_alpha=0.8,
        cutmix_alpha=1.0,
        erasing_probability=0.25,
    ),
    "views": AugmentConfig(crop_scale=(0.14, 1.0), flip=True, color_jitter=0.8, grayscale=0.2, solarize=0.1),
}
# DINO's colour jitter (torchvision's ColorJitter(0.4, 0.4, 0.2, 0.1)): brightness and contrast
# factors in [0.6, 1.4], saturation in [0.8, 1.2], hue shifted by up to 0.1 of the circle.
COLOR_JITTER = {"brightness": 0.4, "contrast": 0.4, "saturation": 0.2, "hue": 0.1}
SOLARIZE_THRESHOLD = 128.0


def get_preset(name: str) -> AugmentConfig:
    """Returns the preset called `name`: a key of `PRESETS` (none, flip, shift, pad_crop, light, medium, strong, views).

    Args:
        name: str. The preset's name.

    Example:

    >>> preset = get_preset("light")
    >>> preset.crop_scale, preset.flip, preset.mixup_alpha
    ((0.35, 1.0), True, 0.0)
    """
    if name not in PRESETS:
        raise ValueError(f"Unknown augmentation preset: augment={name!r}. Expected one of {list(PRESETS)}.")
    return PRESETS[name]


def random_resized_crop(image, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=None):
    """Crops a random area fraction `scale` with aspect `ratio` of one image and resizes it to `size`.

    Args:
        image: tensor (H, W, C). Float pixels.
        size: (int, int). Output height and width.
        scale: (float, float). Range of the crop's area fraction. Defaults to (0.08, 1.0).
        ratio: (float, float). Range of the crop's aspect ratio. Defaults to (3/4, 4/3).
        seed: int or None. Op-level seed. Defaults to None.

    Example:

    >>> tuple(random_resized_crop(tf.zeros((28, 28, 1)), (32, 32)).shape)
    (32, 32, 1)
    """
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=(1, 1, 4)),
        min_object_covered=0.0,
        aspect_ratio_range=ratio,
        area_range=scale,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
        seed=seed,
    )
    crop = tf.slice(image, begin, crop_size)
    crop.set_shape((None, None, image.shape[-1]))  # tf.slice with a tensor size loses it
    return tf.image.resize(crop, size)


def random_shift(image, fraction, seed=None):
    """Shifts one image by up to `fraction` of its side each way, filling by reflection.

    Args:
        image: tensor (H, W, C) of known height and width. Float pixels.
        fraction: float. Largest shift as a fraction of the side (at least one pixel).
        seed: int or None. Op-level seed. Defaults to None.

    Example:

    >>> tuple(random_shift(tf.zeros((32, 32, 3)), 1 / 16, seed=0).shape)
    (32, 32, 3)
    """
    height, width, channels = image.shape
    pad_y, pad_x = max(round(height * fraction), 1), max(round(width * fraction), 1)
    padded = tf.pad(image, [[pad_y, pad_y], [pad_x, pad_x], [0, 0]], mode="REFLECT")
    return tf.image.random_crop(padded, (height, width, channels), seed=seed)


class Augmenter:
    """Applies a preset (or user layers) to images in [0, 255] and one-hot labels.

    `per_example` runs before batching (crop, flip, RandAugment); `per_batch` after (MixUp,
    CutMix, RandomErasing and any user-passed layer such as a keras-cv one).

    Args:
        augment: str, keras.layers.Layer, list of layers, or None. A preset name or layers to
            apply to each batch. Defaults to "none".
        image_size: (int, int). Output size of the random resized crop.
        seed: int or None. Seed of the random layers. Defaults to None.

    Example:

    >>> augmenter = Augmenter("medium", image_size=(16, 16), seed=0)
    >>> augmenter.resizes, tuple(augmenter.per_example(tf.zeros((28, 28, 1))).shape)
    (True, (16, 16, 1))
    >>> images, labels = augmenter.per_batch(tf.zeros((4, 16, 16, 1)), tf.one_hot([0, 1, 0, 1], 2))
    >>> tuple(images.shape), [round(float(total), 4) for total in tf.reduce_sum(labels, axis=1)]
    ((4, 16, 16, 1), [1.0, 1.0, 1.0, 1.0])
    """

    def __init__(self, augment="none", image_size=(224, 224), seed=None):
        self.image_size = tuple(image_size)
        self.seed = seed
        if augment is None:
            augment = "none"
        if isinstance(augment, str):
            self.config = get_preset(augment)
            self.user_layers = []
        elif isinstance(augment, AugmentConfig):
            self.config = augment
            self.user_layers = []
        else:
            layers = list(augment) if isinstance(augment, (list, tuple)) else [augment]
            for layer in layers:
                if not callable(layer):
                    raise ValueError(f"Invalid augment={augment!r}: expected a preset name, an AugmentConfig or Keras layers.")
            self.config = PRESETS["none"]
            self.user_layers = layers
        config = self.config
        self.randaugment = None
        if config.randaugment_ops:
            self.randaugment = keras.layers.RandAugment(
                value_range=(0, 255),
                num_ops=config.randaugment_ops,
                factor=config.randaugment_magnitude / 30.0,
                seed=seed,
            )
        self.mixup = keras.layers.MixUp(alpha=config.mixup_alpha, seed=seed) if config.mixup_alpha else None
        self.cutmix = keras.layers.CutMix(factor=config.cutmix_alpha, seed=seed) if config.cutmix_alpha else None
        self.erasing = None
        if config.erasing_probability:
            self.erasing = keras.layers.RandomErasing(
                factor=config.erasing_probability, value_range=(0, 255), seed=seed
            )

    @property
    def resizes(self) -> bool:
        """Whether `per_example` already brings images to `image_size`."""
        return self.config.crop_scale is not None

    def per_example(self, image):
        """Crop, shift, flip and RandAugment one float image (H, W, C) in [0, 255]."""
        config = self.config
        if config.shift:
            image = random_shift(image, config.shift, seed=self.seed)
        if config.crop_scale is not None:
            image = random_resized_crop(image, self.image_size, scale=config.crop_scale, seed=self.seed)
        if config.flip:
            image = tf.image.random_flip_left_right(image, seed=self.seed)
        if config.color_jitter or config.grayscale or config.solarize:
            image = colour_augment(image, config, self.seed)
        if self.randaugment is not None:
            channels = image.shape[-1]
            if channels == 1:  # RandAugment's colour ops want RGB
                image = tf.image.grayscale_to_rgb(image)
            image = self.randaugment(image)
            if channels == 1:
                image = tf.image.rgb_to_grayscale(image)
        return image

    def per_batch(self, images, labels):
        """MixUp/CutMix, RandomErasing and user layers on a batch; labels are one-hot floats."""
        if self.mixup is not None and self.cutmix is not None:
            images, labels = tf.cond(
                tf.random.uniform(()) < 0.5,
                lambda: _call_with_labels(self.mixup, images, labels),
                lambda: _call_with_labels(self.cutmix, images, labels),
            )
        elif self.mixup is not None:
            images, labels = _call_with_labels(self.mixup, images, labels)
        elif self.cutmix is not None:
            images, labels = _call_with_labels(self.cutmix, images, labels)
        if self.erasing is not None:
            images = self.erasing(images)
        for layer in self.user_layers:
            images, labels = _call_with_labels(layer, images, labels)
        return images, labels


def colour_augment(image, config, seed=None):
    """DINO's colour changes of one float image (H, W, C) in [0, 255]: jitter, grey, solarization, as `config` asks.

    Each draw has its own op seed (`seed` + k): ops of one graph given the same seed draw the same numbers.

    Example:

    >>> image = tf.fill((4, 4, 3), 200.0)
    >>> float(tf.reduce_max(colour_augment(image, AugmentConfig(solarize=1.0))))
    55.0
    """
    def draw(k):
        return tf.random.uniform((), seed=None if seed is None else seed + k)

    def jitter(x):
        b, c, s, h = (COLOR_JITTER[k] for k in ("brightness", "contrast", "saturation", "hue"))
        x = x * tf.random.uniform((), 1 - b, 1 + b, seed=None if seed is None else seed + 4)
        x = tf.image.random_contrast(x, 1 - c, 1 + c, seed=None if seed is None else seed + 5)
        if x.shape[-1] == 3:  # hue and saturation are colour's
            x = tf.image.random_saturation(x, 1 - s, 1 + s, seed=None if seed is None else seed + 6)
            x = tf.image.random_hue(x / 255.0, h, seed=None if seed is None else seed + 7) * 255.0
        return tf.clip_by_value(x, 0.0, 255.0)

    if config.color_jitter:
        image = tf.cond(draw(1) < config.color_jitter, lambda: jitter(image), lambda: image)
    if config.grayscale and image.shape[-1] == 3:
        image = tf.cond(draw(2) < config.grayscale, lambda: tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image)),
                        lambda: image)
    if config.solarize:
        image = tf.cond(draw(3) < config.solarize,
                        lambda: tf.where(image >= SOLARIZE_THRESHOLD, 255.0 - image, image), lambda: image)
    return image


def _call_with_labels(layer, images, labels):
    """Calls an image layer on {"images", "labels"} (Keras 3 and keras-cv style), else on images."""
    try:
        outputs = layer({"images": images, "labels": labels})
    except (TypeError, ValueError, KeyError, AttributeError):
        return layer(images), labels
    if isinstance(outputs, dict):
        return outputs["images"], tf.cast(outputs.get("labels", labels), labels.dtype)
    return outputs, labels

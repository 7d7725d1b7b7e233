"""The masked autoencoder (MAE, He et al. 2022): a keras_vit encoder on the visible patches, a light decoder, its loss.

`MaskedAutoencoder` wraps a keras_vit `VisionTransformer` (`encoder`, its layers and their names
unchanged, so the encoder IS a keras_vit backbone: `model.encoder.save(...)`, `keras_vit.ViT`
reading it) and adds the decoder of `DECODERS`. Its `compute_loss` is the MAE loss, so Keras'
own `train_step` trains it under `model.fit` on TensorFlow, JAX and PyTorch alike.

Example:

>>> import numpy as np
>>> model = build_mae(image_size=16, channels=3, patch_size=4, hidden_size=16, num_layers=1, num_heads=2,
...                   mlp_dim=32, decoder="test")
>>> out = model(np.zeros((2, 16, 16, 3), "float32"))
>>> tuple(out["logits"].shape), float(np.asarray(out["mask"]).sum(axis=1)[0])
((2, 16, 48), 12.0)
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
from keras import ops

from keras_vit import configs
from keras_vit._validation import check_bool, check_choice
from keras_vit.layers import Patches, TransformerBlock
from keras_vit.layers.mask_tokens import MaskTokens, mae_sincos_table
from keras_vit.layers.random_masking import RandomPatchMasking

MASK_RATIO = 0.75  # MAE's: 75% of the patches hidden
# The per-patch normalisation of the target (MAE's norm_pix_loss): (x - mean) / sqrt(var + eps).
NORM_PIX_EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class DecoderSize:
    """The decoder's width, depth, heads and MLP width."""

    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int


# MAE's decoder (512 wide, 8 blocks) for ViT-B and larger; narrower and shallower ones for small
# encoders, where MAE's own would cost more than the encoder it trains (MAE's ablation: a 1-block
# decoder loses little in fine-tuning, Table 1a).
DECODERS = {
    "base": DecoderSize(512, 8, 16, 2048),
    "small": DecoderSize(256, 4, 8, 1024),
    "tiny": DecoderSize(128, 2, 4, 512),
    "test": DecoderSize(16, 1, 2, 32),
}


def decoder_for(hidden_size: int) -> str:
    """The `DECODERS` row for an encoder of width `hidden_size`: base from 768, small from 384, else tiny.

    Example:

    >>> decoder_for(768), decoder_for(384), decoder_for(192)
    ('base', 'small', 'tiny')
    """
    return "base" if hidden_size >= 768 else "small" if hidden_size >= 384 else "tiny"


def check_mae_encoder(encoder, name="encoder"):
    """Refuses (ValueError) an encoder MAE cannot mask: one needing every patch's place or no fixed patch grid."""
    config = getattr(encoder, "vit_config", None)
    if config is None:
        raise ValueError(f"Invalid {name}={getattr(encoder, 'name', encoder)!r}: expected a keras_vit VisionTransformer "
                         "(keras_vit.ViT), whose layers MAE runs on the visible patches.")
    problems = []
    for field, why in (("naflex", "patch sequences of any aspect"), ("rope", "rotary position of every patch"),
                       ("stem", "a ResNet stem"), ("backbone", "a custom backbone"),
                       ("fc_norm", "no LayerNorm on the tokens")):
        if config.get(field):
            problems.append(f"{field}={config[field]!r} ({why})")
    if config.get("image_size") is None or None in tuple(config["image_size"]):
        problems.append("image_size=None (MAE masks a fixed grid of patches)")
    if problems:
        raise ValueError(f"Invalid {name}={encoder.name!r} for masked autoencoding: " + "; ".join(problems)
                         + ". Use a plain ViT on a patch grid.")


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedAutoencoder(keras.Model):
    """MAE: the encoder runs on the visible patches only, the decoder predicts the hidden ones' pixels.

    Calling it on images (B, H, W, C), raw pixels as the encoder takes them (its `preprocessing`
    layer scales them inside), returns {"logits": (B, N, P*P*C) float32, the predicted pixels of
    every patch in the encoder's scaling (per-patch normalised with `norm_pix_loss`), "mask": (B,
    N), 1 for a hidden patch}. `noise` (B, N) fixes the mask (Hugging Face's `ViTMAEModel(noise=)`);
    without it each call draws one. The loss (`compute_loss`) is the mean squared error on the
    hidden patches only, in float32 whatever the dtype policy.

    Args:
        encoder: `keras_vit.models.vit_model.VisionTransformer`. A plain ViT on a fixed patch grid
            (see `check_mae_encoder`), e.g. `keras_vit.ViT(..., include_top=False)`.
        decoder: str or dict. A `DECODERS` name or a `DecoderSize`'s fields. Defaults to "tiny".
        mask_ratio: float. Share of the patches hidden, in (0, 1). Defaults to 0.75.
        norm_pix_loss: bool. The target is each patch's pixels normalised by their own mean and
            (unbiased) variance, MAE's default for its best results. Defaults to True.
        seed: int or None. Seed of the masks. Defaults to None.
        fixed_position_embedding: bool. The encoder's learned position table is not trained while
            pre-training (MAE keeps its sine-cosine table fixed); a `.keras` file of the encoder
            fine-tunes it as usual. Defaults to True.

    Example:

    >>> import keras_vit
    >>> encoder = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
    ...                         image_size=16, include_top=False, pooling="gap", preprocessing="unit")
    >>> model = MaskedAutoencoder(encoder, decoder="test", mask_ratio=0.5)
    >>> model.num_patches, model.masking.visible_count(model.num_patches)
    (16, 8)
    """

    def __init__(self, encoder, decoder="tiny", mask_ratio=MASK_RATIO, norm_pix_loss=True, seed=None,
                 fixed_position_embedding=True, **kwargs):
        kwargs.setdefault("name", "mae")
        super().__init__(**kwargs)
        if isinstance(encoder, dict):  # from_config
            encoder = keras.saving.deserialize_keras_object(encoder)
        check_mae_encoder(encoder)
        if isinstance(decoder, str):
            check_choice("decoder", decoder, tuple(DECODERS))
            decoder = dataclasses.asdict(DECODERS[decoder])
        size = DecoderSize(**decoder)
        check_bool("norm_pix_loss", norm_pix_loss)
        check_bool("fixed_position_embedding", fixed_position_embedding)
        config = encoder.vit_config
        embedding = encoder.get_layer("embedding")
        self.encoder = encoder
        self.decoder_size = size
        self.norm_pix_loss = bool(norm_pix_loss)
        self.seed = seed
        self.fixed_position_embedding = bool(fixed_position_embedding)
        if fixed_position_embedding and getattr(embedding, "pos_embedding", None) is not None:
            embedding.pos_embedding.trainable = False
        self.patch_size = config["patch_size"]
        self.grid_size = tuple(embedding.grid_size or (config["image_size"][0] // self.patch_size,
                                                       config["image_size"][1] // self.patch_size))
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.num_prefix_tokens = embedding.num_prefix_tokens
        self.channels = encoder.inputs[0].shape[-1]
        self.masking = RandomPatchMasking(mask_ratio, seed=seed, name="masking")
        visible = self.masking.visible_count(self.num_patches)
        if visible < 1:
            raise ValueError(f"Invalid mask_ratio={mask_ratio!r}: it leaves no patch of the {self.num_patches} "
                             f"visible (int({self.num_patches} x (1 - {mask_ratio})) = 0). Lower it, or use more "
                             "patches (a smaller patch or larger images).")
        if visible == self.num_patches:
            raise ValueError(f"Invalid mask_ratio={mask_ratio!r}: it hides none of the {self.num_patches} patches. "
                             "Raise it.")
        self.patches = Patches(self.patch_size, name="patches")
        epsilon = config["layer_norm_epsilon"]
        self.decoder_embed = keras.layers.Dense(size.hidden_size, name="decoder_embed")
        self.mask_tokens = MaskTokens(self.grid_size, self.num_prefix_tokens, name="decoder_tokens")
        self.decoder_blocks = [
            TransformerBlock(size.hidden_size, size.num_heads, size.mlp_dim, approximate_gelu=config["approximate_gelu"],
                             layer_norm_epsilon=epsilon, mlp_activation=config["mlp_activation"],
                             name=f"decoderblock_{i}")
            for i in range(size.num_layers)
        ]
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=epsilon, name="decoder_norm")
        # float32: the loss compares it with the pixels in float32 whatever the policy.
        self.decoder_pred = keras.layers.Dense(self.patch_size**2 * self.channels, dtype="float32", name="decoder_pred")
        self.build(encoder.inputs[0].shape)

    def build(self, input_shape):
        width = self.encoder.vit_config["hidden_size"]
        tokens = (None, self.num_prefix_tokens + self.masking.visible_count(self.num_patches))
        full = (None, self.num_prefix_tokens + self.num_patches, self.decoder_size.hidden_size)
        self.decoder_embed.build(tokens + (width,))
        self.mask_tokens.build(tokens + (self.decoder_size.hidden_size,))
        for layer in self.decoder_blocks + [self.decoder_norm, self.decoder_pred]:
            layer.build(full)
        self.built = True

    @property
    def mask_ratio(self):
        """float. Share of the patches hidden."""
        return self.masking.mask_ratio

    def _layer(self, name):
        try:
            return self.encoder.get_layer(name)
        except ValueError:
            return None

    def scaled(self, images):
        """The images as the encoder's patch embedding sees them: through its `preprocessing` layer, if any."""
        preprocessing = self._layer("preprocessing")
        return preprocessing(images) if preprocessing is not None else ops.cast(images, "float32")

    def encode(self, images, noise=None, training=None):
        """(tokens after the final norm: prefix then visible patches, mask, ids_restore) of images."""
        tokens = self.encoder.get_layer("embedding")(self.scaled(images))
        prefix = self.num_prefix_tokens
        visible, mask, ids_restore = self.masking(tokens[:, prefix:], noise=noise)
        x = ops.concatenate([tokens[:, :prefix], visible], axis=1)
        x = self.encoder.get_layer("embedding_dropout")(x, training=training)
        pre_norm = self._layer("pre_norm")
        if pre_norm is not None:
            x = pre_norm(x)
        for i in range(self.encoder.vit_config["num_layers"]):
            x = self.encoder.get_layer(f"encoderblock_{i}")(x, training=training)
        return self.encoder.get_layer("encoder_norm")(x), mask, ids_restore

    def decode(self, tokens, ids_restore, training=None):
        """Predicted pixels (B, N, P*P*C) of every patch, from the encoded tokens."""
        x = self.mask_tokens(self.decoder_embed(tokens), ids_restore)
        for block in self.decoder_blocks:
            x = block(x, training=training)
        return self.decoder_pred(self.decoder_norm(x))[:, self.num_prefix_tokens:]

    def call(self, images, training=None, noise=None):
        tokens, mask, ids_restore = self.encode(images, noise=noise, training=training)
        return {"logits": self.decode(tokens, ids_restore, training=training), "mask": mask}

    def target(self, images):
        """The pixels the decoder learns to predict (B, N, P*P*C) float32: each patch's, normalised with `norm_pix_loss`."""
        target = ops.cast(self.patches(self.scaled(images)), "float32")
        if not self.norm_pix_loss:
            return target
        mean = ops.mean(target, axis=-1, keepdims=True)
        count = target.shape[-1]
        variance = ops.sum(ops.square(target - mean), axis=-1, keepdims=True) / (count - 1)  # unbiased, as MAE's
        return (target - mean) / ops.sqrt(variance + NORM_PIX_EPSILON)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """MAE's loss: the mean squared error of the hidden patches' pixels, averaged over the hidden patches."""
        loss = mae_loss(self.target(x), y_pred["logits"], y_pred["mask"])
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def reconstruct(self, images, noise=None):
        """(mask (B, N), the images with the hidden patches' pixels predicted, in the images' own pixel units).

        With `norm_pix_loss` each predicted patch is given back the mean and standard deviation of
        the original patch (as MAE's visualisation does), then the encoder's scaling is undone.
        """
        out = self(images, training=False, noise=noise)
        logits, mask = ops.convert_to_numpy(out["logits"]), ops.convert_to_numpy(out["mask"])
        target = ops.convert_to_numpy(ops.cast(self.patches(self.scaled(images)), "float32"))
        if self.norm_pix_loss:
            mean = target.mean(-1, keepdims=True)
            std = np.sqrt(target.var(-1, keepdims=True, ddof=1) + NORM_PIX_EPSILON)
            logits = logits * std + mean
        patches = np.where(mask[..., None] > 0, logits, target)
        pixels = self._unpatchify(patches)
        scaling = self.encoder.vit_config["preprocessing"]
        if scaling is not None:
            shift, scale = configs.SCALINGS[scaling]
            pixels = pixels * np.asarray(scale, "float32") + np.asarray(shift, "float32")
        return mask, pixels

    def _unpatchify(self, patches):
        rows, cols = self.grid_size
        p, c = self.patch_size, self.channels
        x = patches.reshape(-1, rows, cols, p, p, c).transpose(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, rows * p, cols * p, c)

    def get_config(self):
        return {
            "name": self.name, "encoder": keras.saving.serialize_keras_object(self.encoder),
            "decoder": dataclasses.asdict(self.decoder_size), "mask_ratio": self.mask_ratio,
            "norm_pix_loss": self.norm_pix_loss, "seed": self.seed,
            "fixed_position_embedding": self.fixed_position_embedding,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def mae_loss(target, logits, mask):
    """Mean over the hidden patches (mask 1) of each patch's mean squared error, in float32.

    Example:

    >>> import numpy as np
    >>> target, logits = np.zeros((1, 2, 4), "float32"), np.ones((1, 2, 4), "float32")
    >>> float(mae_loss(target, logits, np.array([[1.0, 0.0]])))
    1.0
    """
    error = ops.mean(ops.square(ops.cast(logits, "float32") - ops.cast(target, "float32")), axis=-1)
    mask = ops.cast(mask, "float32")
    return ops.sum(error * mask) / ops.sum(mask)


def build_mae(*, image_size, channels=3, patch_size, hidden_size, num_layers, num_heads, mlp_dim, scaling="unit",
              decoder=None, mask_ratio=MASK_RATIO, norm_pix_loss=True, seed=None, **vit_args):
    """A fresh `MaskedAutoencoder`: a keras_vit ViT encoder (mean-pooled: its features for probes) and a decoder.

    The encoder's position embedding starts as MAE's sine-cosine table and is not trained
    (`MaskedAutoencoder`'s `fixed_position_embedding`); a checkpoint made from it fine-tunes it as any learned table.

    Args:
        image_size: int. Square input side; a multiple of `patch_size`.
        channels: int. 1 or 3. Defaults to 3.
        patch_size, hidden_size, num_layers, num_heads, mlp_dim: int. The encoder (`keras_vit.ViT`'s).
        scaling: str or None. The pixel scaling inside the encoder (`configs.SCALINGS`). Defaults to "unit".
        decoder: str, dict or None. A `DECODERS` name or fields; None for `decoder_for(hidden_size)`.
            Defaults to None.
        mask_ratio: float. Defaults to 0.75.
        norm_pix_loss: bool. Defaults to True.
        seed: int or None. Seed of the masks. Defaults to None.
        **vit_args: more `keras_vit.ViT` arguments of the encoder (layer_norm_epsilon, ...).
    """
    from keras_vit.models.vit import ViT

    if image_size % patch_size:
        raise ValueError(f"Invalid image_size={image_size!r}: not a multiple of patch_size={patch_size!r}; the patches "
                         "must tile the image. Pass an image size that is a multiple of the patch (--image-size).")
    encoder = ViT(image_size=image_size, input_shape=(image_size, image_size, channels), patch_size=patch_size,
                  hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, mlp_dim=mlp_dim,
                  include_top=False, pooling="gap", preprocessing=scaling, name="vit_mae_encoder", **vit_args)
    embedding = encoder.get_layer("embedding")
    if embedding.position_embedding == "learned" and hidden_size % 4 == 0:
        rows, cols = embedding.grid_size
        prefix = np.zeros((embedding.num_position_prefix_tokens, hidden_size), "float32")
        embedding.pos_embedding.assign(np.concatenate([prefix, mae_sincos_table(rows, cols, hidden_size)])[None])
    return MaskedAutoencoder(encoder, decoder=decoder or decoder_for(hidden_size), mask_ratio=mask_ratio,
                             norm_pix_loss=norm_pix_loss, seed=seed)

"""What `keras-vit pretrain --method mae` does differently from DINO and SimCLR: its encoder, header line and figure.

The run itself (data, budget, crash-safe fit, run directory) is `keras_vit.pretraining.run.pretrain`'s;
the model is `keras_vit.pretraining.mae.MaskedAutoencoder`, from a checkpoint (`keras_vit.pretraining.hf.load_mae`)
or built for the images and budget (`build`), and its checkpoint a Hugging Face ViT-MAE folder
(`keras_vit.pretraining.hf.save_mae_hf`) with `reconstructions.png` beside it in the run directory.
"""

from __future__ import annotations

import math

import numpy as np

from keras_vit.pretraining import hf, mae

FIGURE = "reconstructions.png"
FIGURE_IMAGES = 6
# The encoder a budget buys, by ms of budget per training image (`training.budget.milliseconds_per_image`):
# (bound, encoder fields). A short budget buys passes over the data, not width and depth; the last row is
# ViT-Ti, the model of the small-data MAE results (IcarusWizard/MAE: CIFAR-10 74.1% -> 89.8%).
BUDGET_MODELS = (
    (20.0, {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "mlp_dim": 256}),
    (80.0, {"hidden_size": 192, "num_layers": 6, "num_heads": 3, "mlp_dim": 768}),
    (math.inf, {"hidden_size": 192, "num_layers": 12, "num_heads": 3, "mlp_dim": 768}),
)
DEFAULT_MODEL = BUDGET_MODELS[1][1]  # without a budget
# The image side over the patch: 8x8 patches on small images (64 patches, 16 seen at 75% hidden).
DEFAULT_GRID = 8


def budget_model(budget_seconds, num_train):
    """(encoder fields, why) a budget buys for `num_train` images (`BUDGET_MODELS`); the default without one.

    Example:

    >>> budget_model(1200, 25_000)[0]["num_layers"], budget_model(None, 25_000)[1]
    (6, 'the default encoder (no budget)')
    """
    if budget_seconds is None:
        return dict(DEFAULT_MODEL), "the default encoder (no budget)"
    from keras_vit.training import budget

    ms = budget.milliseconds_per_image(budget_seconds, num_train)
    fields = next(dict(row) for bound, row in BUDGET_MODELS if ms < bound)
    return fields, (f"{budget_seconds / 60:g} min for {num_train:,} images: {ms:.3g} ms per image buys "
                    f"{fields['num_layers']} blocks of width {fields['hidden_size']}")


def build(config, name, source, num_train, data_channels):
    """(`mae.MaskedAutoencoder`, reasons for the header) of the run: from `weights`, or built for the images and budget."""
    from keras_vit.pretraining.run import image_side

    if config.weights is not None:
        model, info = hf.load_mae(config.weights, scaling=config.scaling, image_size=config.image_size,
                                  patch_size=config.model.get("patch_size"), mask_ratio=config.mask_ratio,
                                  decoder=config.decoder, seed=config.seed, log=lambda line: None)
        reasons = [f"weights {config.weights}: " + (f"image {info.image_size[0]} px ({info.image_size_reason}), "
                                                    f"scaling {info.scaling} ({info.scaling_reason})"
                                                    if info is not None else "a saved masked autoencoder")]
        if config.channels is not None and config.channels != model.channels:
            raise ValueError(f"Contradicting {name('channels')}={config.channels} and {name('weights')}="
                             f"{config.weights!r}: the checkpoint takes {model.channels}-channel images.")
        return model, reasons
    size, size_reason = image_side(config, name, source)
    fields, model_reason = budget_model(config.budget_seconds, num_train)
    given = {k: v for k, v in config.model.items() if v is not None}
    if given:
        fields.update(given)
        model_reason += f"; given: {', '.join(f'{name(k)} {v}' for k, v in given.items())}"
    patch_reason = "given"
    if "patch_size" not in fields:
        divisors = [p for p in range(1, size + 1) if size % p == 0]
        fields["patch_size"] = min(divisors, key=lambda p: (abs(p - size / DEFAULT_GRID), p))
        patch_reason = f"{size // fields['patch_size']}x{size // fields['patch_size']} patches"
    if size % fields["patch_size"]:
        raise ValueError(f"Invalid {name('image_size')}={size}: not a multiple of {name('patch_size')}="
                         f"{fields['patch_size']}; the patches must tile the image.")
    ratio, patches = config.mask_ratio or mae.MASK_RATIO, (size // fields["patch_size"]) ** 2
    if int(patches * (1 - ratio)) < 1:
        raise ValueError(f"Invalid {name('mask_ratio')}={ratio:g}: it leaves none of the {patches} patches visible. "
                         f"Lower it, or pass a smaller {name('patch_size')}.")
    channels = config.channels or data_channels
    scaling = config.scaling or "unit"
    model = mae.build_mae(image_size=size, channels=channels, scaling=scaling, decoder=config.decoder,
                          mask_ratio=config.mask_ratio or mae.MASK_RATIO, seed=config.seed, **fields)
    reasons = [model_reason, f"image {size} px ({size_reason}), patch {fields['patch_size']} ({patch_reason}), "
               f"{channels} channel{'s' if channels > 1 else ''}, scaling {scaling}"]
    return model, reasons


def model_line(model):
    """The header's Model line of a masked autoencoder."""
    encoder, size = model.encoder.vit_config, model.decoder_size
    visible = model.masking.visible_count(model.num_patches)
    return (f"MAE: encoder {encoder['num_layers']} block(s) of width {encoder['hidden_size']} ({encoder['num_heads']} "
            f"heads, MLP {encoder['mlp_dim']}), {model.encoder.count_params():,} parameters; decoder "
            f"{size.num_layers} block(s) of width {size.hidden_size}; {model.num_patches} patches, {visible} seen "
            f"(mask ratio {model.mask_ratio:g}); loss on {'per-patch normalised ' if model.norm_pix_loss else ''}"
            "pixels of the hidden patches")


def write_figure(model, source, image_size, channels, path, seed=0):
    """Writes the PNG of `FIGURE_IMAGES` images: originals, what the encoder saw, reconstructions; its path, or None
    without matplotlib (a line says so)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        print(f"keras-vit pretrain: no {FIGURE}: it needs matplotlib (pip install \"keras_vit[plot]\")")
        return None
    from keras_vit.data.pipeline import make_pipeline
    from keras_vit.inspect.plots import plot_mae_reconstructions

    batch = next(iter(make_pipeline(source.take(FIGURE_IMAGES), image_size=image_size, channels=channels,
                                    scaling=None, batch_size=FIGURE_IMAGES)))[0]
    images = np.asarray(batch, "float32")
    noise = np.random.default_rng(seed).random((len(images), model.num_patches)).astype("float32")
    mask, reconstructions = model.reconstruct(images, noise=noise)
    hidden = np.repeat(np.repeat(mask.reshape(-1, *model.grid_size), model.patch_size, 1), model.patch_size, 2)
    masked = np.where(hidden[..., None] > 0, 127.5, images)
    return plot_mae_reconstructions(images, masked, reconstructions, path)

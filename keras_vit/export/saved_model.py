"""SavedModel export in the TF Serving layout: base_dir/<version>/ with two serving signatures."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from keras_vit import choices
from keras_vit._validation import check_positive_int
from keras_vit.data.image_io import MAX_PIXELS, decode_image, decode_images, error_text, require  # noqa: F401  (the signatures' decoder)
from keras_vit.data.processor_graph import TF_OPS, decode_processed_images
from keras_vit.export import _common, _tensorflow_process, compute_precision
from keras_vit.image_processor import pil_resize
from keras_vit.naflex import NAFLEX_FILTER, fitted_size, processor_settings

DEFAULT_TOP_K = choices.EXPORT_TOP_K
SIGNATURES = ("serving_default", "serve_bytes")


def saved_model(
    model,
    base_dir,
    version=None,
    *,
    class_names=None,
    scaling=None,
    top_k=DEFAULT_TOP_K,
    overwrite=False,
    jit_compile=False,
    max_pixels=MAX_PIXELS,
    precision="float32",
):
    """Exports a classifier (or a depth model) for TF Serving as `base_dir/<version>/`, written atomically.

    The SavedModel has two signatures, both returning `probabilities` (batch, classes),
    `top_k_indices` (batch, k) int32, `top_k_probabilities` (batch, k) and, when class names
    are known, `top_k_labels` (batch, k) strings; for a depth model (`keras_vit.DepthEstimator`)
    they return `depth` (batch, height, width) alone:

    - `serving_default`: input `images`, float32 (batch, height, width, channels) pixels in
      [0, 255], any batch size >= 1.
    - `serve_bytes`: input `image_bytes`, a (batch,) string tensor of encoded JPEG, PNG, GIF
      (first frame), BMP or WebP files of any size, greyscale, colour or with alpha; decoded,
      converted to the model's channels, resized bilinearly (antialiased) and scaled in the
      graph (see `keras_vit.data.image_io.decode_images`); a model that keeps its checkpoint's
      image processor (`vit_config["image_processor"]`) is given the processor's resize and
      centre crop instead (`keras_vit.data.processor_graph`).

    A bad request fails with INVALID_ARGUMENT and a message naming the problem: an empty
    batch, images of the wrong shape, NaN or infinite pixels, an empty string, bytes that are not an image, or an
    image whose header declares more than `max_pixels` pixels (refused before decoding).
    The model's variables are stored once, in float32, and the graph computes in float32 also
    for a model trained under mixed precision (see `keras_vit.export`), unless
    `precision="bfloat16"`: then its layers compute in bfloat16 from those float32 variables
    (head and pixel scaling in float32), which TF Serving on a CPU with AMX runs on oneDNN's
    bfloat16 kernels (`keras_vit.export.compute_precision.bfloat16_model`; benchmarks/RESULTS.md "bfloat16 on AMX").

    The version is written to a hidden temporary folder inside `base_dir` and renamed, so TF
    Serving (which only loads folders named by integers) never sees a half-written version;
    temporary folders left by a killed export are removed by the next export to `base_dir`.
    Inputs and outputs are float32 even for a mixed-precision model.

    Args:
        model: keras.Model. A built classifier with one image input and a (batch, classes)
            output (logits or softmax).
        base_dir: str. The model's folder for TF Serving (`--model_base_path`).
        version: int or None. Version folder to write. Defaults to one more than the largest
            existing version, or 1.
        class_names: sequence of str or None. One name per class, for `top_k_labels`.
            Defaults to None (no labels output).
        scaling: None, str or (mean, std). How [0, 255] pixels map to the model's inputs when
            the model has no `preprocessing` layer: "unit", "symmetric", "imagenet" (see
            `keras_vit.configs.SCALINGS`), a (mean, std) pair on the 0..255 scale, or "none"
            (the model takes raw pixels). Must be None for a model built with
            `preprocessing=`. Defaults to None.
        top_k: int. Number of best classes in the top-k outputs (capped at the number of
            classes). Defaults to 5.
        overwrite: bool. Replace an existing version folder. Defaults to False.
        jit_compile: bool. Compile the model part of both signatures with XLA: on CPU about
            1.5x faster than without (benchmarks/RESULTS.md), but a CPU TF Serving runs it only
            when started with `--xla_cpu_compilation_enabled=true` (off by default there, an
            experimental flag), so a portable export leaves it off. Defaults to False.
        max_pixels: int. Largest width x height `serve_bytes` accepts. Defaults to
            `MAX_PIXELS` (50 million).
        precision: str. "float32", or "bfloat16" to compute in bfloat16 (opt-in: top-1 agreed with
            float32 on real photos, probabilities differ by up to about 1e-2). Defaults to "float32".

    Returns:
        The path of the written version folder.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    >>> path = saved_model(model, tempfile.mkdtemp(), class_names=["a", "b", "c"])
    >>> os.path.basename(path)
    '1'
    """
    height, width, channels = _common.input_spec(model, what="export to SavedModel")
    _, classes = _common.output_kind(model, what="export to SavedModel")
    names = _common.check_output_names(_common.class_names_of(model, class_names), classes)
    mean_std = _common.resolve_scaling(model, scaling, channels)
    check_positive_int("top_k", top_k)
    check_positive_int("max_pixels", max_pixels)
    compute_precision.check_precision(precision)
    base_dir = _checked_base_dir(base_dir)
    version = _resolve_version(base_dir, version)
    target = os.path.join(base_dir, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(
            f"Version folder {target!r} already exists; pass another version=, version=None for "
            "the next one, or overwrite=True (--overwrite) to replace it."
        )

    if _tensorflow_process.needed():
        return _tensorflow_process.call(
            "saved_model", model, base_dir, version, class_names=names, scaling=scaling, top_k=top_k,
            overwrite=overwrite, jit_compile=jit_compile, max_pixels=max_pixels, precision=precision,
        )
    model = compute_precision.compute_model(model, precision)
    k = None if classes is None else min(top_k, classes)
    module, signatures = _serving_module(model, (height, width, channels), mean_std, k, names,
                             jit_compile=jit_compile, max_pixels=max_pixels)
    with _common.atomic_directory(target, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
        extra = os.path.join(tmp, "assets.extra")
        if names is not None:
            os.makedirs(extra, exist_ok=True)
            _common.write_labels(os.path.join(extra, _common.LABELS_FILENAME), names)
        if precision != "float32":  # read back by load_predictor; float32 files keep their old layout
            os.makedirs(extra, exist_ok=True)
            with open(os.path.join(extra, compute_precision.PRECISION_FILENAME), "w") as f:
                f.write(precision + "\n")
    return target


def _finite_check(images):
    """Refuses NaN or infinite pixels, naming the first such image: an int8 model would answer them plausibly."""
    finite = tf.reduce_all(tf.math.is_finite(tf.reshape(images, [tf.shape(images)[0], -1])), axis=1)
    first_bad = tf.argmin(tf.cast(finite, tf.int32), output_type=tf.int32)
    return require(tf.reduce_all(finite), "images[{}] holds NaN or infinite pixels; expected values in [0, 255].",
                   first_bad)


def _serving_module(model, image_shape, mean_std, k, names, *, jit_compile, max_pixels):
    """A tf.Module holding each model variable once, and the signature functions by name."""
    height, width, channels = image_shape
    scale, to_probabilities = _common.scale_pixels(mean_std), _common.to_output(model)
    labels = None if names is None else tf.constant(names)

    # Scaling, the model and softmax: the part XLA can compile (no strings, fixed shapes).
    @tf.function(jit_compile=jit_compile, autograph=False)
    def probabilities_of(images):
        return to_probabilities(model(scale(images), training=False))

    def outputs(images):
        probabilities = probabilities_of(images)
        if k is None:  # a depth model: its map, no classes to rank
            return {_common.DEPTH_OUTPUT_NAME: probabilities}
        top = tf.math.top_k(probabilities, k=k)
        result = {
            "probabilities": probabilities,
            "top_k_indices": tf.cast(top.indices, tf.int32),
            "top_k_probabilities": top.values,
        }
        if labels is not None:
            result["top_k_labels"] = tf.gather(labels, top.indices)
        return result

    expected = f"(batch, {height}, {width}, {channels})".replace("None", "any")

    @tf.function(input_signature=[tf.TensorSpec((None, height, width, channels), tf.float32, name="images")])
    def serving_default(images):
        # TF Serving feeds tensors without checking them against the signature's shape.
        shape = tf.concat([tf.shape(images), [0, 0, 0, 0]], 0)  # padded: safe to index at any rank
        fits = tf.logical_and(tf.equal(tf.rank(images), 4), shape[0] > 0)
        for axis, size in enumerate((height, width, channels), start=1):
            if size is not None:
                fits = tf.logical_and(fits, tf.equal(shape[axis], size))
        check = require(
            fits, f"images must be float32 pixels of shape {expected} with batch >= 1; got shape {{}}.", tf.shape(images)
        )
        checks = [check]
        multiple = getattr(model, "pixel_multiple", None)
        if multiple and (height is None or width is None):
            # A free image size: TensorFlow's VALID patch convolution would crop, or drop a 0 px image.
            sides = shape[1:3]
            checks.append(require(
                tf.reduce_all(tf.logical_and(sides > 0, tf.equal(sides % multiple, 0))),
                f"images must have a height and width that are positive multiples of {multiple} (the patch); "
                "got shape {}.", tf.shape(images)))
        with tf.control_dependencies(checks):
            images = tf.identity(images)
        with tf.control_dependencies([_finite_check(images)]):
            return outputs(tf.identity(images))

    module = tf.Module()
    # The model's variables themselves (not Keras' wrappers), so the checkpoint stores each once.
    module.model_variables = [variable.value for variable in model.variables]
    signatures = {"serving_default": serving_default}
    # serve_bytes must know the size to resize to; a model with a free image size gets only the
    # pixel signature.
    if height is not None and width is not None:

        processor = _common.image_processor(model)

        @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="image_bytes")])
        def serve_bytes(image_bytes):
            if processor is not None:  # the checkpoint's own resize and centre crop
                return outputs(decode_processed_images(image_bytes, processor, height, width, channels,
                                                       max_pixels=max_pixels))
            return outputs(decode_images(image_bytes, height, width, channels, max_pixels=max_pixels))

        signatures["serve_bytes"] = serve_bytes
    return module, signatures


def naflex_saved_model(
    model,
    base_dir,
    version=None,
    *,
    max_num_patches=None,
    scaling="auto",
    weights=None,
    overwrite=False,
    max_pixels=MAX_PIXELS,
):
    """Exports a NaFlex model's image embedding for TF Serving as `base_dir/<version>/`, written atomically.

    One signature, `serving_default`: input `image_bytes`, a (batch,) string tensor of encoded
    JPEG, PNG, GIF (first frame), BMP or WebP files of any size and aspect (checked and
    converted to the model's channels as `serve_bytes` of `saved_model` does); output
    `embeddings` (batch, D) float32. In the graph each image goes through what
    `keras_vit.naflex.naflex_inputs` does: resized to fit `max_num_patches` exactly as Hugging
    Face's `Siglip2ImageProcessor` computes the size, with the antialiased bilinear filter,
    rounded to uint8 as the reference does, scaled, cut into its own grid of patches and padded;
    the model masks the padding. An image so elongated that it needs more patches than the
    budget at any scale fails with INVALID_ARGUMENT naming it.

    Args:
        model: keras.Model. A NaFlex model (`keras_vit.ViT(..., naflex=True)`) whose output is
            one vector per image (`include_top=False` with pooling).
        base_dir: str. The model's folder for TF Serving (`--model_base_path`).
        version: int or None. Version folder to write. Defaults to one more than the largest
            existing version, or 1.
        max_num_patches: int or None. The patch budget of every image; None takes the one
            the `weights` processor states, else 256 (SigLIP 2's). Defaults to None.
        scaling: str or (mean, std). How [0, 255] pixels map to the model's inputs: a key of
            `keras_vit.configs.SCALINGS`, a (mean, std) pair on the 0..255 scale, "none", or
            "auto": the `weights` processor's, else "symmetric" (SigLIP 2's). Defaults to "auto".
        weights: str, `keras_vit.weights.Checkpoint` or None. The checkpoint the model was
            loaded from, whose `preprocessor_config.json` states the budget, patch size and
            scaling (see `keras_vit.naflex.naflex_inputs`). Defaults to None.
        overwrite: bool. Replace an existing version folder. Defaults to False.
        max_pixels: int. Largest width x height accepted. Defaults to `MAX_PIXELS`.

    Returns:
        The path of the written version folder.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny_siglip2", include_top=False)
    >>> os.path.basename(naflex_saved_model(model, tempfile.mkdtemp(), max_num_patches=24))
    '1'
    """
    config = getattr(model, "vit_config", None) or {}
    if not config.get("naflex"):
        raise ValueError(f"Cannot export model {getattr(model, 'name', model)!r} with naflex_saved_model: it is not a "
                         "NaFlex model (keras_vit.ViT(..., naflex=True)); saved_model exports models on images.")
    outputs = model.outputs
    if len(outputs) != 1 or len(outputs[0].shape) != 2 or config["include_top"]:
        raise ValueError(
            f"Cannot export model {model.name!r} with naflex_saved_model: it exports one embedding per image, and the "
            f"model returns {[tuple(o.shape) for o in outputs]}{' through a head' if config['include_top'] else ''}. "
            "Build it with include_top=False and a pooling."
        )
    _, max_num_patches, scaling = processor_settings(weights, config["patch_size"], max_num_patches, scaling)
    check_positive_int("max_pixels", max_pixels)
    mean_std = _common.resolve_scaling(model, _common.NO_SCALING if scaling is None else scaling, config["channels"])
    base_dir = _checked_base_dir(base_dir)
    version = _resolve_version(base_dir, version)
    target = os.path.join(base_dir, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"Version folder {target!r} already exists; pass another version= or overwrite=True.")
    if _tensorflow_process.needed():
        return _tensorflow_process.call("naflex_saved_model", model, base_dir, version, max_num_patches=max_num_patches,
                                        scaling=scaling, overwrite=overwrite, max_pixels=max_pixels)
    model = compute_precision.float32_model(model)
    inputs = _naflex_graph_inputs(config, max_num_patches, _common.scale_pixels(mean_std), max_pixels)

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="image_bytes")], autograph=False)
    def serving_default(image_bytes):
        return {"embeddings": tf.cast(model(inputs(image_bytes), training=False), tf.float32)}

    module = tf.Module()
    module.model_variables = [variable.value for variable in model.variables]
    with _common.atomic_directory(target, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": serving_default})
    return target


def _naflex_graph_inputs(config, max_num_patches, scale, max_pixels):
    """The graph function: encoded images (batch,) -> a NaFlex model's inputs, as `keras_vit.naflex.naflex_inputs`."""
    import tensorflow.experimental.numpy as tnp

    patch, channels = config["patch_size"], config["channels"]
    depth = patch * patch * channels

    def one_image(data, index):
        image = decode_image(data, channels, max_pixels=max_pixels, index=index)
        size = tf.shape(image)
        height, width = (tf.cast(side, tf.int32) for side in fitted_size(
            tf.cast(size[0], tf.float64), tf.cast(size[1], tf.float64), patch, max_num_patches, xp=tnp))
        rows, cols = height // patch, width // patch
        fits = require(rows * cols <= max_num_patches,
                       f"image_bytes[{{}}] of {{}} x {{}} pixels needs a {{}} x {{}} grid of {patch}-pixel patches even "
                       f"at the smallest scale, over max_num_patches={max_num_patches}; crop it.",
                       index, size[1], size[0], rows, cols)
        # As keras_vit.naflex.resize_antialiased resizes uint8: PIL's resize, in the same arithmetic.
        sides = [tf.cast(side, tf.float64) for side in (size[0], size[1], height, width)]
        pixels = scale(tf.cast(pil_resize(tf.cast(image, tf.float64), *sides, NAFLEX_FILTER, xp=TF_OPS), tf.float32))
        cut = tf.transpose(tf.reshape(pixels, (rows, patch, cols, patch, channels)), (0, 2, 1, 3, 4))
        with tf.control_dependencies([fits]):
            patches = tf.pad(tf.reshape(cut, (rows * cols, depth)), [[0, max_num_patches - rows * cols], [0, 0]])
        return tf.ensure_shape(patches, (max_num_patches, depth)), tf.stack([rows, cols])

    def inputs(image_bytes):
        count = tf.size(image_bytes)
        with tf.control_dependencies([require(count > 0, "image_bytes is an empty batch; send at least one image.")]):
            indices = tf.range(count)
        patches, shapes = tf.map_fn(
            lambda index: one_image(image_bytes[index], index), indices,
            fn_output_signature=(tf.TensorSpec((max_num_patches, depth), tf.float32), tf.TensorSpec((2,), tf.int32)))
        return {"patches": patches, "spatial_shapes": shapes}

    return inputs


def _checked_base_dir(base_dir):
    if not isinstance(base_dir, (str, os.PathLike)) or not os.fspath(base_dir):
        raise ValueError(f"Invalid base_dir={base_dir!r}. Expected a folder path.")
    base_dir = os.path.abspath(os.fspath(base_dir))
    if os.path.exists(base_dir) and not os.path.isdir(base_dir):
        raise ValueError(f"Invalid base_dir={base_dir!r}: it exists and is not a folder.")
    return base_dir


def _resolve_version(base_dir, version):
    if version is None:
        existing = []
        if os.path.isdir(base_dir):
            existing = [int(name) for name in os.listdir(base_dir) if name.isdigit()]
        return max(existing, default=0) + 1
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    if not isinstance(version, (int, np.integer)) or isinstance(version, bool) or version < 1:
        raise ValueError(f"Invalid version={version!r}. Expected an integer >= 1 (TF Serving version folder).")
    return int(version)

"""`ImageTextModel`: a CLIP, SigLIP or SigLIP 2 two-tower checkpoint as two Keras encoders, its tokenizer and its scores.

The image tower is the one `keras_vit.ViT(weights=folder, include_top=False)` reads (its output
the unnormalised image embedding: CLIP's after `visual_projection`, SigLIP's attention-pooled
head); the text tower is `keras_vit.text.text_tower`'s, its weights read from the same file
(`keras_vit.weights.huggingface.text_tower`); the tokenizer is `keras_vit.text.tokenizers`'s.
Scores are transformers' `logits_per_image`: the stored scale (exp'd) times the cosine
similarity, plus SigLIP's stored bias; CLIP's zero-shot pipeline takes their softmax, SigLIP's
their sigmoid. An open_clip folder (`open_clip_config.json`, `open_clip_model.safetensors`) of
open_clip's own CLIP is read as a CLIP one (`keras_vit.weights.open_clip_layout`), with
open_clip's tokenizer rules and eval transform.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import warnings

import keras
import numpy as np

from keras_vit._atomic import atomic_directory, write_json
from keras_vit.image_processor import process_images
from keras_vit.models.vit import ViT
from keras_vit.text.text_tower import TEXT_FAMILIES, build_text_tower, text_tower_config
from keras_vit.text.tokenizers import TOKENIZER_CONFIG, TOKENIZER_FILES, read_tokenizer
from keras_vit.weights import Checkpoint, hub, open_clip_layout
from keras_vit.weights.config_json import config_value, read_hf_config
from keras_vit.weights.files import WEIGHTS_FILE, CheckpointError, read_safetensors, read_weights_folder, \
    write_safetensors
from keras_vit.weights.hf_writer import save_hf as save_image_tower
from keras_vit.weights.huggingface import read_hf_family, text_tower as text_keys
from keras_vit.weights.mapping import MappingContext, apply_entries, build_entries, model_tensors
from keras_vit.weights.preprocessing import HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE, read_preprocessing

KINDS = tuple(TEXT_FAMILIES)
# Files beside the weights that a two-tower folder keeps and save_hf copies: tokenizer and processors.
SIDE_FILES = tuple(dict.fromkeys(
    [name for options in TOKENIZER_FILES.values() for names in options for name in names]
    + [TOKENIZER_CONFIG, "special_tokens_map.json", HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE]))
# What a Hub repository without a Hugging Face model.safetensors is fetched for: open_clip's config and weights.
OPEN_CLIP_FILES = (open_clip_layout.CONFIG_FILE, open_clip_layout.WEIGHTS_FILE)
# Keras' resize names of the processors' PIL filters.
_RESIZE = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest", "lanczos": "lanczos3"}


class ImageTextModel:
    """A two-tower image-text checkpoint (CLIP, SigLIP, SigLIP 2): embeddings of images and texts, and their scores.

    Args:
        weights: str. A Hugging Face two-tower folder (`config.json` of model_type "clip",
            "siglip" or "siglip2", `model.safetensors`, its tokenizer files and
            `preprocessor_config.json` or `processor_config.json` beside), an open_clip
            folder of open_clip's CLIP (`open_clip_config.json`, `open_clip_model.safetensors`
            and Hugging Face CLIP tokenizer files, as open_clip's Hub push writes them), or a
            Hub id "hf-hub:ORG/NAME[@REVISION]" of either.
        cache_dir: str or None. huggingface_hub cache root for a Hub id. Defaults to None.
        token: str or None. Hugging Face token for a gated or private repository. Defaults to None.

    Attributes:
        kind: "clip", "siglip" or "siglip2". image_encoder, text_encoder: keras.Model, to
        the unnormalised embeddings. tokenizer: `keras_vit.text.tokenizers.TextTokenizer`.
        logit_scale: float, already exp'd. logit_bias: float, None for CLIP (but an open_clip
        CLIP's that stores one). path: the folder. open_clip: whether it is an open_clip folder.

    Example:

    >>> try:
    ...     ImageTextModel(weights=os.devnull)
    ... except ValueError as error:
    ...     print(str(error).split(":")[0])
    Invalid weights='/dev/null'
    """

    def __init__(self, weights, *, cache_dir=None, token=None):
        self.path = _folder(weights, cache_dir, token)
        self.open_clip = open_clip_layout.is_open_clip_folder(self.path)
        if self.open_clip:
            folder = open_clip_layout.read_open_clip_folder(self.path)
            config_path, self.hf_config, raw = folder.config_path, folder.hf_config, folder.tensors
            origins = folder.origins
            self._preprocessing = folder.preprocessing
        else:
            config_path = os.path.join(self.path, "config.json")
            self.hf_config = read_hf_config(config_path, self.path)
            raw, origins, self._preprocessing = read_weights_folder(self.path), {}, None
        self.kind = _kind(self.hf_config, config_path, self.path)
        tensors, names = text_keys.text_tensors(raw)
        names = _as_stored(names, origins)
        family = TEXT_FAMILIES[self.kind]
        projection = tensors.get(f"{family.projection}.weight")
        if projection is None:
            raise ValueError(f"Invalid weights={weights!r}: {self.path!r} holds no text tower (no "
                             f"{family.projection}.weight in its weights); it is an image model only.")
        text_config = text_tower_config(self.hf_config, config_path, projection.shape[0])
        self.text_encoder = build_text_tower(text_config)
        entries = build_entries(self.text_encoder, MappingContext(text_keys.LAYOUT_NAME, tensors, "bilinear"))
        apply_entries(entries, tensors, names=names)
        self.logit_scale = math.exp(_scalar(raw, "logit_scale", self.path))
        stores_bias = self.kind != "clip" or (self.open_clip and "logit_bias" in raw)
        self.logit_bias = _scalar(raw, "logit_bias", self.path) if stores_bias else None
        if self.open_clip:
            read = read_hf_family(raw, self.hf_config, config_path, folder.weights_path)
            read[2].update(_as_stored(read[2], origins))
            image_weights = Checkpoint.of_part(folder.weights_path, read, folder.preprocessing)
        else:
            image_weights = self.path
        self.image_encoder = ViT(weights=image_weights, include_top=False)
        self.tokenizer = read_tokenizer(self.path, self.kind, text_config["max_length"], open_clip=self.open_clip)
        self.naflex = bool(self.image_encoder.vit_config.get("naflex"))

    @property
    def preprocessing(self):
        """The checkpoint's `keras_vit.weights.Preprocessing` (mean, std, resize, crop); None where none is stated."""
        if self._preprocessing is None:
            self._preprocessing = read_preprocessing(self.path, "hf")
        return self._preprocessing

    def tokenize(self, texts):
        """{"input_ids", "attention_mask"} int32 arrays of `texts`, as the checkpoint's processor gives them."""
        return self.tokenizer(texts)

    def encode_texts(self, texts, batch_size=256):
        """L2-normalised text embeddings (n, d) of `texts` (transformers' `text_embeds`)."""
        return _normalised(_in_batches(self.text_encoder, self.tokenize(texts), batch_size))

    def encode_images(self, images, batch_size=32):
        """L2-normalised image embeddings (n, d) of images of any size in [0, 255] (transformers' `image_embeds`)."""
        return _normalised(_in_batches(self.image_encoder, self._prepare_images(images), batch_size))

    def logits(self, images, texts):
        """transformers' `logits_per_image` (n_images, n_texts): scale x cosine similarity (+ SigLIP's bias)."""
        scores = self.logit_scale * (self.encode_images(images) @ self.encode_texts(texts).T)
        return scores + self.logit_bias if self.logit_bias is not None else scores

    def _prepare_images(self, images):
        """What `image_encoder` takes from images in [0, 255]: the checkpoint's processor, resize to scaling.

        Float pixels are rounded to uint8 values first, as the processors resize 8-bit images.
        A processor that states its resize and crop (`keras_vit.image_processor`) is applied
        exactly; NaFlex cuts its patches (`keras_vit.naflex`); a processor that states neither
        (no resize) leaves an antialiased resize to the tower's size in its filter.
        """
        images = [np.asarray(image) for image in (images if isinstance(images, (list, tuple)) else np.asarray(images))]
        if not images or any(image.ndim != 3 or image.dtype.kind not in "uif" for image in images):
            raise ValueError("Invalid images: expected a batch (n, height, width, channels) or a list of "
                             "(height, width, channels) arrays in [0, 255], with at least one image.")
        images = [image if image.dtype == np.uint8 else np.clip(np.round(image.astype("float64")), 0, 255).astype("uint8")
                  for image in images]
        if self.naflex:
            from keras_vit.naflex import naflex_inputs

            return naflex_inputs(images, weights=self.path, model=self.image_encoder)[0]
        processor = self.preprocessing
        if processor is None:
            raise CheckpointError(f"{self.path!r} has no {HF_PREPROCESSOR_FILE} or {HF_PROCESSOR_FILE}: the image "
                                  "processor's mean and std (save_pretrained of the checkpoint's processor writes it).")
        size = tuple(self.image_encoder.input_shape[1:3])
        if processor.processor is not None:
            resized = process_images(images, processor.processor, size)
        else:
            method = _RESIZE.get(processor.interpolation, "bicubic")
            resized = np.stack([image.astype("float32") if image.shape[:2] == size else keras.ops.convert_to_numpy(
                keras.ops.image.resize(image.astype("float32"), size, interpolation=method, antialias=True))
                for image in images])
        mean, std = np.asarray(processor.mean, "float32"), np.asarray(processor.std, "float32")
        return (resized / 255.0 - mean) / std

    def save_hf(self, folder, *, overwrite=False):
        """Writes the two towers as a Hugging Face two-tower folder (config, weights, tokenizer and processor files).

        An open_clip folder's CLIP is written as transformers' `CLIPModel`, with the
        `preprocessor_config.json` of its eval transform (`CLIPImageProcessor`, which crops at
        floor((side - crop) / 2) where open_clip rounds: said once); one that stores a logit
        bias, which `CLIPModel` has no place for, is refused.

        Args:
            folder: str. The folder to write; written whole, then renamed into place.
            overwrite: bool. Replace an existing non-empty `folder`. Defaults to False.
        """
        folder = os.fspath(folder)
        if os.path.isdir(folder) and os.listdir(folder) and not overwrite:
            raise FileExistsError(f"{folder!r} already exists and is not empty; pass overwrite=True to replace it.")
        processor = None
        if self.open_clip:
            if self.logit_bias is not None:
                raise ValueError(f"{self.path!r} is an open_clip CLIP with a logit_bias ({self.logit_bias:g}), which "
                                 "transformers' CLIPModel has no place for: save_hf would drop it.")
            processor = open_clip_layout.clip_processor_config(self.preprocessing)
            warnings.warn("The preprocessor_config.json written for an open_clip model is transformers' "
                          "CLIPImageProcessor, which centre-crops at floor((side - crop) / 2) where open_clip's eval "
                          "transform rounds: photos whose margin is odd are cropped one pixel apart.", stacklevel=2)
        family = TEXT_FAMILIES[self.kind]
        scratch = tempfile.mkdtemp(prefix="keras_vit_image_tower_")
        try:
            save_image_tower(self.image_encoder, os.path.join(scratch, "image"))
            tensors = read_safetensors(os.path.join(scratch, "image", WEIGHTS_FILE))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        text = model_tensors(self.text_encoder, MappingContext(text_keys.LAYOUT_NAME, {}, "bilinear"))
        tensors.update({text_keys.file_key(key): np.asarray(array, "float32") for key, array in text.items()})
        tensors["logit_scale"] = np.full(family.scale_shape, math.log(self.logit_scale), "float32")
        if self.logit_bias is not None:
            tensors["logit_bias"] = np.full(family.scale_shape, self.logit_bias, "float32")
        with atomic_directory(folder, overwrite=os.path.isdir(folder)) as tmp:
            write_json(os.path.join(tmp, "config.json"), self.hf_config)
            write_safetensors(os.path.join(tmp, WEIGHTS_FILE), tensors, {"format": "pt"})
            if processor is not None:
                write_json(os.path.join(tmp, HF_PREPROCESSOR_FILE), processor)
            for name in SIDE_FILES:
                if os.path.isfile(os.path.join(self.path, name)):
                    shutil.copyfile(os.path.join(self.path, name), os.path.join(tmp, name))

    def __repr__(self):
        return f"ImageTextModel({self.kind!r}, path={self.path!r})"


def _folder(weights, cache_dir, token):
    if hub.is_hub_id(weights):
        return hub.download(weights, token=token, cache_dir=cache_dir, extra_files=SIDE_FILES,
                            alternative=OPEN_CLIP_FILES)
    if not isinstance(weights, (str, os.PathLike)) or not os.path.isdir(weights):
        missing = "not found; " if isinstance(weights, (str, os.PathLike)) and not os.path.exists(weights) else ""
        raise ValueError(f"Invalid weights={weights!r}: {missing}expected a Hugging Face two-tower folder (config.json of "
                         f"model_type {list(KINDS)}, model.safetensors, tokenizer files), an open_clip folder "
                         f"({', '.join(OPEN_CLIP_FILES)}, tokenizer files) or a Hub id 'hf-hub:ORG/NAME'.")
    return os.fspath(weights)


def _kind(config, config_path, folder):
    model_type = config_value(config, "model_type", config_path, "name", None)
    if model_type not in KINDS:
        raise ValueError(
            f"Invalid weights={folder!r}: its config.json states model_type={model_type!r}, which holds no text tower "
            f"keras_vit reads; image-text models are model_type {list(KINDS)} (an image tower alone loads with "
            "keras_vit.ViT(weights=...)).")
    return model_type


def _scalar(raw, key, folder):
    if key not in raw or np.size(raw[key]) != 1:
        raise CheckpointError(f"{folder!r} has no scalar {key!r} in its weights (a two-tower model stores it).")
    return float(np.asarray(raw[key], "float64").reshape(()))


def _in_batches(model, inputs, batch_size):
    """The model's outputs on `inputs` (an array or a dict of arrays), called batch by batch.

    Called, not `predict`: CLIP's token batches change length with their longest text, and each
    new length would trace `predict`'s function again.
    """
    count = len(next(iter(inputs.values())) if isinstance(inputs, dict) else inputs)
    outputs = []
    for start in range(0, count, batch_size):
        part = ({key: value[start:start + batch_size] for key, value in inputs.items()} if isinstance(inputs, dict)
                else inputs[start:start + batch_size])
        outputs.append(keras.ops.convert_to_numpy(model(part, training=False)))
    return np.concatenate(outputs)


def _as_stored(names, origins):
    """`names` (keras key -> tensor key) with each renamed tensor key given back as its file names it."""
    return {key: origins.get(name, name) for key, name in names.items()}


def _normalised(embeddings):
    embeddings = np.asarray(embeddings, "float32")
    return embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)

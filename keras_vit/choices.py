"""Names of the library's choices, importable without Keras or TensorFlow.

`keras-vit --help` lists them without loading TensorFlow. `PRECISIONS`, `STRATEGIES` and
`INSPECT_SCALES` are the lists `keras_vit.training.distribute` and `keras_vit.inspect.images`
check against; `RECIPES` and `AUGMENT_PRESETS` name the rows of
`keras_vit.training.recipes.RECIPES` and `keras_vit.data.augment.PRESETS` (those tables need
Keras), and tests/test_runs.py checks they agree.

Example:

>>> RECIPES
('deit', 'finetune', 'finetune_adamw', 'lpft', 'compact', 'anchor')
>>> MODEL_FIELDS
('patch_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim')
"""

import dataclasses

from keras_vit.configs import ARCHITECTURE_FIELDS, SCALINGS, ViTConfig

RECIPES = ("deit", "finetune", "finetune_adamw", "lpft", "compact", "anchor")
# `keras-vit train --adapt`: how a run from a checkpoint (--weights) adapts it: what a budget's
# rules choose (a linear probe first, then fine-tuning when the budget buys it; without a budget,
# fine-tuning), every weight trained, or a linear probe of the frozen backbone
# (`keras_vit.training.plan.TrainConfig.adapt`).
ADAPTS = ("auto", "finetune", "probe")
# `keras-vit train --head`: where a run from a checkpoint starts its head: a new zero-initialised one,
# or the zero-shot head an image-text checkpoint's text tower folds from the class names
# (`keras_vit.transfer.zeroshot_head`).
HEADS = ("zero", "zeroshot")
AUGMENT_PRESETS = ("none", "flip", "shift", "pad_crop", "light", "medium", "strong", "views")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
# What an exported SavedModel or a loaded .keras model computes in (`keras_vit.export`): float32 by
# default; bfloat16 for CPUs with AMX, whose oneDNN kernels run it several times faster.
EXPORT_PRECISIONS = ("float32", "bfloat16")
# The export defaults that `keras-vit export --help` states: the SavedModel's top-k outputs, int8's calibration images.
EXPORT_TOP_K = 5
EXPORT_CALIBRATION_SAMPLES = 200
# `keras-vit train --stem`: the conv stem when a budget's rules say so, always, or never
# (`keras_vit.training.budget`).
STEMS = ("auto", "conv", "none")
# `keras-vit train --channels`: the model's input channels, grey or RGB (`TrainConfig.channels`).
CHANNELS = (1, 3)
# `keras-vit train --tokenizer`: how the plain ViT turns pixels into tokens: shifted patches
# (`keras_vit.models.stems.shifted_patch_stem`) when a budget's rules say so, the paper's patches, or
# shifted patches always.
TOKENIZERS = ("auto", "patches", "shifted")
# `keras-vit train --attention-init`: mimetic initialization of the attention kernels when a
# budget's rules choose it, always, or never (Keras' own initializers).
ATTENTION_INITS = ("auto", "mimetic", "random")
# `keras-vit train --pooling`: what a budget's rules choose (else the class token), or as given.
TRAIN_POOLINGS = ("auto", "token", "gap")
# How images of another size reach the model's input (`keras_vit.data.pipeline.make_pipeline(resize=)`,
# `TrainConfig.resize`): resized bilinearly, or zero-padded (larger ones centre-cropped).
RESIZES = ("bilinear", "pad")
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu", "data_parallel", "model_parallel")
# How `keras_vit.inspect.images.model_inputs` scales [0, 255] pixels: "raw" when the model has
# its own preprocessing, "auto" to choose by that, or one of configs.SCALINGS.
INSPECT_SCALES = ("auto", "raw", *SCALINGS)
# The architecture fields every variant states (those of ViTConfig without a default), in
# ARCHITECTURE_FIELDS' order: what `keras-vit train` lets one override (--patch-size, ...).
MODEL_FIELDS = tuple(
    field for field in ARCHITECTURE_FIELDS
    if field in {f.name for f in dataclasses.fields(ViTConfig) if f.default is dataclasses.MISSING}
)


"""Names of the library's choices, importable without Keras or TensorFlow.

`keras-vit --help` lists them without loading TensorFlow. `PRECISIONS` and `STRATEGIES` are
the lists `keras_vit.training.distribute` checks against; `RECIPES` and `AUGMENT_PRESETS` name
the rows of `keras_vit.training.recipes.RECIPES` and `keras_vit.data.augment.PRESETS` (those
tables need Keras), and tests/test_runs.py checks they agree.

Example:

>>> RECIPES
('deit', 'finetune', 'compact', 'anchor')
"""

RECIPES = ("deit", "finetune", "compact", "anchor")
AUGMENT_PRESETS = ("none", "flip", "light", "medium", "strong")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

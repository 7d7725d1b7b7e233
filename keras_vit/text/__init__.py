"""Text for image-text models: the tokenizers and text towers of CLIP, SigLIP and SigLIP 2, and `ImageTextModel` (issue 52).

- `tokenizers`: the tokenizers read from a checkpoint's own files (`tokenizer.json`, vocab and
  merges, `spiece.model`), giving the ids transformers' zero-shot pipeline gives.
- `text_tower`: the text towers as Keras models built from a row of a table per family.
- `image_text_model`: `ImageTextModel`, a two-tower checkpoint's encoders, tokenizer and scores.

Their checkpoint keys are read and written by `keras_vit.weights.huggingface.text_tower`; the
image towers' readers skip them (`keras_vit.weights.huggingface.clip.TEXT_TOWER`).
"""

from keras_vit.text.image_text_model import ImageTextModel
from keras_vit.text.text_tower import build_text_tower, text_tower_config
from keras_vit.text.tokenizers import TextTokenizer, read_tokenizer

__all__ = ["ImageTextModel", "TextTokenizer", "build_text_tower", "read_tokenizer", "text_tower_config"]

"""The Hugging Face ecosystem: the layout (`layout`), and one module per family (`families` lists them).

A Hugging Face checkpoint is a `save_pretrained` folder (config.json and model.safetensors); its
config.json's `model_type` names the family. `layout` holds the record of the layout, the layer
mappings of the canonical (ViT) names and the reader; each family module (`vit`, `deit`,
`dinov2`, `dinov3`, `siglip`, `clip`) holds the records of its model_types (`HFFamily`): how
its keys rename to the canonical ones, its config's defaults and the fields it states. A new
family (a text tower, `vit_mae`) is one module here and its name in `families`.

Example:

>>> from keras_vit.weights.huggingface import HF_FAMILIES, LAYOUT
>>> LAYOUT.name, HF_FAMILIES["dinov2_with_registers"].interpolation
('hf', 'bicubic')
"""

from keras_vit.weights.huggingface.families import DEPTH_MODEL_TYPE, HF_FAMILIES, hf_family
from keras_vit.weights.huggingface.family import HFFamily
from keras_vit.weights.huggingface.layout import LAYOUT, hf_file_rank, read_hf_family, rename_hf_key

__all__ = ["DEPTH_MODEL_TYPE", "HFFamily", "HF_FAMILIES", "LAYOUT", "hf_family", "hf_file_rank", "read_hf_family",
           "rename_hf_key"]

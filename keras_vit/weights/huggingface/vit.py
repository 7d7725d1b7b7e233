"""Hugging Face ViT (`ViTModel`, `ViTForImageClassification`): the canonical names, nothing to rename."""

from keras_vit.weights.huggingface.family import HFFamily


def _architecture(tensors, config, path):
    return {}  # the common fields (`keras_vit.weights.huggingface.layout.hf_architecture`) are ViT's


FAMILIES = {"vit": HFFamily(("vit.",), (), (), 1, {}, _architecture)}

"""Hugging Face ViT-MAE (`ViTMAEModel`, `ViTMAEForPreTraining`: the facebook/vit-mae-* folders) read as a backbone.

The encoder has ViT's names ("vit." below the pre-training model) and its fixed sine-cosine
table stored as `embeddings.position_embeddings`, read as a learned table. The decoder
(`decoder.*`) is not part of a backbone: `keras_vit.pretraining.hf` reads and writes the whole
masked autoencoder. A backbone pools the mean of the patch tokens: MAE's class token gets no
loss in pre-training, and MAE fine-tunes and probes on the mean (its `global_pool`).
"""

from keras_vit.weights.huggingface.family import HFFamily

DECODER_KEYS = r"^decoder\."


def _architecture(tensors, config, path):
    return {"pooling": "gap"}


FAMILIES = {
    "vit_mae": HFFamily(
        ("vit.",), (), (DECODER_KEYS,), 1,
        {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "image_size": 224, "patch_size": 16}, _architecture,
    ),
}

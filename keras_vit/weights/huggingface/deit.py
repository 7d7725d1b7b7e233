"""Hugging Face DeiT (`DeiTModel`, `DeiTForImageClassificationWithTeacher`): ViT's names and a distillation token."""

from keras_vit.weights.huggingface.family import HFFamily


def _architecture(tensors, config, path):
    return {"distillation_token": True}


FAMILIES = {
    "deit": HFFamily(
        ("deit.",), (("cls_classifier.", "classifier."), ("distillation_classifier.", "classifier_dist.")),
        (), 2, {}, _architecture,
        refused=(("classifier.weight", "a DeiTForImageClassification head (one head on the class token of a "
                  "distilled model), which keras_vit does not build: a distilled DeiT has its two heads averaged. "
                  "Supported Hugging Face DeiT classes: DeiTModel, DeiTForImageClassificationWithTeacher"),),
    ),
}

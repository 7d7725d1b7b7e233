"""Pre-training on unlabeled images: where masked autoencoding (MAE) and `keras-vit pretrain` land (issue 53).

Empty so far. What lands here, beside `keras_vit.transfer` (which adapts what this makes): the
random masking of patches, the encoder run on the visible patches only, the light decoder and the
loss on the normalised pixels of the masked patches, as a Keras model with its own `train_step`,
and the run that chooses the model and epochs for a budget as `keras_vit.training` does for
`train`. Hugging Face `vit_mae` folders are read and written as a record of
`keras_vit.weights.huggingface`, one module beside the other families.
"""

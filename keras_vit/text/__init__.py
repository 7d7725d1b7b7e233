"""Text for image-text models: where the tokenizers and the text towers of CLIP, SigLIP and SigLIP 2 land (issue 52).

Empty so far. What lands here: the tokenizers read from a checkpoint's own files (`tokenizer.json`,
vocab and merges, `spiece.model`), the text towers as Keras layers and models built from rows of
a table as the image towers are, and the zero-shot classifier that pairs a tower with an image
model. Their checkpoint keys are read and written as records of the Hugging Face families in
`keras_vit.weights.huggingface` (`clip`, `siglip`), whose image-tower readers skip the text keys
today (`keras_vit.weights.huggingface.clip.TEXT_TOWER`).
"""

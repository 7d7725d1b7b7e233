"""A fine-tuning head that starts as an image-text checkpoint's zero-shot classifier (`keras-vit train --head zeroshot`).

`fold_head(weights, class_names)` reads a CLIP, SigLIP or SigLIP 2 two-tower checkpoint and folds
its text tower's embeddings of the class names into a Dense head (`keras_vit.text.zeroshot.zeroshot_head`:
the labels' unit text embeddings x the stored scale, + SigLIP's stored bias) on the unit image
embedding. The model it goes on is the checkpoint's image tower with an L2 norm before its head
(`load_pretrained(..., head_norm="l2")`), so its first outputs are the zero-shot scores.

The head is trained under softmax cross-entropy, as every keras_vit classifier is. CLIP's
zero-shot scores are that softmax already. SigLIP scores each label by a sigmoid of the same
logits; here those logits go under softmax instead: the scale multiplies every label's cosine and
the bias is the same for every label, so the ranking (and the prediction) is SigLIP's, while
softmax gives the one-of-N loss a classifier trains with.

Example (a two-tower folder saved by transformers):

>>> head = fold_head("clip-folder", ("cat", "dog"))  # doctest: +SKIP
>>> head.kind, head.kernel.shape  # doctest: +SKIP
('clip', (512, 2))
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Under softmax the scores a head starts from: CLIP's own; SigLIP's sigmoid logits, their ranking kept.
SCORES = {"clip": "its softmax", "siglip": "its sigmoid logits, under softmax",
          "siglip2": "its sigmoid logits, under softmax"}


@dataclasses.dataclass(frozen=True)
class ZeroshotHead:
    """A head folded from a checkpoint's text tower.

    Attributes: `kind` ("clip", "siglip", "siglip2"), `class_names` (tuple), `template` (the prompt
    each name was put in), `kernel` ((d, classes) float32), `bias` ((classes,) float32).
    """

    kind: str
    class_names: tuple
    template: str
    kernel: np.ndarray
    bias: np.ndarray

    def describe(self) -> str:
        """The header's words: where the head comes from and what it scores."""
        return (f"the zero-shot head of its {self.kind} text tower for {len(self.class_names)} class names "
                f"({self.template!r}; {SCORES[self.kind]})")

    def set_on(self, model):
        """Sets the head of `model` (a keras_vit classifier with head_norm="l2") to this one."""
        model.get_layer("head").set_weights([self.kernel, self.bias])


def fold_head(weights, class_names, *, name=None) -> ZeroshotHead:
    """The zero-shot head of `class_names` from the text tower of the image-text checkpoint `weights`.

    Args:
        weights: str. What `keras_vit.ImageTextModel(weights=)` takes.
        class_names: sequence of str. The data set's class names, in label order.
        name: callable or None. How messages spell a field (`keras-vit train` passes
            `keras_vit.train_options.flag_name`, "--head"). Defaults to None (the field's own name).

    Raises:
        ValueError: naming `head`, where `weights` has no text tower keras_vit reads or the classes
            are numbered rather than named.
    """
    from keras_vit.text.image_text_model import ImageTextModel
    from keras_vit.text.zeroshot import DEFAULT_TEMPLATE, zeroshot_head

    name = name or (lambda field: field)
    names = tuple(class_names)
    if all(label.strip().isdigit() for label in names):
        raise ValueError(
            f"Contradicting {name('head')}='zeroshot' and the data's classes {list(names[:3])}...: they are numbered, "
            f"not named, and the zero-shot head embeds each class's name. Name the classes (class sub-folders named "
            f"'cat', 'dog', ...) or leave {name('head')} out for a new zero head.")
    try:
        pair = ImageTextModel(weights=weights)
    except (ValueError, FileNotFoundError) as error:
        raise ValueError(
            f"Contradicting {name('head')}='zeroshot' and {name('weights')}={weights!r}: the zero-shot head comes from "
            f"an image-text checkpoint's text tower (a CLIP, SigLIP or SigLIP 2 two-tower folder), and this one gives "
            f"none ({str(error).rstrip('.')}). Leave {name('head')} out for a new zero head.") from None
    kernel, bias = zeroshot_head(pair, names)
    return ZeroshotHead(pair.kind, names, DEFAULT_TEMPLATE, kernel, bias)

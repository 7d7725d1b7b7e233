"""What a classifier's output layer returns: probabilities (softmax head) or logits (no activation).

Losses, evaluation and exports read it from the model instead of assuming one or the other.
"""

from __future__ import annotations


def head_activation(model):
    """The activation of the model's output layer: "softmax", None for logits, or another name.

    A last layer without an `activation` attribute (other than a `Softmax` layer) counts as
    returning logits.

    Args:
        model: keras.Model. A classifier, e.g. from `keras_vit.ViT`.

    Returns:
        "softmax", None (no activation: logits), or the activation's name as a str.

    Example:

    >>> import keras_vit
    >>> head_activation(keras_vit.ViT("tiny", num_classes=3))
    'softmax'
    >>> head_activation(keras_vit.ViT("tiny", num_classes=3, classifier_activation=None)) is None
    True
    """
    last = model.layers[-1]
    if type(last).__name__ == "Softmax":
        return "softmax"
    activation = getattr(last, "activation", None)
    name = getattr(activation, "__name__", None)
    if activation is None or name == "linear":
        return None
    return name or repr(activation)


def outputs_probabilities(model) -> bool:
    """True for a softmax head, False for logits; any other activation raises ValueError.

    Losses, evaluation and every export read this: probabilities and logits are the only two
    outputs a cross-entropy or a class ranking can be computed from without guessing.

    Args:
        model: keras.Model. A classifier, e.g. from `keras_vit.ViT`.

    Example:

    >>> import keras_vit
    >>> outputs_probabilities(keras_vit.ViT("tiny", num_classes=3))
    True
    >>> outputs_probabilities(keras_vit.ViT("tiny", num_classes=3, classifier_activation=None))
    False
    """
    activation = head_activation(model)
    if activation not in ("softmax", None):
        raise ValueError(
            f"Model {model.name!r} has a head with activation {activation!r} "
            f"(classifier_activation={activation!r}). Expected 'softmax' (probabilities, the "
            "default) or None (logits)."
        )
    return activation == "softmax"

"""Contrastive learning without labels (SimCLR, Chen et al. 2020): each view picks out its pair among the batch's views.

`ContrastiveLearning` wraps any keras_vit `VisionTransformer` feature model (a plain ViT, the conv
stem + ViT that `keras-vit train`'s budget rules build for small images, a hybrid) and a
projection head (`keras_vit.layers.ProjectionHead`). Each image comes as two augmented views
(B, 2, H, W, C); the loss (`nt_xent`) is the cross-entropy of each view's cosine similarities to
the batch's other 2B - 1 views at a temperature, the other view of its own image the right
answer. No teacher and no momentum: one forward and backward pass per view, the least work per
image of the view-based methods, which is what a run of minutes on a CPU needs. On a 2-core CPU,
5 minutes of it on 25,000 CIFAR images gave the features of 20 minutes of DINO
(benchmarks/RESULTS.md, "Contrastive pre-training (SimCLR)").

With `view_size` the views are smaller than the backbone's input and run through its own layers
and weights (`VisionTransformer.resized_model`, the position embedding resampled): a step costs
less, so a budget makes more passes; the backbone keeps its size for what adapts it.

Example:

>>> import numpy as np, keras_vit
>>> backbone = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=8,
...                          include_top=False, preprocessing="unit")
>>> model = ContrastiveLearning(backbone, head="test")
>>> tuple(model(np.zeros((3, 2, 8, 8, 3), "float32"))["projections"].shape)
(6, 8)
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from keras_vit._validation import check_choice, check_number_in, check_positive_int
from keras_vit.layers.projection_head import ProjectionHead
from keras_vit.pretraining.dino import check_dino_backbone


@dataclasses.dataclass(frozen=True)
class HeadSize:
    """The projection head's output and hidden widths and its Dense layers (`keras_vit.layers.ProjectionHead`)."""

    out_dim: int
    hidden_dim: int
    num_layers: int = 3


# SimCLR's head (2048 wide to 128) for ResNet-50 and ViT-S and larger; a narrower one for small
# encoders, where SimCLR's would hold more weights than the encoder.
HEADS = {
    "base": HeadSize(128, 2048),
    "small": HeadSize(128, 512),
    "test": HeadSize(8, 16),
}
# SimCLR's temperature for its large batches (0.1-0.2; 0.5 in its CIFAR runs), MoCo v3's 0.2 for ViTs.
TEMPERATURE = 0.2
NUM_VIEWS = 2


def head_for(hidden_size: int) -> str:
    """The `HEADS` row for an encoder of width `hidden_size`: base from 384 (ViT-S), else small.

    >>> head_for(768), head_for(128)
    ('base', 'small')
    """
    return "base" if hidden_size >= 384 else "small"


@keras.saving.register_keras_serializable(package="keras_vit")
class ContrastiveLearning(keras.Model):
    """SimCLR: a backbone and projection head trained so that each view's projection is closest to its pair's.

    Calling it on views (B, 2, H, W, C), raw pixels as the backbone takes them (at `view_size`
    where given), returns {"projections": (2*B, out_dim)}, view-major (view 0 of every image
    first). The loss (`compute_loss`) is `nt_xent` at `temperature`.

    Args:
        backbone: `keras_vit.models.vit_model.VisionTransformer`. A feature model (include_top=False,
            pooled): the backbone to pre-train.
        head: str or dict. A `HEADS` name or a `HeadSize`'s fields. Defaults to "small".
        temperature: float. In (0, 10]. Defaults to 0.2.
        view_size: int or None. Side of the views where smaller than the backbone's input, a
            multiple of the pixels a token covers; None: the backbone's. Defaults to None.

    Example:

    >>> import keras_vit
    >>> backbone = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=16,
    ...                          include_top=False, preprocessing="unit")
    >>> model = ContrastiveLearning(backbone, head="test", view_size=8)
    >>> model.image_shape, model.backbone.input_shape
    ((8, 8, 3), (None, 16, 16, 3))
    """

    def __init__(self, backbone, head="small", temperature=TEMPERATURE, view_size=None, **kwargs):
        kwargs.setdefault("name", "simclr")
        # The loss's softmax at a temperature of 0.2 wants float32; the backbone keeps its policy.
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if isinstance(backbone, dict):  # from_config
            backbone = keras.saving.deserialize_keras_object(backbone)
        check_dino_backbone(backbone, "backbone", method="contrastive learning")
        if isinstance(head, str):
            check_choice("head", head, tuple(HEADS))
            head = dataclasses.asdict(HEADS[head])
        elif isinstance(head, HeadSize):
            head = dataclasses.asdict(head)
        self.head_size = HeadSize(**head)
        check_number_in("temperature", temperature, 0, 10, include_low=False)
        self.temperature = float(temperature)
        side = backbone.inputs[0].shape[1]
        if view_size is not None:
            check_positive_int("view_size", view_size)
            if view_size > side:
                raise ValueError(f"Invalid view_size={view_size!r}: larger than the backbone's {side} px input. "
                                 "Pass a smaller side, or None for the backbone's.")
        self.view_size = None if view_size is None or view_size == side else int(view_size)
        self.backbone = backbone
        # The backbone's own layers and weights on the views' size (its position embedding resampled).
        self.view_backbone = backbone.resized_model(self.view_size) if self.view_size else backbone
        self.head = ProjectionHead(**dataclasses.asdict(self.head_size), name="projection_head")
        self.head.build((None, backbone.output_shape[-1]))
        self.built = True

    @property
    def image_shape(self):
        """(H, W, C) of one view."""
        return tuple(self.view_backbone.inputs[0].shape[1:])

    def call(self, views, training=None):
        if views.shape[1] is not None and views.shape[1] != NUM_VIEWS:
            raise ValueError(f"Expected views of shape (batch, {NUM_VIEWS}, height, width, channels), got {views.shape}.")
        # View-major: view 0 of every image, then view 1.
        flat = ops.reshape(ops.swapaxes(views, 0, 1), (-1,) + self.image_shape)
        return {"projections": self.head(self.view_backbone(flat, training=training))}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`nt_xent` of the projections (in float32)."""
        loss = nt_xent(y_pred["projections"], self.temperature)
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def get_config(self):
        return {"name": self.name, "backbone": keras.saving.serialize_keras_object(self.backbone),
                "head": dataclasses.asdict(self.head_size), "temperature": self.temperature, "view_size": self.view_size}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def nt_xent(projections, temperature=TEMPERATURE):
    """SimCLR's loss: the mean over 2B views of the cross-entropy of picking out the pair among the other views.

    `projections` (2B, D) are view-major (row i and row i + B are the two views of image i); each
    row is L2-normalised, and its logits are its cosines to the other 2B - 1 rows over `temperature`.

    Example:

    >>> import numpy as np
    >>> pairs = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], "float32")  # two images, each view equal to its pair
    >>> round(float(nt_xent(pairs, 1.0)), 4)  # -log(e / (e + 2)): the pair at cosine 1, the others at 0
    0.5514
    """
    z = ops.cast(projections, "float32")
    z = z / ops.maximum(ops.norm(z, axis=-1, keepdims=True), 1e-12)
    count = ops.shape(z)[0]
    half = count // 2
    # A view is never its own answer: its cosine of 1 with itself is taken out of the softmax.
    logits = ops.matmul(z, ops.transpose(z)) / temperature - 1e9 * ops.eye(count, dtype="float32")
    pairs = ops.concatenate([ops.arange(half) + half, ops.arange(half)])
    return ops.mean(keras.losses.sparse_categorical_crossentropy(pairs, logits, from_logits=True))

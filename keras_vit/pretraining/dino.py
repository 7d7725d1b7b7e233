"""Self-distillation without labels (DINO, Caron et al. 2021): a student learns to match an averaged teacher across views.

`SelfDistillation` wraps any keras_vit `VisionTransformer` feature model (a plain ViT, the conv
stem + ViT that `keras-vit train`'s budget rules build for small images, a hybrid) as the
student, and keeps a teacher of the same architecture whose weights are an exponential moving
average of the student's. Each image comes as several augmented views (B, V, H, W, C), and
optionally small local views at their own size (DINO's multi-crop, through the student's own
layers: `VisionTransformer.resized_model`); the student's prototype scores on every view learn
the teacher's (centred, sharpened) scores on the other global views. Unlike MAE it hides no
patches, so it takes any backbone.

The teacher's average and the centre are updated inside `call` in training, as BatchNormalization
updates its statistics, so Keras' own `train_step` trains it under `model.fit` on TensorFlow, JAX
and PyTorch alike. The teacher moves towards the student's weights of the step (before that step's
update), one step behind DINO's order, which averages the updated weights.

Example:

>>> import numpy as np, keras_vit
>>> backbone = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=8,
...                          include_top=False, preprocessing="unit")
>>> model = SelfDistillation(backbone, head=HEADS["test"])
>>> out = model(np.zeros((2, 2, 8, 8, 3), "float32"))
>>> tuple(out["student"].shape), tuple(out["teacher"].shape)
((4, 16), (4, 16))
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from keras_vit._validation import check_choice, check_number_in, check_positive_int
from keras_vit.layers.dino_head import DinoHead


@dataclasses.dataclass(frozen=True)
class HeadSize:
    """The projection head's prototypes, hidden width, bottleneck and batch standardisation (`keras_vit.layers.DinoHead`)."""

    out_dim: int
    hidden_dim: int
    bottleneck_dim: int
    batch_norm: bool = False


# DINO's head (65,536 prototypes, 2048 wide, bottleneck 256) for ViT-S and larger on ImageNet; a
# narrower one for small encoders and data sets of thousands of images, where DINO's own head
# would hold more weights than the encoder (DINO's ablation, Table 8: 4,096 prototypes lose 0.9
# points of k-NN accuracy against 65,536 on ImageNet), with DINO's batch-normalised head option
# (`DinoHead`'s batch_norm): without it, the conv stem + ViT on CIFAR images fell into the uniform
# collapse within 20 steps (loss at ln 4096 = 8.318, the teacher's targets uniform).
HEADS = {
    "base": HeadSize(65536, 2048, 256),
    "small": HeadSize(4096, 512, 128, batch_norm=True),
    "test": HeadSize(16, 16, 8, batch_norm=True),
}
# DINO's temperatures: the student's softmax at 0.1, the teacher's sharper at 0.04 (its value at
# the start of DINO's warm-up, and for the whole of a run of minutes), and the centre's momentum.
STUDENT_TEMPERATURE = 0.1
TEACHER_TEMPERATURE = 0.04
CENTER_MOMENTUM = 0.9
# The teacher's momentum. DINO starts at 0.996 (an average over about 250 steps) and raises it to
# 1 over runs of 100-800 ImageNet passes, some 10^5 steps; a run of minutes on a CPU makes about
# 10^3 steps, so its teacher averages about the last 100 (a tenth of the run) instead.
TEACHER_MOMENTUM = 0.99
# Views of each image: DINO's two global crops, which the teacher sees too. DINO widens their
# crops' scale to (0.14, 1) when it takes no small local crops, (0.4, 1) beside them.
NUM_VIEWS = 2
GLOBAL_CROP_SCALE = (0.4, 1.0)
# DINO's multi-crop (from SwAV, Caron et al. 2020): small local crops, seen by the student only,
# that learn to match the teacher's global views. Each covers 5-40% of the image, at 96 px beside
# 224 (`keras_vit.pretraining.dino_run.LOCAL_SIDE_FRACTION`), a fifth of a global view's tokens.
LOCAL_CROP_SCALE = (0.05, 0.4)


def head_for(hidden_size: int) -> str:
    """The `HEADS` row for an encoder of width `hidden_size`: base from 384 (ViT-S), else small.

    Example:

    >>> head_for(768), head_for(192)
    ('base', 'small')
    """
    return "base" if hidden_size >= 384 else "small"


def check_dino_backbone(backbone, name="backbone", method="self-distillation"):
    """Refuses (ValueError) a backbone `method` cannot train: not a keras_vit ViT, or one without pooled features."""
    config = getattr(backbone, "vit_config", None)
    if config is None:
        raise ValueError(f"Invalid {name}={getattr(backbone, 'name', backbone)!r}: expected a keras_vit "
                         f"VisionTransformer (keras_vit.ViT(..., include_top=False)), whose pooled features {method} trains.")
    if config.get("include_top") or config.get("pooling") is None:
        raise ValueError(f"Invalid {name}={backbone.name!r} for {method}: it returns "
                         f"{'class scores' if config.get('include_top') else 'every token'}, not pooled features. "
                         "Build it with include_top=False and a pooling ('token' or 'gap').")


@keras.saving.register_keras_serializable(package="keras_vit")
class SelfDistillation(keras.Model):
    """DINO: a student backbone and head trained to match an averaged teacher's scores on other views.

    Calling it on views (B, V, H, W, C), raw pixels as the backbone takes them, returns
    {"student": (V*B, out_dim) scores of every view, "teacher": (2*B, out_dim) scores of the first
    two views}, view-major (view 0 of every image first). The loss (`compute_loss`) is DINO's
    cross-entropy between the teacher's centred softmax at `teacher_temperature` and the student's
    log-softmax at `student_temperature`, over every pair of a teacher view and another student view.

    Args:
        student: `keras_vit.models.vit_model.VisionTransformer`. A feature model (include_top=False,
            pooled): the backbone to pre-train. The teacher starts as its copy.
        head: str or dict. A `HEADS` name or a `HeadSize`'s fields. Defaults to "small".
        student_temperature: float. Defaults to 0.1.
        teacher_temperature: float. Defaults to 0.04.
        center_momentum: float. In [0, 1). Defaults to 0.9.
        teacher_momentum: float. In [0, 1). Defaults to 0.99.
        num_views: int. Views per image, at least 2 (the teacher sees the first two). Defaults to 2.
        local_views: int. Small local views per image, seen by the student alone (DINO's
            multi-crop); then the input is {"global": (B, num_views, H, W, C), "local": (B,
            local_views, h, w, C)}. Defaults to 0.
        local_size: int or None. Side h = w of the local views, a multiple of the pixels a token
            covers; needed with local views. Defaults to None.

    Example:

    >>> import keras_vit
    >>> backbone = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=8,
    ...                          include_top=False, preprocessing="unit")
    >>> model = SelfDistillation(backbone, head="test", num_views=3)
    >>> model.teacher.trainable, len(model.trainable_weights) == len(model.teacher_pairs())
    (False, True)
    """

    def __init__(self, student, head="small", student_temperature=STUDENT_TEMPERATURE,
                 teacher_temperature=TEACHER_TEMPERATURE, center_momentum=CENTER_MOMENTUM,
                 teacher_momentum=TEACHER_MOMENTUM, num_views=NUM_VIEWS, local_views=0, local_size=None, **kwargs):
        kwargs.setdefault("name", "dino")
        # The wrapper computes in float32 whatever the policy: under mixed precision Keras would hand
        # its call the teacher's, student's and centre's weights cast to bfloat16, and the average
        # (0.99 t + 0.01 s) would be rounded to 3 digits each step. The backbones keep their policy.
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if isinstance(student, dict):  # from_config
            student = keras.saving.deserialize_keras_object(student)
        check_dino_backbone(student, "student")
        if isinstance(head, str):
            check_choice("head", head, tuple(HEADS))
            head = dataclasses.asdict(HEADS[head])
        elif isinstance(head, HeadSize):
            head = dataclasses.asdict(head)
        size = HeadSize(**head)
        for field, value in (("student_temperature", student_temperature),
                             ("teacher_temperature", teacher_temperature)):
            check_number_in(field, value, 0, 10, include_low=False)
        for field, value in (("center_momentum", center_momentum), ("teacher_momentum", teacher_momentum)):
            check_number_in(field, value, 0, 1, include_high=False)
        check_positive_int("num_views", num_views)
        if num_views < 2:
            raise ValueError(f"Invalid num_views={num_views!r}: self-distillation compares at least 2 views of an image.")
        if not isinstance(local_views, int) or isinstance(local_views, bool) or local_views < 0:
            raise ValueError(f"Invalid local_views={local_views!r}. Expected an integer >= 0.")
        if local_views and local_size is None:
            raise ValueError(f"Invalid local_size=None with local_views={local_views}: pass the local views' side.")
        if not local_views and local_size is not None:
            raise ValueError(f"Invalid local_size={local_size!r} with local_views=0: it sizes local views. Leave it out.")
        if local_size is not None:
            check_positive_int("local_size", local_size)
        self.student = student
        self.head_size = size
        self.student_temperature = float(student_temperature)
        self.teacher_temperature = float(teacher_temperature)
        self.center_momentum = float(center_momentum)
        self.teacher_momentum = float(teacher_momentum)
        self.num_views = int(num_views)
        self.local_views = int(local_views)
        self.local_size = None if local_size is None else int(local_size)
        # The student's own layers and weights on the local views' size (its position embedding resampled).
        self.local_student = student.resized_model(self.local_size) if local_views else None
        self.teacher = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(student))
        self.teacher.trainable = False
        head_args = dataclasses.asdict(size)
        self.student_head = DinoHead(**head_args, name="student_head")
        self.teacher_head = DinoHead(**head_args, name="teacher_head")
        self.teacher_head.trainable = False
        features = student.output_shape[-1]
        self.student_head.build((None, features))
        self.teacher_head.build((None, features))
        self.center = self.add_weight(name="center", shape=(1, size.out_dim), initializer="zeros", trainable=False)
        self.teacher.set_weights(student.get_weights())
        self.teacher_head.set_weights(self.student_head.get_weights())
        self.built = True

    def teacher_pairs(self):
        """[(teacher variable, student variable)] in one order: every weight, the statistics of BatchNorm included."""
        teacher = self.teacher.weights + self.teacher_head.weights
        student = self.student.weights + self.student_head.weights
        if len(teacher) != len(student) or any(t.shape != s.shape for t, s in zip(teacher, student)):
            raise ValueError("The teacher's weights do not pair with the student's: the teacher must be the "
                             "student's architecture.")
        return list(zip(teacher, student))

    @property
    def image_shape(self):
        """(H, W, C) of one view, the backbone's input."""
        return tuple(self.student.inputs[0].shape[1:])

    def call(self, views, training=None):
        local = None
        if isinstance(views, dict):
            if set(views) != {"global", "local"} or not self.local_views:
                raise ValueError(f"Expected views as a dict only with local_views, of keys 'global' and 'local'; got "
                                 f"keys {sorted(views)} and local_views={self.local_views}.")
            views, local = views["global"], views["local"]
        elif self.local_views:
            raise ValueError(f"Expected views as {{'global': ..., 'local': ...}}: the model takes {self.local_views} "
                             f"local views, got one tensor of shape {views.shape}.")
        shape = ops.shape(views)
        batch, count = shape[0], views.shape[1]
        if count is not None and count < 2:
            raise ValueError(f"Expected views of shape (batch, views >= 2, height, width, channels), got {views.shape}.")
        # View-major: view 0 of every image, then view 1, ...; the local views after the global ones.
        flat = ops.reshape(ops.swapaxes(views, 0, 1), (-1,) + self.image_shape)
        student = self.student_head(self.student(flat, training=training))
        if local is not None:
            local_flat = ops.reshape(ops.swapaxes(local, 0, 1), (-1,) + tuple(local.shape[2:]))
            local_scores = self.student_head(self.local_student(local_flat, training=training))
            student = ops.concatenate([student, ops.cast(local_scores, student.dtype)], axis=0)
        teacher = ops.stop_gradient(self.teacher_head(self._teacher_features(flat[: 2 * batch], training)))
        if training:
            self._update_teacher()
            batch_center = ops.mean(teacher, axis=0, keepdims=True)
            self.center.assign(self.center * self.center_momentum + batch_center * (1.0 - self.center_momentum))
        return {"student": student, "teacher": teacher}

    def _teacher_features(self, images, training):
        """The teacher backbone's pooled features; in training with the BatchNorm statistics of the batch.

        DINO's teacher runs in training mode: its BatchNorm layers (the conv stem's) normalise with
        the statistics of the batch, not with running averages, which are a random network's at
        first and an average of averages afterwards. Keras runs a frozen model's BatchNorm on its
        running averages whatever `training` says, so the student's graph runs on the teacher's
        weights instead (`stateless_call`, its statistics' updates discarded).
        """
        if not training:
            return self.teacher(images, training=False)
        teacher_of = {id(s): t for t, s in self.teacher_pairs()}
        student = self.student
        trainable = [teacher_of[id(v)].value for v in student.trainable_variables]
        # The states of random layers (seed generators) are no weights: the student's own.
        non_trainable = [teacher_of.get(id(v), v).value for v in student.non_trainable_variables]
        features, _ = student.stateless_call(trainable, non_trainable, images, training=True)
        return features

    def _update_teacher(self):
        momentum = self.teacher_momentum
        for teacher, student in self.teacher_pairs():
            value = ops.stop_gradient(ops.cast(student, teacher.dtype))
            teacher.assign(teacher * momentum + value * (1.0 - momentum))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """DINO's loss, with the centre as it stood before this step's update (in float32)."""
        loss = dino_loss(y_pred["student"], y_pred["teacher"], self.center, self.num_views + self.local_views,
                         self.student_temperature, self.teacher_temperature)
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def get_config(self):
        return {"name": self.name, "student": keras.saving.serialize_keras_object(self.student),
                "head": dataclasses.asdict(self.head_size), "student_temperature": self.student_temperature,
                "teacher_temperature": self.teacher_temperature, "center_momentum": self.center_momentum,
                "teacher_momentum": self.teacher_momentum, "num_views": self.num_views,
                "local_views": self.local_views, "local_size": self.local_size}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def dino_loss(student, teacher, center, num_views, student_temperature=STUDENT_TEMPERATURE,
              teacher_temperature=TEACHER_TEMPERATURE):
    """Mean over the pairs (teacher view t, student view s != t) of the batch's mean cross-entropy, in float32.

    `student` (V*B, K) and `teacher` (2*B, K) are view-major scores; `center` (1, K) is subtracted
    from the teacher's before its softmax.

    Example:

    >>> import numpy as np
    >>> scores = np.eye(2, dtype="float32")  # two views of one image, each closer to another prototype
    >>> round(float(dino_loss(scores, scores, np.zeros((1, 2), "float32"), 2, 1.0, 1.0)), 4)  # 0.731 x 1.313 + 0.269 x 0.313
    1.0443
    """
    student = ops.cast(student, "float32") / student_temperature
    teacher = ops.softmax((ops.cast(teacher, "float32") - ops.cast(center, "float32")) / teacher_temperature, axis=-1)
    student_views = ops.split(ops.log_softmax(student, axis=-1), num_views, axis=0)
    teacher_views = ops.split(teacher, 2, axis=0)
    total, pairs = 0.0, 0
    for t, target in enumerate(teacher_views):
        for s, log_probabilities in enumerate(student_views):
            if s == t:
                continue
            total = total + ops.mean(ops.sum(-target * log_probabilities, axis=-1))
            pairs += 1
    return total / pairs

"""Training: recipes (optimizer, schedule, loss), tf.distribute strategies, crash-safe callbacks, runs."""

from keras_vit.training.callbacks import AtomicBackupAndRestore, AtomicModelCheckpoint, TimeBudget, save_model_atomic
from keras_vit.training.distribute import (
    check_jit_compile,
    default_jit_compile,
    default_precision,
    get_strategy,
    global_batch_size,
)
from keras_vit.training.recipes import (
    RECIPES,
    Recipe,
    WarmupCosine,
    get_recipe,
    make_loss,
    make_optimizer,
    make_schedule,
    no_decay_variables,
)
from keras_vit.training.artifacts import save_final_artifacts
from keras_vit.training.plan import DEFAULT_MODEL, RunPlan, TrainConfig
from keras_vit.training.trainer import evaluate, train

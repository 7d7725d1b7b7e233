"""Pins the few private Keras and TensorFlow names the package uses, each where no public API does the job.

Each test fails as soon as a release renames or drops what keras_vit reaches for, so the code
is revisited then rather than failing inside a long export or a distributed run. The fourth
(`model._distribute_strategy` and `get_metrics_result`, for MultiWorkerMirroredStrategy) is
pinned in tests/test_training_distribute.py.
"""

import inspect

import keras
import numpy as np
import pytest


def test_int8_with_float_ops_calibrates_then_quantizes_with_the_mlir_quantizer():
    # keras_vit/export/tflite.py `_convert_int8` keeps chosen ops in float (LayerNorm, residual
    # adds) in an int8 file. The public converter quantizes all or nothing; the op denylist exists
    # only in the MLIR quantizer behind a calibrate-only conversion (what
    # tf.lite.experimental.QuantizationDebugger does internally).
    import tensorflow as tf
    from tensorflow.lite.python import convert

    parameters = inspect.signature(convert.mlir_quantize).parameters
    for name in ("disable_per_channel", "fully_quantize", "enable_numeric_verify", "denylisted_ops"):
        assert name in parameters, name
    converter = tf.lite.TFLiteConverter.from_concrete_functions([], None)
    assert hasattr(converter, "_experimental_calibrate_only")


def test_onnx_export_freezes_variables_with_convert_variables_to_constants_v2():
    # keras_vit/export/onnx.py `_convert` edits the frozen GraphDef (Erfc -> Erf) before tf2onnx
    # reads it; tf2onnx's public from_function freezes internally and offers no hook between.
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    weight = tf.Variable(2.0)
    frozen = convert_variables_to_constants_v2(tf.function(lambda x: x * weight).get_concrete_function(
        tf.TensorSpec((), tf.float32)))
    assert any(node.op == "Const" for node in frozen.graph.as_graph_def().node)
    assert float(frozen(tf.constant(3.0))[0]) == 6.0


@pytest.mark.backends("jax")
def test_model_parallel_keeps_the_layout_a_variable_was_made_with():
    # keras_vit/distribution.py ViTModelParallel.get_variable_layout returns `variable._layout`
    # first, as Keras' own ModelParallel does: optimizer slots are made with their reference
    # variable's layout (`keras.Variable(layout=...)`, stored as `_layout`, no public getter).
    layout = keras.distribution.TensorLayout([None], keras.distribution.DeviceMesh((1,), ["batch"]))
    variable = keras.Variable(np.zeros(2, "float32"), layout=layout)
    assert variable._layout is layout
    source = inspect.getsource(keras.optimizers.Optimizer.add_variable_from_reference)
    assert '"_layout"' in source

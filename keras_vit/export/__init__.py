"""Deployment: SavedModel for TF Serving, TFLite/LiteRT files (float and quantized), ONNX, prediction.

Every exported artifact takes float32 NHWC pixels in [0, 255] and returns probabilities, and
computes in float32 whatever dtype policy the model was trained under (mixed_bfloat16 and
mixed_float16 models keep float32 variables, so nothing is lost); a low-precision file is written
only when asked for: TFLite `quantization="float16"`, `"dynamic"` or `"int8"`, and a SavedModel
with `precision="bfloat16"` (float32 variables, bfloat16 compute: for CPUs with AMX, whose oneDNN
kernels TF Serving runs; TFLite and ONNX have no bfloat16 kernels on CPU). `load_predictor(path,
precision="auto")` runs a `.keras` model in bfloat16 where `keras_vit.machine` picks it. Class
names come from `class_names=`, from the labels an export stored in the artifact, or from
`<model>.labels.txt` or `labels.txt` (one name per line) beside the model file. A SigLIP 2
NaFlex model takes no images of one size: `naflex_saved_model` serves encoded images of any aspect,
`naflex_tflite` and `naflex_onnx` take one padded patch sequence as `keras_vit.naflex.naflex_inputs`
makes it.

Example:

>>> from keras_vit import export
>>> export.QUANTIZATIONS
('none', 'float16', 'dynamic', 'int8')
"""

from keras_vit.export._common import LABELS_FILENAME, ExportFailed, labels_beside, read_labels
from keras_vit.export.onnx import ONNXExport, naflex_onnx, onnx
from keras_vit.export.predict import Predictor, load_predictor
from keras_vit.export._tensorflow_process import shared_process
from keras_vit.export.saved_model import naflex_saved_model, saved_model
from keras_vit.export.tflite import (
    INT8_FLOAT_OPS,
    QUANTIZATIONS,
    TFLiteExport,
    naflex_tflite,
    tflite,
    tflite_ops,
    with_tanh_gelu,
)

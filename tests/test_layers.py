import keras
import numpy as np
import pytest

from helpers import ALL_BACKENDS, check_layer, to_numpy
from keras_vit.layers import (
    AttentionPooling,
    BottleneckUnit,
    DinoHead,
    DPTFusion,
    DPTReassemble,
    LayerScale,
    DropPath,
    MultiHeadSelfAttention,
    PatchEncoder,
    Patches,
    ProjectionHead,
    RotaryPositionEmbedding,
    ShiftedPatches,
    StandardizedConv2D,
    TokenPooling,
    TransformerBlock,
    sincos2d_embedding,
)

pytestmark = ALL_BACKENDS

LAYER_CASES = {
    "patches": (Patches, {"patch_size": 4}, (2, 8, 12, 3)),
    "shifted_patches": (ShiftedPatches, {"patch_size": 2}, (2, 4, 6, 3)),
    "patch_encoder": (PatchEncoder, {"patch_size": 4, "hidden_size": 16}, (2, 8, 12, 3)),
    "patch_encoder_sincos_no_cls": (
        PatchEncoder,
        {"patch_size": 4, "hidden_size": 16, "class_token": False, "position_embedding": "sincos2d"},
        (2, 8, 12, 1),
    ),
    "patch_encoder_resampled_grid": (
        PatchEncoder,
        {"patch_size": 4, "hidden_size": 16, "grid_size": (3, 3), "interpolation": "bicubic_hf"},
        (2, 8, 12, 3),
    ),
    "patch_encoder_none": (
        PatchEncoder,
        {"patch_size": 2, "hidden_size": 8, "position_embedding": "none"},
        (2, 4, 4, 3),
    ),
    "transformer_block": (
        TransformerBlock,
        {"hidden_size": 16, "num_heads": 2, "mlp_dim": 32, "dropout_rate": 0.1, "drop_path_rate": 0.1},
        (2, 5, 16),
    ),
    "transformer_block_tanh_gelu": (
        TransformerBlock,
        {"hidden_size": 16, "num_heads": 4, "mlp_dim": 24, "approximate_gelu": True, "attention_dropout_rate": 0.1},
        (2, 5, 16),
    ),
    "patch_encoder_registers_distilled_no_prefix_pos": (
        PatchEncoder,
        {"patch_size": 4, "hidden_size": 12, "distillation_token": True, "num_register_tokens": 3,
         "prefix_position_embedding": False, "use_bias": False},
        (2, 8, 12, 3),
    ),
    "transformer_block_layer_scale_swiglu": (
        TransformerBlock,
        {"hidden_size": 12, "num_heads": 3, "mlp_dim": 20, "mlp_activation": "swiglu", "layer_scale_init": 0.1},
        (2, 5, 12),
    ),
    "transformer_block_quick_gelu": (
        TransformerBlock, {"hidden_size": 12, "num_heads": 2, "mlp_dim": 20, "mlp_activation": "quick_gelu"}, (2, 5, 12),
    ),
    "transformer_block_fused_attention": (
        TransformerBlock, {"hidden_size": 12, "num_heads": 2, "mlp_dim": 20, "fused_attention": True}, (2, 5, 12),
    ),
    "dino_head": (DinoHead, {"out_dim": 6, "hidden_dim": 8, "bottleneck_dim": 4}, (2, 5)),
    "dino_head_one_layer": (DinoHead, {"out_dim": 6, "bottleneck_dim": 4, "num_layers": 1}, (3, 5)),
    "projection_head": (ProjectionHead, {"out_dim": 6, "hidden_dim": 8}, (4, 5)),
    "projection_head_one_layer_no_last_norm": (ProjectionHead, {"out_dim": 6, "num_layers": 1, "last_norm": False}, (3, 5)),
    "layer_scale": (LayerScale, {"init_value": 0.5}, (2, 5, 12)),
    "attention_pooling": (
        AttentionPooling, {"hidden_size": 12, "num_heads": 3, "mlp_dim": 20, "approximate_gelu": True}, (2, 5, 12),
    ),
    "token_pooling_distillation": (TokenPooling, {"mode": "token", "num_prefix_tokens": 2, "token_index": 1}, (2, 5, 8)),
    "self_attention": (MultiHeadSelfAttention, {"hidden_size": 16, "num_heads": 4, "dropout_rate": 0.1}, (2, 5, 16)),
    "self_attention_fused": (MultiHeadSelfAttention, {"hidden_size": 16, "num_heads": 4, "fused": True}, (2, 5, 16)),
    "token_pooling_token": (TokenPooling, {"mode": "token", "num_prefix_tokens": 1}, (2, 5, 8)),
    "token_pooling_gap": (TokenPooling, {"mode": "gap", "num_prefix_tokens": 0}, (2, 5, 8)),
    "drop_path": (DropPath, {"rate": 0.2, "seed": 3}, (4, 5, 8)),
    "standardized_conv": (StandardizedConv2D, {"filters": 4, "kernel_size": 3, "strides": 2}, (2, 7, 6, 3)),
    "standardized_conv_valid_bias": (
        StandardizedConv2D,
        {"filters": 4, "kernel_size": 2, "padding": "valid", "use_bias": True, "epsilon": 1e-3},
        (2, 5, 5, 2),
    ),
    "bottleneck_unit_projection": (BottleneckUnit, {"filters": 32, "strides": 2}, (2, 6, 6, 32)),
    "bottleneck_unit_identity": (BottleneckUnit, {"filters": 32, "epsilon": 1e-5}, (2, 4, 4, 128)),
    "dpt_reassemble_up": (DPTReassemble, {"channels": 6, "factor": 4, "output_channels": 8}, (2, 3, 5, 12)),
    "dpt_reassemble_down_even": (DPTReassemble, {"channels": 6, "factor": 0.5, "output_channels": 8}, (2, 4, 5, 12)),
    "dpt_fusion_first": (DPTFusion, {"channels": 8, "residual": False}, (2, 3, 5, 8)),
}


@pytest.mark.parametrize("case", sorted(LAYER_CASES))
def test_layer_contract(case):
    layer_cls, kwargs, shape = LAYER_CASES[case]
    check_layer(layer_cls, kwargs, shape)


def test_transformer_block_attention_scores_contract():
    check_layer(
        TransformerBlock,
        {"hidden_size": 8, "num_heads": 2, "mlp_dim": 16},
        (2, 5, 8),
        call_kwargs={"return_attention_scores": False},
    )
    block = TransformerBlock(8, 2, 16)
    y, scores = block(keras.Input((5, 8)), return_attention_scores=True)
    assert tuple(scores.shape) == (None, 2, 5, 5)
    y, scores = block(np.random.rand(3, 5, 8).astype("float32"), return_attention_scores=True)
    np.testing.assert_allclose(np.sum(to_numpy(scores), axis=-1), 1.0, atol=1e-5)


def test_self_attention_equals_keras_multi_head_attention():
    # Same kernel shapes and maths as keras.layers.MultiHeadAttention, only computed faster.
    x = np.random.default_rng(1).normal(size=(3, 7, 16)).astype("float32")
    reference = keras.layers.MultiHeadAttention(num_heads=4, key_dim=4)
    expected, expected_scores = reference(x, x, return_attention_scores=True)
    layer = MultiHeadSelfAttention(16, 4)
    layer.build(x.shape)
    dense = {"query": reference._query_dense, "key": reference._key_dense, "value": reference._value_dense,
             "output": reference._output_dense}
    for name, (kernel, bias) in layer.projections().items():
        kernel.assign(dense[name].kernel)
        bias.assign(np.random.default_rng(len(name)).normal(size=bias.shape))
        dense[name].bias.assign(bias)
    expected, expected_scores = reference(x, x, return_attention_scores=True)
    y, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(y), to_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), to_numpy(expected_scores), atol=1e-6)


def test_fused_attention_path_equals_the_explicit_one():
    # fused=True (keras.ops.dot_product_attention) must compute the same outputs from the same
    # variables; calls that return the weights or apply dropout keep the explicit path.
    x = np.random.default_rng(2).normal(size=(2, 9, 24)).astype("float32")
    layer = MultiHeadSelfAttention(24, 3, dropout_rate=0.5, name="attention")
    fused = MultiHeadSelfAttention(24, 3, dropout_rate=0.5, fused=True, name="attention")
    layer.build(x.shape)
    fused.build(x.shape)
    for name, (_, bias) in layer.projections().items():
        bias.assign(np.random.default_rng(len(name)).normal(size=bias.shape))
    assert [v.path for v in fused.weights] == [v.path for v in layer.weights]  # the weight schema
    fused.set_weights(layer.get_weights())
    explicit = to_numpy(layer(x))
    _, explicit_scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(fused(x)), explicit, atol=1e-5)
    y, scores = fused(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(y), explicit, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), to_numpy(explicit_scores), atol=1e-6)
    keras.utils.set_random_seed(0)
    dropped = to_numpy(fused(x, training=True))  # attention dropout: the explicit path
    assert not np.allclose(dropped, explicit, atol=1e-3)


def test_configs_saved_before_fused_existed_load_with_auto_the_explicit_path_off_a_jax_gpu():
    # A .keras file written before the argument existed holds configs without it: they load with
    # the default, "auto" (same outputs; one fused kernel only under JAX on a recent GPU).
    attention = MultiHeadSelfAttention(16, 4, fused=True)
    config = attention.get_config()
    assert config["fused"] is True
    del config["fused"]
    assert MultiHeadSelfAttention.from_config(config).fused == "auto"
    block = TransformerBlock(16, 4, 32, fused_attention=True)
    assert block.attention.fused is True
    config = block.get_config()
    del config["fused_attention"]
    restored = TransformerBlock.from_config(config)
    assert restored.fused_attention == "auto" and restored.attention.fused == "auto"
    from keras_vit import machine

    assert machine.default_fused_attention(machine.detect(), keras.backend.backend()) is False  # CI has no GPU
    with pytest.raises(ValueError, match="fused='yes'"):
        MultiHeadSelfAttention(16, 4, fused="yes")


@pytest.mark.backends("jax")
def test_flash_attention_pads_the_tokens_and_leaves_the_padding_out():
    # cuDNN's flash attention runs on tokens padded to a multiple of 16 (197 -> 208); checked here
    # with JAX's XLA implementation of the same call, against the unpadded attention.
    from keras_vit.backends import jax as jax_backend

    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(2, 21, 2, 8)).astype("float32") for _ in range(3))
    for causal in (False, True):
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(8)
        if causal:
            scores = np.where(np.tril(np.ones((21, 21), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        expected = np.einsum("bhqk,bkhd->bqhd", weights / weights.sum(-1, keepdims=True), v)
        got = jax_backend.flash_attention(q, k, v, 8 ** -0.5, causal, implementation="xla")
        np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)


def _rotary(grid_size=(3, 5), prefix=2, width=8, **settings):
    layer = RotaryPositionEmbedding(4, width, num_prefix_tokens=prefix, **settings)
    return layer, layer(np.zeros((1, 4 * grid_size[0], 4 * grid_size[1], 3), "float32"))


@pytest.mark.parametrize("settings", [{}, {"grid": "index", "layout": "interleaved", "axes": "xy", "offset": 1.0}])
def test_rotary_position_embedding_rotates_patches_only(settings):
    layer, (table, rotation) = _rotary(**settings)
    config = layer.get_config()
    assert {key: config[key] for key in ("patch_size", "head_dim", "num_prefix_tokens")} == {
        "patch_size": 4, "head_dim": 8, "num_prefix_tokens": 2}
    assert RotaryPositionEmbedding.from_config(config).get_config() == config
    table = to_numpy(table)
    assert table.shape == (2, 2 + 15, 8) and to_numpy(rotation).dtype == np.int32
    np.testing.assert_array_equal(table[0, :2], 1.0)  # class and register tokens: cos 1, sin 0
    np.testing.assert_array_equal(table[1, :2], 0.0)
    assert np.abs(table[1, 2:]).max() > 0.1  # patches turn
    queries = np.random.default_rng(0).normal(size=(2, 17, 3, 8)).astype("float32")
    from keras_vit.layers.rotary_embedding import apply_rotary

    rotated = to_numpy(apply_rotary(queries, (table, rotation)))
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(queries, axis=-1), rtol=1e-5)


def test_rotary_scores_depend_on_the_offset_between_patches_only():
    """On an index grid a query and a key shifted by the same rows and columns keep their dot product."""
    from keras_vit.layers.rotary_embedding import apply_rotary

    _, rope = _rotary(grid_size=(4, 4), prefix=0, width=8, grid="index", theta=10.0)
    q, k = np.random.default_rng(1).normal(size=(2, 8)).astype("float32")
    rotated_q = to_numpy(apply_rotary(np.tile(q, (1, 16, 1, 1)), rope))[0, :, 0].reshape(4, 4, 8)
    rotated_k = to_numpy(apply_rotary(np.tile(k, (1, 16, 1, 1)), rope))[0, :, 0].reshape(4, 4, 8)
    score = lambda a, b: float(rotated_q[a] @ rotated_k[b])  # noqa: E731
    assert score((0, 0), (1, 2)) == pytest.approx(score((2, 1), (3, 3)), abs=1e-5)
    assert score((0, 0), (1, 2)) != pytest.approx(score((0, 0), (2, 1)), abs=1e-3)


def test_query_value_bias_attention_with_rotary_position():
    """No key bias is a zero one; the fused path rotates as the explicit one; the rotation changes the attention."""
    _, rope = _rotary(grid_size=(2, 3), prefix=1, width=4)
    x = np.random.default_rng(4).normal(size=(2, 7, 12)).astype("float32")
    qv, fused, full = (MultiHeadSelfAttention(12, 3, **kwargs) for kwargs in (
        dict(qkv_bias="qv"), dict(qkv_bias="qv", fused=True), {}))
    for layer in (qv, fused, full):
        layer.build(x.shape)
    assert qv.projections()["key"][1] is None
    assert [v.path.split("/", 1)[1] for v in qv.weights if "/key/" in v.path] == ["key/kernel"]
    for name, (kernel, bias) in qv.projections().items():
        if bias is not None:
            bias.assign(np.random.default_rng(len(name)).normal(size=bias.shape))
        full.projections()[name][0].assign(kernel)
        full.projections()[name][1].assign(bias if bias is not None else np.zeros(full.projections()[name][1].shape))
    fused.set_weights(qv.get_weights())
    rotated = to_numpy(qv(x, rope=rope))
    np.testing.assert_allclose(to_numpy(full(x, rope=rope)), rotated, atol=1e-6)
    np.testing.assert_allclose(to_numpy(fused(x, rope=rope)), rotated, atol=1e-5)
    assert np.abs(rotated - to_numpy(qv(x))).max() > 1e-3


def test_rotary_position_embedding_takes_any_grid_and_the_policy():
    layer = RotaryPositionEmbedding(4, 8, num_prefix_tokens=1)
    table, rotation = layer(keras.Input((None, None, 3)))
    assert tuple(table.shape) == (2, None, 8) and tuple(rotation.shape) == (8,)
    mixed = RotaryPositionEmbedding(4, 8, dtype="mixed_bfloat16")
    assert keras.backend.standardize_dtype(mixed(np.zeros((1, 8, 12, 3), "float32"))[0].dtype) == "bfloat16"


def test_patches_order_matches_reshape_by_hand():
    images = np.arange(2 * 4 * 6 * 3, dtype="float32").reshape(2, 4, 6, 3)
    patches = to_numpy(Patches(2)(images))
    assert patches.shape == (2, 6, 12)
    # Patch (row 1, col 2) of image 1, flattened in (row, col, channel) order.
    np.testing.assert_array_equal(patches[1, 1 * 3 + 2], images[1, 2:4, 4:6, :].reshape(-1))


def test_shifted_patches_hold_the_image_and_its_four_diagonal_shifts():
    """Lee et al. 2021: the views moved by P // 2 along the diagonals, zero-filled, stacked after the image."""
    images = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    grid = to_numpy(ShiftedPatches(4)(images))
    assert grid.shape == (2, 2, 3, 4 * 4 * 5 * 3)

    def moved(rows, cols, s=2):  # content moved down by rows * s and right by cols * s, zeros let in
        out = np.zeros_like(images)
        h, w = images.shape[1:3]
        out[:, max(rows * s, 0):h + min(rows * s, 0), max(cols * s, 0):w + min(cols * s, 0)] = \
            images[:, max(-rows * s, 0):h + min(-rows * s, 0), max(-cols * s, 0):w + min(-cols * s, 0)]
        return out

    stacked = np.concatenate([images] + [moved(r, c) for r, c in ((-1, -1), (-1, 1), (1, -1), (1, 1))], axis=-1)
    expected = to_numpy(Patches(4)(stacked)).reshape(2, 2, 3, -1)
    np.testing.assert_array_equal(grid, expected)
    # An odd patch shifts by its floor half: 3 px for 7 px patches.
    odd = to_numpy(ShiftedPatches(7)(np.ones((1, 14, 14, 1), "float32"))).reshape(1, 2, 2, 7, 7, 5)
    assert odd[0, 0, 0, :, :, 4].sum() == 4 * 4  # down-right view of the top-left patch: 3 rows and columns of zeros


def test_patch_encoder_equals_patches_times_kernel():
    encoder = PatchEncoder(4, 8, class_token=True, position_embedding="none")
    images = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    tokens = to_numpy(encoder(images))
    kernel = encoder.kernel.numpy().reshape(-1, 8)
    expected = to_numpy(Patches(4)(images)) @ kernel + encoder.bias.numpy()
    np.testing.assert_allclose(tokens[:, 1:], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(tokens[:, 0], 0.0)  # zero-initialised class token, no position embedding


def test_learned_position_embedding_is_added_per_token():
    encoder = PatchEncoder(2, 4, class_token=True)
    images = np.zeros((1, 4, 6, 3), "float32")
    tokens = to_numpy(encoder(images))
    assert encoder.pos_embedding.shape == (1, 7, 4)
    assert 0.01 < np.std(encoder.pos_embedding.numpy()) < 0.04
    np.testing.assert_allclose(tokens[0], encoder.pos_embedding.numpy()[0], atol=1e-6)


def test_sincos2d_values():
    pos = to_numpy(sincos2d_embedding(2, 3, 8))
    # Token (row 1, col 2): first quarter sin(col * omega), third quarter sin(row * omega).
    omega = 1.0 / 10000.0 ** (np.arange(2) / 1.0)
    np.testing.assert_allclose(pos[5, :2], np.sin(2 * omega), atol=1e-6)
    np.testing.assert_allclose(pos[5, 4:6], np.sin(1 * omega), atol=1e-6)
    np.testing.assert_allclose(pos[0], [0, 0, 1, 1, 0, 0, 1, 1], atol=1e-6)


def test_transformer_block_matches_numpy_reference():
    block = TransformerBlock(8, 2, 16, approximate_gelu=True)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    y = to_numpy(block(x))
    for w in block.weights:  # perturb biases and norms so the reference checks every weight's role
        w.assign(w.numpy() + np.random.default_rng(len(w.path)).normal(scale=0.1, size=w.shape).astype("float32"))
    y = to_numpy(block(x))
    get = {w.path.split("/", 1)[1]: w.numpy() for w in block.weights}

    def ln(v, g, b):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(v.var(-1, keepdims=True) + 1e-6) * g + b

    h = ln(x, get["norm1/gamma"], get["norm1/beta"])
    q, k, v = (np.einsum("btd,dhk->bhtk", h, get[f"attention/{n}/kernel"]) + get[f"attention/{n}/bias"].transpose(0, 1)[None, :, None] for n in ("query", "key", "value"))
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(4)
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = np.einsum("bhtk,hkd->btd", a @ v, get["attention/attention_output/kernel"]) + get["attention/attention_output/bias"]
    x1 = x + o
    m = ln(x1, get["norm2/gamma"], get["norm2/beta"]) @ get["mlp_dense_0/kernel"] + get["mlp_dense_0/bias"]
    m = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m**3)))
    expected = x1 + m @ get["mlp_dense_1/kernel"] + get["mlp_dense_1/bias"]
    np.testing.assert_allclose(y, expected, atol=2e-5)


def test_exact_gelu_matches_keras_gelu():
    from keras_vit.layers.transformer_block import gelu

    x = np.linspace(-12, 12, 20001).astype("float32")
    np.testing.assert_allclose(to_numpy(gelu(x)), to_numpy(keras.ops.gelu(x, approximate=False)), atol=2e-6)
    np.testing.assert_allclose(to_numpy(gelu(x, approximate=True)), to_numpy(keras.ops.gelu(x, approximate=True)))


@pytest.mark.backends("tensorflow")
def test_exact_gelu_runs_erf_not_tensorflows_slower_erfc():
    import tensorflow as tf

    block = TransformerBlock(8, 2, 16)
    graph = tf.function(lambda x: block(x)).get_concrete_function(tf.TensorSpec((2, 3, 8))).graph
    op_types = {op.type for op in graph.get_operations()}
    assert "Erf" in op_types and "Erfc" not in op_types


# Runs in a child so that TF_ENABLE_ONEDNN_OPTS=1 holds whatever this CPU's default is: the
# inference graph after grappler, biases made non-zero so that constant folding keeps them. The
# variables are frozen (as the ONNX export does; pinned in tests/test_private_apis.py) so that a
# TF1 session can run the graph and hand back what grappler made of it.
_FUSED_MATMULS = """
import sys, numpy as np, tensorflow as tf, keras
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
from keras_vit.layers import TransformerBlock
keras.config.set_dtype_policy(sys.argv[1])
block = TransformerBlock(32, 4, 64, approximate_gelu=sys.argv[2] == "tanh")
block.build((2, 5, 32))
for weight in block.weights:
    weight.assign(np.random.default_rng(0).uniform(0.5, 1.0, weight.shape).astype("float32"))
frozen = convert_variables_to_constants_v2(
    tf.function(lambda x: block(x, training=False)).get_concrete_function(tf.TensorSpec((2, 5, 32))))
graph = tf.Graph()
with graph.as_default():
    tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
inputs = [op.outputs[0] for op in graph.get_operations() if op.type == "Placeholder"][0]
metadata = tf.compat.v1.RunMetadata()
with tf.compat.v1.Session(graph=graph) as session:
    session.run(graph.get_tensor_by_name(frozen.outputs[0].name), {inputs: np.ones((2, 5, 32), "float32")},
                options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
for node in (n for g in metadata.partition_graphs for n in g.node if n.op.endswith("MatMul")):
    print(node.op, "+".join(f.decode() for f in node.attr["fused_ops"].list.s))
"""


@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("form, fused", [("erf", "GeluExact"), ("tanh", "GeluApproximate")])
def test_the_mlp_runs_its_bias_and_gelu_inside_onednns_matrix_product(policy, form, fused):
    """Each of GELU's element-wise ops ran alone over the (B, T, mlp_dim) tensor (a tenth of a ViT-B/16 call).

    The tanh form (SigLIP's) fuses only where the Dense applies it in its own call (`dense_activation`).
    """
    import os
    import subprocess
    import sys

    environ = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run([sys.executable, "-c", _FUSED_MATMULS, policy, form], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    products = [tuple(line.split()) for line in done.stdout.splitlines()]
    from keras_vit import machine

    if policy == "mixed_bfloat16" and not machine.native_bfloat16(machine.read_cpuinfo()[1]):
        # Without avx512_bf16 or amx_bf16 TensorFlow leaves bfloat16 products to Eigen, unfused (seen on
        # an AVX2-only EPYC): nothing for the rows to fuse. Which branch runs is the CPU's, not forceable.
        assert products == [("MatMul",)] * 4
        return
    # The query-key-value, output and two MLP products, each one fused kernel.
    assert sorted(products) == sorted([("_MklNativeFusedMatMul", "BiasAdd")] * 3
                                      + [("_MklNativeFusedMatMul", f"BiasAdd+{fused}")])


def test_drop_path_drops_whole_samples():
    layer = DropPath(0.5, seed=0)
    y = to_numpy(layer(np.ones((256, 3, 2), "float32"), training=True))
    per_sample = y.reshape(256, -1)
    assert set(np.unique(per_sample)) <= {0.0, 2.0}
    assert np.all(per_sample.min(1) == per_sample.max(1))  # a sample is dropped whole or kept whole
    assert 0.3 < np.mean(per_sample[:, 0] == 0) < 0.7


def test_drop_path_scales_by_a_per_sample_factor_without_a_select():
    """A select of full-size tensors costs the training step more than a broadcast product (and its gradient)."""
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow graph")
    layer = DropPath(0.25, seed=0)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return tape.gradient(tf.reduce_sum(y), x)

    graph = tf.function(step).get_concrete_function(tf.TensorSpec((2, 3, 8))).graph
    assert not {op.type for op in graph.get_operations()} & {"Select", "SelectV2", "ZerosLike"}


@pytest.mark.parametrize(
    "factory, message",
    [
        (lambda: Patches(0), "patch_size=0"),
        (lambda: Patches(4)(np.zeros((1, 10, 8, 3), "float32")), "image height=10"),
        (lambda: ShiftedPatches(1), "patch_size=1"),
        (lambda: ShiftedPatches(4)(np.zeros((1, 8, 10, 3), "float32")), "image width=10"),
        (lambda: PatchEncoder(4, 16, position_embedding="rope"), "position_embedding='rope'"),
        (lambda: PatchEncoder(4, 6, position_embedding="sincos2d"), "hidden_size=6"),
        (lambda: TransformerBlock(10, 3, 16), "hidden_size=10"),
        (lambda: MultiHeadSelfAttention(8, 2, dropout_rate=1.5), "dropout_rate=1.5"),
        (lambda: MultiHeadSelfAttention(8, 2)(np.zeros((1, 3, 6), "float32")), "input_shape=(1, 3, 6)"),
        (lambda: TransformerBlock(8, 2, 16, dropout_rate=1.0), "dropout_rate=1.0"),
        (lambda: TransformerBlock(8, 2, 16, drop_path_rate=-0.1), "drop_path_rate=-0.1"),
        (lambda: TokenPooling("median"), "pooling='median'"),
        (lambda: TokenPooling("token", num_prefix_tokens=0), "needs a class token"),
        (lambda: DropPath(1.5), "rate=1.5"),
        (lambda: StandardizedConv2D(4, 3, padding="causal"), "padding='causal'"),
        (lambda: StandardizedConv2D(4, 3, epsilon=-1.0), "epsilon=-1.0"),
        (lambda: StandardizedConv2D(0, 3), "filters=0"),
        (lambda: BottleneckUnit(48), "filters=48"),
        (lambda: BottleneckUnit(32)(np.zeros((2, 4, 32), "float32")), "feature maps"),
        (lambda: MultiHeadSelfAttention(8, 2, qkv_bias="k"), "qkv_bias='k'"),
        (lambda: RotaryPositionEmbedding(4, 6), "head_dim=6"),
        (lambda: RotaryPositionEmbedding(4, 8, layout="pairs"), "rope layout='pairs'"),
        (lambda: RotaryPositionEmbedding(4, 8, grid="index", reference_grid=(0, 3)), "reference_grid rows=0"),
        (lambda: RotaryPositionEmbedding(4, 8, theta=0), "rope theta=0"),
    ],
)
def test_layer_bad_input(factory, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        factory()


@pytest.mark.parametrize("rope", [False, True])
def test_attention_gradient_scatters_no_slices(rope):
    # TensorFlow's gradient of a strided slice writes it into a zero tensor of the whole input:
    # slicing query, key and value out of one (B, T, 3, heads, width) tensor cost 12% of a small
    # ViT's training step on CPU (benchmarks/RESULTS.md, issue 50). A split's gradient is a concat.
    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow graph's operations")
    import tensorflow as tf

    from keras_vit.layers import RotaryPositionEmbedding

    layer = MultiHeadSelfAttention(16, 2)
    tokens = tf.zeros((2, 4, 16))
    angles = RotaryPositionEmbedding(4, 8)(tf.zeros((1, 8, 8, 3))) if rope else None  # 4 patches, heads of 8
    layer(tokens, rope=angles)

    @tf.function
    def gradients(tokens):
        with tf.GradientTape() as tape:
            tape.watch(tokens)
            outputs = layer(tokens, training=True, rope=angles)
        return tape.gradient(outputs, [tokens] + [v.value for v in layer.trainable_variables])

    operations = {op.type for op in gradients.get_concrete_function(tokens).graph.get_operations()}
    assert "MatMul" in operations and "StridedSliceGrad" not in operations

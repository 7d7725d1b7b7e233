"""Hybrid ResNet + ViT: the BiT stem against references, the hybrid builders, the backbone= option.

The generic model tests (parameter count, named builder, .keras round trip, export, mixed
precision, XLA fit) run over the hybrid rows of configs.VARIANTS in tests/test_models.py.
"""

import keras
import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, check_save_load_export, to_numpy
from keras_vit.layers import BottleneckUnit, StandardizedConv2D
from keras_vit.models.resnet import BiTResNet

pytestmark = ALL_BACKENDS


def _same_pad(x, kernel, stride):
    """TensorFlow/Flax SAME padding of NHWC x: the odd pixel goes to the bottom/right."""
    pads = []
    for size in x.shape[1:3]:
        out = -(-size // stride)
        total = max((out - 1) * stride + kernel - size, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])


def _numpy_conv(x, w, stride):
    k = w.shape[0]
    x = _same_pad(x, k, stride)
    rows = (x.shape[1] - k) // stride + 1
    cols = (x.shape[2] - k) // stride + 1
    out = np.zeros((x.shape[0], rows, cols, w.shape[-1]))
    for i in range(rows):
        for j in range(cols):
            window = x[:, i * stride:i * stride + k, j * stride:j * stride + k, :]
            out[:, i, j] = np.tensordot(window, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def _numpy_group_norm(x, gamma, beta, groups=32, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * gamma + beta


def test_weight_standardised_conv_and_group_norm_match_numpy():
    """conv_root + gn_root against an independent float64 NumPy reference, epsilon included."""
    rng = np.random.default_rng(0)
    conv = StandardizedConv2D(32, 7, strides=2)
    norm = keras.layers.GroupNormalization(32, epsilon=1e-6)
    x = rng.normal(size=(2, 11, 10, 3)).astype("float32")
    conv.build(x.shape)
    # A kernel with std ~1e-4, so (std + 1e-5) and sqrt(var + 1e-8) give visibly different results.
    w = (rng.normal(size=conv.kernel.shape) * 1e-4 + 3e-4).astype("float32")
    conv.kernel.assign(w)
    y = to_numpy(norm(conv(x)))
    norm.gamma.assign(rng.normal(size=32).astype("float32"))
    norm.beta.assign(rng.normal(size=32).astype("float32"))
    y = to_numpy(norm(conv(x)))

    w64 = w.astype("float64")
    mean = w64.mean(axis=(0, 1, 2))
    std = w64.std(axis=(0, 1, 2))
    standardized = (w64 - mean) / (std + 1e-5)
    np.testing.assert_allclose(to_numpy(conv.standardized_kernel()), standardized, rtol=1e-4, atol=1e-4)
    expected = _numpy_group_norm(_numpy_conv(x.astype("float64"), standardized, 2), norm.gamma.numpy(), norm.beta.numpy())
    assert y.shape == (2, 6, 5, 32)
    np.testing.assert_allclose(y, expected, atol=1e-4)
    # The var+1e-8 form of timm/HF differs here by far more than the tolerance: the test can fail.
    other = (w64 - mean) / np.sqrt(std**2 + 1e-8)
    assert np.max(np.abs(other - standardized)) > 1e-2


def _hf_bit_model(depths, width):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "BitModel"):
        pytest.skip("this transformers version has no BitModel")
    config = transformers.BitConfig(
        embedding_size=width,
        hidden_sizes=[4 * width * 2**s for s in range(len(depths))],
        depths=list(depths),
        layer_type="bottleneck",  # the non-pre-activation units of the ViT hybrids
        global_padding="SAME",
        embedding_dynamic_padding=True,
    )
    torch.manual_seed(0)
    model = transformers.BitModel(config).eval()
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.GroupNorm):
            module.eps = 1e-6  # HF defaults to 1e-5; the ViT hybrids use 1e-6
            with torch.no_grad():
                module.weight.copy_(1 + 0.3 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator))
        elif hasattr(module, "eps") and isinstance(module, torch.nn.Conv2d):
            # HF standardises with sqrt(var + eps), keras_vit with (std + eps) like vit_jax: the two
            # agree at eps -> 0. The epsilon itself is checked against NumPy above.
            module.eps = 1e-20  # torch requires eps > 0; negligible next to var
    return model


def _copy_hf_bit_weights(hf, stem):
    def kernel(conv):
        return conv.weight.detach().numpy().transpose(2, 3, 1, 0)

    def norm(layer, module):
        layer.gamma.assign(module.weight.detach().numpy())
        layer.beta.assign(module.bias.detach().numpy())

    stem.get_layer("conv_root").kernel.assign(kernel(hf.embedder.convolution))
    norm(stem.get_layer("gn_root"), hf.embedder.norm)
    for s, stage in enumerate(hf.encoder.stages, start=1):
        for u, unit in enumerate(stage.layers, start=1):
            layer = stem.get_layer(f"block{s}_unit{u}")
            for i in (1, 2, 3):
                getattr(layer, f"conv{i}").kernel.assign(kernel(getattr(unit, f"conv{i}")))
                norm(getattr(layer, f"gn{i}"), getattr(unit, f"norm{i}"))
            assert (unit.downsample is None) == (layer.conv_proj is None)
            if unit.downsample is not None:
                layer.conv_proj.kernel.assign(kernel(unit.downsample.conv))
                norm(layer.gn_proj, unit.downsample.norm)


@pytest.mark.parametrize("size", [64, 50])
def test_stem_matches_hugging_face_bit(size):
    """The ResNet stem equals transformers' BiT (layer_type="bottleneck", SAME padding), the ViT-hybrid backbone."""
    import torch

    hf = _hf_bit_model((2, 1), 32)
    stem = BiTResNet((2, 1), width=32)
    stem.get_layer("conv_root").epsilon = 0.0
    for layer in stem.layers:
        if isinstance(layer, BottleneckUnit):
            for conv in (layer.conv1, layer.conv2, layer.conv3, layer.conv_proj):
                if conv is not None:
                    conv.epsilon = 0.0
    _copy_hf_bit_weights(hf, stem)
    images = np.random.default_rng(2).normal(size=(2, size, size, 3)).astype("float32")
    with torch.no_grad():
        expected = hf(torch.from_numpy(images.transpose(0, 3, 1, 2))).last_hidden_state.numpy().transpose(0, 2, 3, 1)
    got = to_numpy(stem(images))
    assert got.shape == expected.shape == (2, -(-size // 8), -(-size // 8), 256)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_stem_structure_follows_the_checkpoints():
    stem = BiTResNet((3, 4, 9))
    assert stem.compute_output_shape((1, 384, 384, 3)) == (1, 24, 24, 1024)
    assert stem.get_layer("conv_root").kernel.shape == (7, 7, 3, 64)
    assert stem.get_layer("conv_root").strides == 2 and not stem.get_layer("conv_root").use_bias
    assert stem.get_layer("gn_root").groups == 32 and stem.get_layer("gn_root").epsilon == 1e-6
    units = [layer for layer in stem.layers if isinstance(layer, BottleneckUnit)]
    assert [u.name for u in units[:4]] == ["block1_unit1", "block1_unit2", "block1_unit3", "block2_unit1"]
    assert [u.name for u in units if u.conv_proj is not None] == ["block1_unit1", "block2_unit1", "block3_unit1"]
    assert [u.name for u in units if u.strides == 2] == ["block2_unit1", "block3_unit1"]
    unit = stem.get_layer("block3_unit2")
    assert unit.conv2.kernel.shape == (3, 3, 256, 256) and unit.conv3.kernel.shape == (1, 1, 256, 1024)
    assert np.all(unit.gn3.gamma.numpy() == 0)  # zero-initialised last norm: a fresh unit starts as identity
    root = BiTResNet(())
    assert root.compute_output_shape((1, 224, 224, 3)) == (1, 56, 56, 64)


@pytest.mark.backends("tensorflow")  # a count of weight shapes, alike on every backend (25 s of full builds on JAX)
def test_hybrid_reference_parameter_counts():
    # timm 1.0.31: vit_base_r50_s16_384 and vit_small_r26_s32_224.
    assert keras_vit.R50_ViT_B16(image_size=384, num_classes=1000).count_params() == 98_950_952
    assert keras_vit.R26_ViT_S32(num_classes=10).count_params() == 36_050_762


def test_hybrid_tokens_and_stem_dtype():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.ViT("R_tiny", include_top=False, pooling=None, preprocessing="symmetric")
    keras.config.set_dtype_policy("float32")
    assert model.output_shape == (None, 65, 32)  # 32 px / stride 4 = 8x8 cells + class token
    assert model.get_layer("resnet").get_layer("block1_unit1").compute_dtype == "bfloat16"
    assert model.get_layer("embedding").kernel.shape == (1, 1, 128, 32)
    out = model(np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32"))
    assert np.all(np.isfinite(to_numpy(out).astype("float32")))


def test_r_ti16_patches_the_root_feature_map():
    model = keras_vit.R_ViT_Ti16(num_layers=1, image_size=64, num_classes=3)
    assert model.name == "vit_r_ti16"
    assert model.get_layer("resnet").output_shape == (None, None, None, 64)
    assert model.get_layer("embedding").kernel.shape == (8, 8, 64, 192)
    assert model.get_layer("embedding").grid_size == (2, 2)


def _small_backbone(stride=4):
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="c1")(inputs)
    x = keras.layers.Conv2D(24, 3, strides=stride // 2, padding="same", name="c2")(x)
    return keras.Model(inputs, x, name="small_backbone")


def test_backbone_option_projects_the_feature_map(tmp_path):
    backbone = _small_backbone()
    model = keras_vit.ViT("tiny", backbone=backbone, image_size=16, num_classes=3)
    # patch_size defaults to 1 with a backbone: one token per feature-map cell, 24 -> 32 channels.
    assert model.get_layer("embedding").kernel.shape == (1, 1, 24, 32)
    assert model.get_layer("embedding").grid_size == (4, 4)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    check_save_load_export(model, tmp_path, images)
    # An explicit patch size patches the feature map; a backbone replaces a hybrid's own stem.
    patched = keras_vit.ViT("R_tiny", backbone=_small_backbone(), patch_size=2, image_size=16)
    assert patched.get_layer("embedding").kernel.shape == (2, 2, 24, 32)
    assert "resnet" not in [layer.name for layer in patched.layers]


@pytest.mark.backends("tensorflow")  # a keras.applications ResNet: Keras' own model, slow to build off TensorFlow
def test_keras_applications_backbone():
    backbone = keras.applications.EfficientNetB0(include_top=False, weights=None)
    model = keras_vit.ViT("tiny", backbone=backbone, image_size=64, num_classes=2)
    assert model.get_layer("embedding").kernel.shape == (1, 1, 1280, 32)
    assert model.output_shape == (None, 2)
    # 100 px gives ceil(100 / 32) = 4 cells and 100 % 4 == 0: only probing the true stride catches it.
    with pytest.raises(ValueError, match=r"image height=100 .*efficientnet.*about 32 pixels"):
        keras_vit.ViT("tiny", backbone=backbone, image_size=100)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"backbone": "resnet50"}, "Invalid backbone='resnet50'"),
        ({"backbone": keras.Sequential([keras.layers.Conv2D(8, 4, strides=4), keras.layers.GlobalAveragePooling2D()])},
         r"4-D feature map .*got output shape \(None, 8\)"),
        ({"backbone": keras.layers.Conv2D(8, 3, strides=3), "image_size": 32}, "image height=32 .*does not tile"),
        ({"backbone": keras.layers.Conv2D(8, 3, strides=2, padding="valid"), "image_size": 32}, "15 cells"),
        ({"backbone": keras.layers.Conv2D(8, 2, strides=2), "patch_size": 3, "image_size": 32},
         r"16 cells, not divisible by patch_size=3.*multiple of 6"),
    ],
)
def test_backbone_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT("tiny", **kwargs)


def test_multi_output_backbone_is_rejected():
    inputs = keras.Input((None, None, 3))
    a = keras.layers.Conv2D(8, 2, strides=2)(inputs)
    b = keras.layers.Conv2D(8, 2, strides=2)(a)
    with pytest.raises(ValueError, match="one 4-D feature map"):
        keras_vit.ViT("tiny", backbone=keras.Model(inputs, [a, b]))


@pytest.mark.parametrize(
    "variant, kwargs, message",
    [
        ("R_tiny", {"image_size": 30}, r"image height=30 .*resnet.*about 4 pixels"),
        ("R_tiny", {"image_size": (32, 36)}, None),
        ("R_tiny", {"image_size": (32, 34)}, "image width=34"),
        ("R_Ti16", {"image_size": 40, "num_layers": 1}, r"10 cells, not divisible by patch_size=8.*multiple of 32"),
    ],
)
def test_hybrid_image_size_checks(variant, kwargs, message):
    if message is None:
        assert keras_vit.ViT(variant, **kwargs).get_layer("embedding").grid_size == (8, 9)
        return
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(variant, **kwargs)


def test_bit_resnet_bad_input():
    with pytest.raises(ValueError, match="width=48"):
        BiTResNet((1,), width=48)
    with pytest.raises(ValueError, match="stage_depths entry=0"):
        BiTResNet((2, 0))

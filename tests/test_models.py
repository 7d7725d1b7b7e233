import keras
import numpy as np
import pytest

import keras_vit
from helpers import (ALL_BACKENDS, JIT_COMPILE, STRUCTURE_ROWS, check_save_load_export, reduced_variant_kwargs,
                     sample_inputs, to_numpy)
from keras_vit.configs import VARIANTS

pytestmark = ALL_BACKENDS

# timm 1.0.31 parameter counts (../shared/reference/VIT_FACTS.md), 1000 classes, image 224.
TIMM_COUNTS = {
    "Ti16": 5_717_416,
    "S16": 22_050_664,
    "S32": 22_878_952,
    "B8": 86_576_872,
    "B16": 86_567_656,
    "B32": 88_224_232,
    "L16": 304_326_632,
    "R26_S32": 36_431_912,
}
# timm 1.0.31 parameter counts of the family rows, built with pretrained=False (no download) at
# the row's image size; (timm model, num_classes): 0 classes compares the backbone
# (include_top=False, no projection: timm's CLIP head is the projection with a bias).
TIMM_FAMILY_COUNTS = {
    "DeiT_Ti16_distilled": ("deit_tiny_distilled_patch16_224", 1000, 5_910_800),
    "DeiT_S16_distilled": ("deit_small_distilled_patch16_224", 1000, 22_436_432),
    "DeiT_B16_distilled": ("deit_base_distilled_patch16_224", 1000, 87_338_192),
    "DeiT3_S16": ("deit3_small_patch16_224", 1000, 22_059_496),
    "DeiT3_B16": ("deit3_base_patch16_224", 1000, 86_585_320),
    "DeiT3_L16": ("deit3_large_patch16_224", 1000, 304_374_760),
    "DINOv2_S14": ("vit_small_patch14_dinov2", 0, 22_056_192),
    "DINOv2_B14": ("vit_base_patch14_dinov2", 0, 86_579_712),
    "DINOv2_L14": ("vit_large_patch14_dinov2", 0, 304_367_616),
    "DINOv2_S14_reg4": ("vit_small_patch14_reg4_dinov2", 0, 22_057_344),
    "DINOv2_B14_reg4": ("vit_base_patch14_reg4_dinov2", 0, 86_582_016),
    "DINOv2_L14_reg4": ("vit_large_patch14_reg4_dinov2", 0, 304_370_688),
    "SigLIP_B16": ("vit_base_patch16_siglip_224", 0, 92_884_224),
    "SigLIP_L16": ("vit_large_patch16_siglip_256", 0, 315_956_224),
    "SigLIP_So400m14": ("vit_so400m_patch14_siglip_224", 0, 427_680_704),
    "CLIP_B32": ("vit_base_patch32_clip_224", 0, 87_456_000),
    "CLIP_B16": ("vit_base_patch16_clip_224", 0, 85_799_424),
    "CLIP_L14": ("vit_large_patch14_clip_224", 0, 303_179_776),
    # timm's _qkvb names build the rows (query and value biases); B, L and H+ match too (85_659_648,
    # 303_128_576, 840_591_360), left out here for the time their full builds take.
    "DINOv3_S16": ("vit_small_patch16_dinov3_qkvb", 0, 21_596_160),
    "DINOv3_S16_plus": ("vit_small_plus_patch16_dinov3_qkvb", 0, 28_692_480),
    # B/16, L/14 and G/14 match too (92_886_528, 316_102_656, 1_880_066_560), left out for their build time.
    "PE_Core_T16": ("vit_pe_core_tiny_patch16_384", 0, 6_042_240),
    "PE_Core_S16": ("vit_pe_core_small_patch16_384", 0, 23_586_048),
    # EVA-02's B and L (the MLP's LayerNorm) match too (85_758_720, 303_268_800), left out for their build time.
    "EVA02_Ti14": ("eva02_tiny_patch14_224", 0, 5_502_144),
    "EVA02_S14": ("eva02_small_patch14_224", 0, 21_621_120),
}
PAPER_VARIANTS = sorted(k for k in VARIANTS if "tiny" not in k and VARIANTS[k].family == "vit")
FAMILY_VARIANTS = sorted(k for k in VARIANTS if "tiny" not in k and VARIANTS[k].family != "vit")


def stem_params(row):
    """(output channels, parameters) of a hybrid's ResNet stem, counted by hand: (3, 0) without one."""
    if row.stem is None:
        return 3, 0
    width = row.stem_width
    count = 7 * 7 * 3 * width + 2 * width  # conv_root, gn_root
    channels = width
    for s, depth in enumerate(row.stem):
        mid = width * 2**s
        for u in range(depth):
            count += channels * mid + 9 * mid * mid + mid * 4 * mid + 2 * (mid + mid + 4 * mid)
            if u == 0:
                count += channels * 4 * mid + 2 * 4 * mid  # conv_proj, gn_proj
            channels = 4 * mid
    return channels, count


def expected_params(row, num_classes, image_size, projection=True):
    """Parameter count of a ViT written out from the paper's equations (and the family fields'
    definitions), independent of the builder; num_classes=0 counts the model without a head."""
    d, m = row.hidden_size, row.mlp_dim
    prefix = int(row.class_token) + int(row.distillation_token)
    tokens = (image_size // row.pixel_patch_size) ** 2 + (prefix if row.prefix_position_embedding else 0)
    tokens *= row.position_embedding == "learned"  # rotary position (DINOv3) has no table
    channels, stem = stem_params(row)
    embed = row.patch_size**2 * channels * d + d * row.patch_bias + d * prefix + d * row.num_register_tokens + tokens * d

    def mlp(width):  # SwiGLU packs its gate and value in the first Dense
        inner = 2 * width if row.mlp_activation == "swiglu" else width
        return (d * inner + inner) + (width * d + d)

    qkv_biases = {"qkv": 3, "qv": 2, "none": 0}[row.qkv_bias]
    block = (2 * 2 * d + 4 * d * d + (qkv_biases + 1) * d + mlp(m) + 2 * d * (row.layer_scale_init is not None)
             + 2 * m * row.mlp_norm)
    pooling = d + 4 * (d * d + d) + 2 * d + mlp(row.pooling_mlp_dim or m) if row.pooling == "map" else 0
    width = row.projection_size if projection and row.projection_size else d
    projection_params = d * row.projection_size if projection and row.projection_size else 0
    heads = (1 + row.distillation_token) * (width * num_classes + num_classes) if num_classes else 0
    return (stem + embed + 2 * d * row.pre_norm + row.num_layers * block + 2 * d + pooling + projection_params
            + heads)


# Every block is alike, so builds of 1 and 2 blocks give the count of any depth. Above this a full
# build costs a CI worker 3-8 s (the L rows, counted twice where timm's backbone is compared too),
# 10-20 s (ViT-H/14, DINOv3 H+/16) or does not fit (ViT-g/G/e: 4 to 15 GiB in float32); the B rows
# and smaller are built whole, which checks that likeness on every family.
FULL_BUILD_LIMIT = 10**8


def built_params(variant, **kwargs):
    """The builder's parameter count of `variant`, extrapolated from 1 and 2 blocks above the limit."""
    row = VARIANTS[variant]
    if expected_params(row, 1000, row.image_size) <= FULL_BUILD_LIMIT:
        return keras_vit.ViT(variant, **kwargs).count_params()
    one, two = (keras_vit.ViT(variant, num_layers=n, **kwargs).count_params() for n in (1, 2))
    return one + (row.num_layers - 1) * (two - one)


# Full-size models: TensorFlow's run counts them; every backend builds each variant reduced below.
@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_parameter_count(variant):
    row = VARIANTS[variant]
    count = built_params(variant, num_classes=1000)
    assert count == expected_params(row, 1000, row.image_size)
    if variant in TIMM_COUNTS:
        assert count == TIMM_COUNTS[variant]
    if variant in TIMM_FAMILY_COUNTS:
        _, classes, timm_count = TIMM_FAMILY_COUNTS[variant]
        if classes == 0:
            count = built_params(variant, include_top=False, projection_size=None)
            assert count == expected_params(row, 0, row.image_size, projection=False)
        if timm_count is not None:
            assert count == timm_count


# big_vision's giants without a head, in millions ("Scaling Vision Transformers", Table 2). PaLI
# calls ViT-e 3.9B: with its MAP head (an attention and a 15,360-wide MLP, 68M more).
BIG_VISION_MILLIONS = {"g14": 1011, "G14": 1843, "e14": 3805}


@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("variant", sorted(BIG_VISION_MILLIONS))
def test_giant_variants_match_big_vision(variant):
    assert round(built_params(variant, include_top=False) / 1e6) == BIG_VISION_MILLIONS[variant]


@pytest.mark.backends("tensorflow")
def test_named_builder_counts_from_the_reference():
    assert keras_vit.ViT_B16(num_classes=10).count_params() == 85_806_346
    assert keras_vit.ViT_Ti16(num_classes=1000).count_params() == 5_717_416
    assert keras_vit.ViT_B16(image_size=384, classes=1000).count_params() == 86_859_496


@pytest.mark.backends("tensorflow")  # names only; every backend round-trips each structure in the save/load test
@pytest.mark.parametrize("variant", PAPER_VARIANTS)
def test_every_variant_has_a_named_builder(variant):
    builder = getattr(keras_vit, keras_vit.configs.builder_name(variant))
    model = builder(**reduced_variant_kwargs(variant))
    assert model.name == f"vit_{variant.lower()}"
    assert model.get_layer("encoderblock_0").hidden_size == VARIANTS[variant].hidden_size


@pytest.mark.parametrize("variant", sorted(STRUCTURE_ROWS))
def test_variant_save_load_export(variant, tmp_path):
    model = keras_vit.ViT(variant, **reduced_variant_kwargs(variant, narrow=True))
    # Non-zero head so the round trip compares real logits, not zeros.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32") * 0.1)
    check_save_load_export(model, tmp_path, sample_inputs(model))


def _learnable_data(n, size, channels=3, seed=0):
    """Images whose class is the quadrant holding a bright square: a signal a ViT must learn."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    images = rng.normal(0, 0.3, (n, size, size, channels)).astype("float32")
    half = size // 2
    for i, label in enumerate(labels):
        r, c = divmod(int(label), 2)
        images[i, r * half:(r + 1) * half, c * half:(c + 1) * half] += 1.0
    return images, labels


# The tiny hybrid learns under float32 only, to save XLA compiles: its mixed-precision stem is
# covered by test_mixed_precision_model_saves_and_loads and the layers' own mixed-precision fit steps.
# Off TensorFlow fewer cases learn (PyTorch's eager steps take seconds each): every backend's
# mixed precision is checked by those same tests.
@pytest.mark.parametrize(
    "policy, variant",
    [
        ("float32", "tiny"),
        pytest.param("mixed_bfloat16", "tiny", marks=pytest.mark.backends("tensorflow", "jax")),
        pytest.param("mixed_float16", "tiny", marks=pytest.mark.backends("tensorflow")),
        pytest.param("float32", "R_tiny", marks=pytest.mark.backends("tensorflow")),
    ],
)
def test_tiny_vit_learns_with_xla(policy, variant):
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(variant, num_classes=4, image_size=16, classifier_activation=None)
    x, y = _learnable_data(256, 16)
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=JIT_COMPILE,
    )
    # The zero-initialised head makes every logit 0 at the start: the loss is exactly ln(4).
    np.testing.assert_array_equal(to_numpy(model(x[:8])), 0.0)
    initial = np.log(4.0)
    history = model.fit(x, y, batch_size=32, epochs=6, verbose=0)
    final, accuracy = model.evaluate(x, y, batch_size=256, verbose=0)
    assert final < 0.5 * initial, (policy, initial, final)
    assert accuracy > 0.8
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert keras.backend.standardize_dtype(model.output.dtype) == "float32"
    assert keras.backend.standardize_dtype(model(x[:2]).dtype) == "float32"
    assert model.get_layer("encoderblock_0").compute_dtype == keras.config.dtype_policy().compute_dtype


@pytest.mark.parametrize("variant", ["tiny", "R_tiny"])
def test_mixed_precision_model_saves_and_loads(tmp_path, variant):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.ViT(variant, num_classes=3)
    keras.config.set_dtype_policy("float32")
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    check_save_load_export(model, tmp_path, images)
    assert model.get_layer("encoderblock_1").compute_dtype == "bfloat16"


def test_head_is_zero_initialised_float32_after_final_norm():
    model = keras_vit.ViT("tiny", num_classes=7)
    head = model.get_layer("head")
    assert head.dtype_policy.name == "float32"
    assert np.all(head.kernel.numpy() == 0) and np.all(head.bias.numpy() == 0)
    names = [layer.name for layer in model.layers]
    assert names.index("encoder_norm") < names.index("pooling") < names.index("head")
    assert model.get_layer("encoder_norm").epsilon == 1e-6


def test_pooling_and_features():
    tokens = keras_vit.ViT("tiny", include_top=False, pooling=None)
    assert tokens.output_shape == (None, 65, 32)
    gap = keras_vit.ViT("tiny", include_top=False, pooling="gap", class_token=False)
    assert gap.output_shape == (None, 32)
    pooled = keras_vit.ViT("tiny", include_top=False, pooling="token")
    pooled.set_weights(tokens.get_weights())
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(pooled(images)), to_numpy(tokens(images))[:, 0], atol=1e-6)


def test_pre_logits_and_softmax_head():
    model = keras_vit.ViT("tiny", num_classes=5, representation_size=24, classifier_activation="softmax")
    assert model.get_layer("pre_logits").units == 24
    head = model.get_layer("head")
    head.kernel.assign(np.ones(head.kernel.shape, "float32"))
    probs = to_numpy(model(np.zeros((2, 32, 32, 3), "float32")))
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)


def test_fused_attention_is_a_build_argument_with_the_same_weights_and_outputs():
    plain = keras_vit.ViT("tiny", include_top=False, pooling=None)
    fused = keras_vit.ViT("tiny", include_top=False, pooling=None, fused_attention=True)
    assert fused.vit_config["fused_attention"] is True and plain.vit_config["fused_attention"] == "auto"
    assert all(fused.get_layer(f"encoderblock_{i}").attention.fused for i in range(2))
    assert [v.path for v in fused.weights] == [v.path for v in plain.weights]
    fused.set_weights(plain.get_weights())
    pixels = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(fused(pixels)), to_numpy(plain(pixels)), atol=1e-5)
    # A config saved before the argument existed builds the default, "auto" (the explicit path off a JAX GPU).
    old = {key: value for key, value in fused.vit_config.items() if key != "fused_attention"}
    assert keras_vit.models.vit.build(old).get_layer("encoderblock_0").attention.fused == "auto"


def test_non_square_input_shape_and_grayscale():
    model = keras_vit.ViT("tiny", input_shape=(28, 36, 1), num_classes=2)
    assert model.get_layer("embedding").pos_embedding.shape == (1, 7 * 9 + 1, 32)
    assert model(np.zeros((1, 28, 36, 1), "float32")).shape == (1, 2)


def test_input_tensor_and_explicit_architecture():
    inputs = keras.Input((16, 16, 3))
    model = keras_vit.ViT(
        patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=8, input_tensor=inputs, num_classes=3
    )
    assert model.inputs[0] is inputs
    assert model.output_shape == (None, 3)


def test_preprocessing_inside_the_model():
    symmetric = keras_vit.ViT("tiny", include_top=False, pooling=None, preprocessing="symmetric")
    plain = keras_vit.ViT("tiny", include_top=False, pooling=None)
    # Fixed-statistics Normalization holds no weights: preprocessing leaves the weight schema alone.
    plain.set_weights(symmetric.get_weights())
    pixels = np.random.default_rng(0).uniform(0, 255, size=(2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(symmetric(pixels)), to_numpy(plain(pixels / 127.5 - 1.0)), atol=1e-4
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": 30}, "image height=30"),
        ({"image_size": (32, 30)}, "image width=30"),
        ({"input_shape": (32, 32, 3), "input_tensor": keras.Input((32, 32, 1))}, "Channels mismatch"),
        ({"num_classes": 0}, "num_classes=0"),
        ({"classes": -3}, "num_classes=-3"),
        ({"pooling": "mean"}, "pooling='mean'"),
        ({"position_embedding": "rotary"}, "position_embedding='rotary'"),
        ({"class_token": False, "pooling": "token"}, "pooling='token' needs class_token=True"),
        ({"num_heads": 3}, "hidden_size=32.*num_heads=3"),
        ({"dropout_rate": -0.1}, "dropout_rate=-0.1"),
        ({"attention_dropout_rate": 1.0}, "attention_dropout_rate=1.0"),
        ({"drop_path_rate": 2}, "drop_path_rate=2"),
        ({"preprocessing": "caffe"}, "preprocessing='caffe'"),
        ({"include_top": True, "pooling": None}, "pooling=None"),
    ],
)
def test_builder_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT("tiny", **kwargs)


def test_unknown_variant_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"variant='B17'.*'B16'"):
        keras_vit.ViT("B17")
    with pytest.raises(ValueError, match="missing: .*mlp_dim"):
        keras_vit.ViT(patch_size=4, hidden_size=8, num_layers=1, num_heads=2)


def test_variant_name_spellings():
    for spelling in ("B16", "ViT-B/16", "vit_b16", "b/16"):
        assert keras_vit.configs.get_variant(spelling) is VARIANTS["B16"]


def test_image_size_none_is_dynamic_and_auto_is_the_variant_default():
    assert keras_vit.ViT("tiny", num_classes=2).input_shape == (None, 32, 32, 3)
    dynamic = keras_vit.ViT("tiny", num_classes=2, image_size=None)
    assert dynamic.input_shape == (None, None, None, 3)
    for height, width in ((32, 32), (16, 40)):
        assert dynamic(np.zeros((1, height, width, 3), "float32")).shape == (1, 2)
    with pytest.raises(ValueError, match="image height=30"):
        dynamic(np.zeros((1, 30, 32, 3), "float32"))
    with pytest.raises(ValueError, match="image_size='big'"):
        keras_vit.ViT("tiny", image_size="big")

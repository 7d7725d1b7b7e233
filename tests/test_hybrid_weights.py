"""The hybrid stem key mapping on generated `.npz` files with the original names and shapes."""

import numpy as np
import pytest

import keras_vit
from keras_vit.models.resnet import BiTResNet
from keras_vit.weights.hybrid import load_hybrid_stem, stem_variables

from helpers import ALL_BACKENDS, to_numpy  # noqa: E402

pytestmark = ALL_BACKENDS


def generated_stem_arrays(stage_depths, width=64, channels=3, norm_layout="flat", seed=0):
    """Stem tensors as the original hybrid checkpoints name and shape them, written from the spec."""
    rng = np.random.default_rng(seed)
    arrays = {}

    def conv(key, k, cin, cout):
        arrays[f"{key}/kernel"] = rng.normal(size=(k, k, cin, cout)).astype("float32")

    def norm(key, c):
        shape = (c,) if norm_layout == "flat" else (1, 1, 1, c)
        arrays[f"{key}/scale"] = rng.normal(1, 0.1, size=shape).astype("float32")
        arrays[f"{key}/bias"] = rng.normal(0, 0.1, size=shape).astype("float32")

    conv("conv_root", 7, channels, width)
    norm("gn_root", width)
    cin = width
    for s, depth in enumerate(stage_depths, start=1):
        mid = width * 2 ** (s - 1)
        for u in range(1, depth + 1):
            prefix = f"block{s}/unit{u}"
            conv(f"{prefix}/conv1", 1, cin, mid)
            norm(f"{prefix}/gn1", mid)
            conv(f"{prefix}/conv2", 3, mid, mid)
            norm(f"{prefix}/gn2", mid)
            conv(f"{prefix}/conv3", 1, mid, 4 * mid)
            norm(f"{prefix}/gn3", 4 * mid)
            if u == 1:
                conv(f"{prefix}/conv_proj", 1, cin, 4 * mid)
                norm(f"{prefix}/gn_proj", 4 * mid)
            cin = 4 * mid
    return arrays


def _write_and_read(tmp_path, arrays, prefix=""):
    path = tmp_path / "hybrid.npz"
    np.savez(path, **{prefix + key: value for key, value in arrays.items()})
    with np.load(path) as f:
        return {key[len(prefix):]: f[key] for key in f.files}


@pytest.mark.parametrize("norm_layout", ["flat", "4d"])
def test_r50_stem_loads_from_a_generated_npz(tmp_path, norm_layout):
    stem_arrays = generated_stem_arrays((3, 4, 9), norm_layout=norm_layout)
    assert len(stem_arrays) == 3 + 3 * 12 + 13 * 9  # root, unit1 of each stage with projection, 13 plain units
    # The plain ViT keys sit beside the stem keys; the stem mapping leaves them to the ViT loader.
    others = {"embedding/kernel": np.zeros((1, 1, 1024, 8), "float32"), "cls": np.zeros((1, 1, 8), "float32")}
    arrays = _write_and_read(tmp_path, {**stem_arrays, **others}, prefix="opt/target/")
    stem = BiTResNet((3, 4, 9))
    consumed = load_hybrid_stem(stem, arrays)
    assert consumed == set(stem_arrays)
    variables = stem_variables(stem)
    for key, value in stem_arrays.items():
        np.testing.assert_array_equal(variables[key].numpy(), value.reshape(variables[key].shape))
    unit = stem.get_layer("block3_unit9")
    np.testing.assert_array_equal(unit.gn3.gamma.numpy(), stem_arrays["block3/unit9/gn3/scale"].reshape(-1))
    np.testing.assert_array_equal(
        stem.get_layer("block2_unit1").conv_proj.kernel.numpy(), stem_arrays["block2/unit1/conv_proj/kernel"]
    )


def test_loaded_stem_runs_inside_a_hybrid_model(tmp_path):
    arrays = _write_and_read(tmp_path, generated_stem_arrays((1,), width=32, norm_layout="4d"))
    model = keras_vit.ViT("R_tiny", num_classes=2)
    images = np.random.default_rng(3).normal(size=(2, 32, 32, 3)).astype("float32")
    before = to_numpy(model.get_layer("resnet")(images))
    assert load_hybrid_stem(model, arrays) == set(arrays)
    after = to_numpy(model.get_layer("resnet")(images))
    assert after.shape == (2, 8, 8, 128) and not np.allclose(before, after)
    # Same arrays, same features: a fresh model loaded from the file computes the same stem.
    other = keras_vit.ViT("R_tiny", num_classes=2)
    load_hybrid_stem(other, arrays)
    np.testing.assert_allclose(to_numpy(other.get_layer("resnet")(images)), after, atol=1e-6)


def test_root_only_stem_keys():
    arrays = generated_stem_arrays((), width=64)
    assert sorted(arrays) == ["conv_root/kernel", "gn_root/bias", "gn_root/scale"]
    model = keras_vit.R_ViT_Ti16(num_layers=1, image_size=64)
    assert load_hybrid_stem(model, arrays) == set(arrays)


def test_a_bad_checkpoint_names_the_keys_and_loads_nothing():
    stem = BiTResNet((2, 1), width=32)
    arrays = generated_stem_arrays((2, 1), width=32)
    arrays["block2/unit1/conv2/kernel"] = arrays["block2/unit1/conv2/kernel"][:, :, :32]
    del arrays["block1/unit2/gn1/bias"]
    original = stem.get_layer("conv_root").kernel.numpy().copy()
    with pytest.raises(ValueError, match=r"(?s)missing keys:\n  block1/unit2/gn1/bias.*block2/unit1/conv2/kernel: expected \(3, 3, 64, 64\), found \(3, 3, 32, 64\)"):
        load_hybrid_stem(stem, arrays)
    np.testing.assert_array_equal(stem.get_layer("conv_root").kernel.numpy(), original)


def test_a_plain_vit_has_no_stem():
    with pytest.raises(ValueError, match="no BiT ResNet stem"):
        load_hybrid_stem(keras_vit.ViT("tiny"), {})


@pytest.mark.parametrize("norm_layout", ["flat", "4d"])
def test_weights_path_loads_a_hybrid_end_to_end(tmp_path, norm_layout):
    """save_npz writes the stem under the original names; ViT(weights=path) reads it back, with or without variant."""
    from keras_vit.weights import save_npz

    source = keras_vit.ViT("R_tiny", num_classes=3, approximate_gelu=True)  # .npz checkpoints imply tanh GELU
    rng = np.random.default_rng(5)
    for w in source.weights:
        w.assign(rng.normal(0, 0.2, size=w.shape).astype("float32") + (1.0 if "gamma" in w.path else 0.0))
    path = str(tmp_path / "r_tiny.npz")
    save_npz(source, path)
    with np.load(path) as f:
        arrays = {key: f[key] for key in f.files}
    assert arrays["block1/unit1/gn_proj/scale"].shape == (128,) and "conv_root/kernel" in arrays
    if norm_layout == "4d":
        arrays = {k: v.reshape(1, 1, 1, -1) if "/gn" in k else v for k, v in arrays.items()}
        np.savez(path, **{"opt/target/" + k: v for k, v in arrays.items()})
    images = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    expected = to_numpy(source(images))
    named = keras_vit.ViT("R_tiny", weights=path)
    np.testing.assert_allclose(to_numpy(named(images)), expected, atol=1e-5)
    inferred = keras_vit.ViT(weights=path)  # architecture, stem included, read from the file
    assert inferred.get_layer("resnet").get_layer("block1_unit1").filters == 32
    assert inferred.input_shape[1:3] in ((32, 32), (None, None))
    np.testing.assert_allclose(to_numpy(inferred(images)), expected, atol=1e-5)
    # A checkpoint of another stem depth is refused with the keys named, nothing half-loaded.
    with pytest.raises(ValueError, match="block2/unit1"):
        keras_vit.ViT("R_tiny", weights=path, backbone=BiTResNet((1, 1), width=32))

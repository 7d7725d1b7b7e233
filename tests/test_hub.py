"""Hub ids from a huggingface_hub cache filled here (sockets blocked), timm Hub folders, save_timm,
and the preprocessing a checkpoint's own files state.

The cache is written the way huggingface_hub lays it out (models--ORG--NAME/{blobs,snapshots/
<commit>,refs/<revision>}, an LFS file's blob named by its sha256, a plain file's by its git
object id), not through huggingface_hub, so the reader is checked against the layout.
"""

import hashlib
import json
import os
import socket
import types

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import Checkpoint, CheckpointError, Preprocessing, hub, save_hf, save_timm
from keras_vit.weights.formats import LAYOUTS
from keras_vit.weights.mapping import MappingContext, model_tensors
from keras_vit.weights.registry import CHECKPOINTS, CheckpointSpec
from keras_vit.weights.files import write_safetensors

from _timm_import import import_timm
from helpers import to_numpy

IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _randomized(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def _dinov2_with_registers():
    """A tiny model Hugging Face's dinov2_with_registers holds (an integer mlp_ratio)."""
    return keras_vit.ViT(patch_size=4, hidden_size=24, num_layers=2, num_heads=2, mlp_dim=48, image_size=16,
                         num_register_tokens=2, layer_scale_init=0.1, include_top=False)


def _images(model, seed=1):
    return np.random.default_rng(seed).normal(size=(2,) + tuple(model.input_shape[1:])).astype("float32")


def fill_cache(cache, repo, folder, commit, refs=("main",)):
    """Copies `folder`'s files into a huggingface_hub cache as commit `commit` of `repo`, named by `refs`."""
    storage = os.path.join(cache, "models--" + repo.replace("/", "--"))
    snapshot = os.path.join(storage, "snapshots", commit)
    os.makedirs(os.path.join(storage, "blobs"), exist_ok=True)
    os.makedirs(snapshot, exist_ok=True)
    for name in os.listdir(folder):
        data = open(os.path.join(folder, name), "rb").read()
        if name.endswith(".safetensors"):  # Git LFS: the etag is the sha256
            blob = hashlib.sha256(data).hexdigest()
        else:  # a plain git file: the etag is its git object id
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        with open(os.path.join(storage, "blobs", blob), "wb") as f:
            f.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snapshot, name))
    os.makedirs(os.path.join(storage, "refs"), exist_ok=True)
    for ref in refs:
        with open(os.path.join(storage, "refs", ref), "w") as f:
            f.write(commit)
    return snapshot


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def _timm_folder_by_hand(model, folder, config):
    """A timm Hub folder written key by key (not by save_timm): timm's state dict and a config.json."""
    os.makedirs(folder)
    context = MappingContext("timm", {}, LAYOUTS["timm"].interpolation, source_prefix_tokens=1)
    write_safetensors(os.path.join(folder, "model.safetensors"), model_tensors(model, context))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)


def test_timm_hub_folder_builds_without_num_heads(tmp_path):
    model = _randomized(keras_vit.ViT("tiny", num_classes=3, classifier_activation=None))
    folder = str(tmp_path / "timm")
    _timm_folder_by_hand(model, folder, {
        "architecture": "vit_tiny_patch16_224", "num_classes": 3, "num_features": 32, "global_pool": "token",
        "model_args": {"img_size": 32, "patch_size": 4, "embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0},
        "pretrained_cfg": dict(IMAGENET, input_size=[3, 32, 32], interpolation="bicubic", crop_pct=0.9),
    })
    loaded = keras_vit.ViT(weights=folder, classifier_activation=None)
    assert loaded.vit_config["num_heads"] == 2
    np.testing.assert_array_equal(to_numpy(loaded(_images(model))), to_numpy(model(_images(model))))
    # The name's own head count when model_args do not change it: vit_tiny has 3 heads of 64.
    heads = str(tmp_path / "heads")
    _timm_folder_by_hand(keras_vit.ViT(patch_size=16, hidden_size=192, num_layers=1, num_heads=3, mlp_dim=768,
                                       image_size=32, num_classes=2), heads,
                         {"architecture": "vit_tiny_patch16_224", "model_args": {"depth": 1, "img_size": 32}})
    assert Checkpoint(heads).architecture["num_heads"] == 3


@pytest.mark.parametrize("config, message", [
    ({"architecture": "vit_medium_patch16_gap_256"}, r"vit_medium_patch16_gap_256.*vit_base_patch16_\{224,384\}"),
    ({"architecture": "vit_tiny_patch16_224", "model_args": {"embed_dim": 48}}, "hidden_size=48 .the weights have 32"),
    ({"architecture": "vit_tiny_patch16_224", "model_args": {"qk_norm": True}}, "model_args.qk_norm is True"),
    ({"architecture": "vit_tiny_patch16_224", "model_args": {"no_such_arg": 1}}, r"\['no_such_arg'\]"),
    ({"architecture": "vit_small_patch16_dinov3", "model_args": {"rope_type": "mixed"}},
     r"model_args.rope_type is 'mixed'; keras_vit builds rope_type \['cat', 'dinov3'\]"),
    ({"architecture": "vit_small_patch16_dinov3", "model_args": {"rope_temperature": 0}},
     "model_args.rope_temperature is 0"),
    ({"architecture": "vit_small_patch16_dinov3", "model_args": {"rope_mrope_section": [8, 12, 12]}},
     r"\['rope_mrope_section'\] are not arguments keras_vit reads for 'vit_small_patch16_dinov3' .timm's Eva."),
    ({"architecture": "eva02_tiny_patch14_224", "model_args": {"scale_mlp": 1}},
     r"model_args.scale_mlp is 1; expected true or false"),
    ({"architecture": "eva02_base_patch14_448", "model_args": {"scale_attn_inner": True}},
     r"model_args.scale_attn_inner is True; keras_vit builds scale_attn_inner=False only"),
    ({"architecture": "vit_pe_core_base_patch16_224", "model_args": {"use_post_transformer_norm": False}},
     r"\['use_post_transformer_norm'\] are not arguments keras_vit reads for 'vit_pe_core_base_patch16_224'"),
    ({"architecture": "vit_pe_core_base_patch16_224", "model_args": {"attn_pool_num_heads": 0}},
     "model_args.attn_pool_num_heads is 0; expected null or an integer >= 1"),
], ids=["unknown_architecture", "contradiction", "unsupported_value", "unknown_argument", "unknown_rope_type",
        "rope_temperature", "unknown_rope_argument", "eva_renamed_argument", "eva02_attention_norm", "unknown_pe_argument",
        "pe_pool_heads"])
def test_timm_config_refusals_name_the_file_and_key(tmp_path, config, message):
    folder = str(tmp_path / "timm")
    _timm_folder_by_hand(keras_vit.ViT("tiny", num_classes=3), folder, config)
    with pytest.raises(CheckpointError, match=message) as info:
        Checkpoint(folder)
    assert os.path.join(folder, "config.json") in str(info.value)


def test_timm_table_matches_timm():
    """Every name of the table builds in timm (one block, no memory) with the row's fields."""
    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    torch = pytest.importorskip("torch")
    from keras_vit.models.vit import resolve_config
    from keras_vit.weights.timm_names import TIMM_ARCHITECTURES, architecture_fields, eva_architecture, timm_image_size

    activations = {("gelu", False): "GELU", ("gelu", True): "GELUTanh", ("quick_gelu", False): "QuickGELU",
                   ("swiglu", False): "SiLU"}
    for name in TIMM_ARCHITECTURES:
        fields = architecture_fields(name, "test")
        with torch.device("meta"):
            built = timm.create_model(name, pretrained=False, depth=1)
        block = built.blocks[0]
        found = dict(
            patch_size=built.patch_embed.patch_size[0], hidden_size=built.embed_dim, num_heads=block.attn.num_heads,
            mlp_dim=block.mlp.fc2.in_features, class_token=built.cls_token is not None,
            distillation_token=getattr(built, "dist_token", None) is not None,
            pre_norm=not isinstance(built.norm_pre, torch.nn.Identity),
            patch_bias=built.patch_embed.proj.bias is not None,
            fc_norm=not isinstance(built.fc_norm, torch.nn.Identity),
            mlp_norm=not isinstance(block.mlp.norm, torch.nn.Identity),
            pooling={"token": "token", "avg": "gap", "map": "map"}[built.global_pool],
            activation=type(block.mlp.act).__name__,
            position_embedding="learned" if built.pos_embed is not None else "none",
        )
        found["layer_norm_epsilon"] = (built.fc_norm if found["fc_norm"] else built.norm).eps
        if eva_architecture(name):  # timm's Eva class: its own attribute names, rotary position
            rope, attention = built.rope, block.attn
            index = type(rope).__name__ == "RotaryEmbeddingCat"  # EVA-02's and PE's; DINOv3's is centred
            if attention.qkv is None:  # separate q, k and v projections (EVA-02 B and L)
                qkv_bias = "qv" if attention.q_proj.bias is not None else "none"
            elif getattr(attention, "q_bias", None) is not None:  # EvaAttention: query and value biases
                qkv_bias = "qv"
            else:  # one biased qkv Linear (PE's AttentionRope) or none
                qkv_bias = "qkv" if attention.qkv.bias is not None else "none"
            found.update(
                num_register_tokens=0 if built.reg_token is None else built.reg_token.shape[1],
                layer_scale_init=None if block.gamma_1 is None else float(block.init_values),
                qkv_bias=qkv_bias,
                rope=None if rope is None else dict(
                    grid="index" if index else "centered", theta=rope.temperature, offset=rope.grid_offset,
                    reference_grid=tuple(rope.ref_feat_shape) if index and rope.ref_feat_shape else None,
                    axes={"ij": "yx", "xy": "xy"}[rope.grid_indexing],
                    layout="half" if rope.rotate_half else "interleaved"),
            )
            if built.attn_pool is not None:  # the blocks' value stated as None, as rows do
                pool = built.attn_pool
                found.update(pooling_heads=pool.num_heads if pool.num_heads != block.attn.num_heads else None,
                             pooling_mlp_dim=pool.mlp.fc1.out_features
                             if pool.mlp.fc1.out_features != found["mlp_dim"] else None)
        else:
            found.update(
                num_register_tokens=built.num_reg_tokens,
                layer_scale_init=None if isinstance(block.ls1, torch.nn.Identity) else float(block.ls1.init_values),
                qkv_bias="qkv" if block.attn.qkv.bias is not None else "none", rope=None,
            )
        if found["class_token"] and found["position_embedding"] == "learned":  # else no table to have rows in
            found["prefix_position_embedding"] = not built.no_embed_class
        expected = {key: fields[key] for key in found if key in fields}
        expected["activation"] = activations[(fields["mlp_activation"], fields["approximate_gelu"])]
        assert found.pop("rope") == expected.pop("rope"), name  # approx compares no nested dict
        assert found == pytest.approx(expected), name
        # ViT(name) builds the same fields, at timm's default input size.
        assert timm_image_size(name) == timm.models.get_pretrained_cfg(name).input_size[-1], name
        resolved = resolve_config(name)
        assert {key: resolved[key] for key in fields if key != "channels"} == {
            key: value for key, value in fields.items() if key != "channels"}, name
        assert resolved["image_size"] == (timm_image_size(name),) * 2, name


def _name_groups():
    """One timm name per (row, timm's changes): names that differ only in their image size build alike."""
    from keras_vit.weights.timm_names import TIMM_ARCHITECTURES

    groups = {}
    for name, (row, changes) in TIMM_ARCHITECTURES.items():
        groups.setdefault((row, json.dumps(changes, sort_keys=True)), name)
    return sorted(groups.values())


@pytest.mark.parametrize("name", _name_groups())
def test_every_timm_name_loads_its_hub_folder_as_timm_computes_it(name, tmp_path):
    """Each name of the table at its own widths, 2 blocks and a 3x2 patch grid (model_args), every weight
    redrawn, written as a timm Hub folder and read by keras_vit alone: the logits of timm's forward."""
    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from keras_vit.configs import VARIANTS
    from keras_vit.weights.timm_names import TIMM_ARCHITECTURES

    patch = VARIANTS[TIMM_ARCHITECTURES[name][0]].patch_size
    args = {"depth": 2, "img_size": [3 * patch, 2 * patch], "num_classes": 3}
    reference = timm.create_model(name, pretrained=False, **args).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for key, param in reference.named_parameters():  # norms and scales near 1, the rest small and random
            near_one = param.ndim == 1 and not key.endswith("bias") and any(
                part in key for part in ("norm", "ls1", "ls2", "gamma_", "lambda"))
            noise = torch.randn(param.shape, generator=generator) * (0.1 if near_one else 0.05)
            param.copy_(1.0 + noise if near_one else noise)
    save_file({key: value.contiguous() for key, value in reference.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": name, "num_classes": 3, "model_args": args}))
    model = keras_vit.ViT(weights=str(tmp_path), classifier_activation=None)
    images = np.random.default_rng(1).uniform(-1, 1, (2, 3 * patch, 2 * patch, 3)).astype("float32")
    with torch.no_grad():
        expected = reference(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
    got = to_numpy(model(images))
    assert np.abs(got - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max()), name


@pytest.mark.parametrize("name", ["vit_tiny_patch16_384", "vit_small_patch16_dinov3_qkvb", "deit3_small_patch16_224"])
def test_a_timm_name_builds_what_timm_builds(name):
    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    torch = pytest.importorskip("torch")
    model = keras_vit.ViT(name, num_layers=1, num_classes=7)  # the head is keras_vit's argument, as for any row
    with torch.device("meta"):
        reference = timm.create_model(name, pretrained=False, depth=1, num_classes=7)
    assert model.name == name
    assert model.count_params() == sum(p.numel() for p in reference.parameters())
    assert tuple(model.input_shape[1:3]) == tuple(reference.pretrained_cfg["input_size"][1:])


@pytest.mark.parametrize("variant, arguments", [
    ("tiny", {}),
    ("tiny_deit", {}),
    ("tiny_siglip", {}),
    ("tiny_dinov2", dict(prefix_position_embedding=False)),  # timm's DINOv2-reg: no position on the prefix
    ("tiny", dict(pooling="gap", fc_norm=True, mlp_norm=True)),  # timm's fc_norm and scale_mlp_norm
])
def test_save_timm_round_trip_and_timm_parity(tmp_path, variant, arguments):
    model = _randomized(keras_vit.ViT(variant, num_classes=3, classifier_activation=None, **arguments))
    folder = str(tmp_path / "timm")
    save_timm(model, folder, pretrained_cfg=IMAGENET)
    loaded = keras_vit.ViT(weights=folder, classifier_activation=None)
    # The architecture round-trips; the folder's pretrained_cfg (timm's default crop_pct 0.9, centre crop) becomes the
    # loaded model's image processor, applied to files as timm's evaluation applies it (issue 52).
    assert {k: v for k, v in loaded.vit_config.items() if k not in ("name", "image_processor")} == \
        {k: v for k, v in model.vit_config.items() if k not in ("name", "image_processor")}
    assert loaded.vit_config["image_processor"]["crop_pct"] == 0.9 and model.vit_config["image_processor"] is None
    images = _images(model)
    expected = to_numpy(model(images))
    np.testing.assert_array_equal(to_numpy(loaded(images)), expected)
    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed: the round trip passed, timm's side is not checked")
    torch = pytest.importorskip("torch")
    reference = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    with torch.no_grad():
        logits = reference(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-4)


def test_save_timm_refuses_what_timm_cannot_hold(tmp_path):
    with pytest.raises(CheckpointError, match="register tokens with prefix_position_embedding=True"):
        save_timm(keras_vit.ViT("tiny_dinov2", num_classes=3), str(tmp_path / "a"), pretrained_cfg=IMAGENET)
    with pytest.raises(ValueError, match="pretrained_cfg=dict.mean"):
        save_timm(keras_vit.ViT("tiny", num_classes=3), str(tmp_path / "b"))
    with pytest.raises(CheckpointError, match="timm's 'deit_tiny_distilled_patch16_224' cannot hold.*distillation_token"):
        save_timm(keras_vit.ViT("tiny", num_classes=3), str(tmp_path / "c"), architecture="deit_tiny_distilled_patch16_224",
                  pretrained_cfg=IMAGENET)
    for variant in ("tiny_dinov3", "tiny_eva02"):
        with pytest.raises(CheckpointError, match=r"rotary position .*qkv_bias='qv'"):  # timm's Eva: not written
            save_timm(keras_vit.ViT(variant, num_classes=3), str(tmp_path / "d"), pretrained_cfg=IMAGENET)
    with pytest.raises(CheckpointError, match=r"pooling_heads=3 and pooling_mlp_dim=36 .*rotary position"):
        save_timm(keras_vit.ViT("tiny_pe", num_classes=3), str(tmp_path / "e"), pretrained_cfg=IMAGENET)
    assert not any(os.path.exists(tmp_path / name) for name in "acde")


def test_preprocessing_from_hugging_face_preprocessor_config(tmp_path):
    folder = str(tmp_path / "hf")
    save_hf(_dinov2_with_registers(), folder)
    assert Checkpoint(folder).preprocessing is None  # nothing states it: never guessed

    def read(config):
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
            json.dump(config, f)
        return Checkpoint(folder).preprocessing

    dinov2 = {"do_normalize": True, "image_mean": IMAGENET["mean"], "image_std": IMAGENET["std"], "resample": 3,
              "size": {"shortest_edge": 256}, "do_center_crop": True, "crop_size": {"height": 224, "width": 224}}
    found = read(dinov2)
    assert found == Preprocessing("imagenet", tuple(IMAGENET["mean"]), tuple(IMAGENET["std"]), (224, 224), "bicubic",
                                  0.875, found.source, processor=found.processor)
    # The processor itself (issue 52): the shortest edge to 256, the centre 224 x 224, bicubic.
    assert {key: found.processor[key] for key in ("resize", "size", "crop", "interpolation")} == \
        {"resize": "shortest_edge", "size": 256, "crop": [224, 224], "interpolation": "bicubic"}
    assert "preprocessor_config.json" in found.source and "image_mean" in found.source
    clip = read({"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                 "size": {"height": 16, "width": 16}, "resample": 2})
    assert (clip.scaling, clip.image_size, clip.interpolation, clip.crop_pct) == ("clip", (16, 16), "bilinear", None)
    unit = read({"do_normalize": False, "do_rescale": True, "rescale_factor": 1 / 255})
    assert (unit.scaling, unit.mean, unit.std, unit.image_size) == ("unit", (0.0,), (1.0,), None)
    assert read({"image_mean": [0.4] * 3, "image_std": [0.2] * 3}).scaling is None  # the caller asks for --scaling
    with pytest.raises(CheckpointError, match="image_std is \\[0.5, 0\\]") as info:
        read({"image_mean": [0.5, 0.5], "image_std": [0.5, 0]})
    assert "preprocessor_config.json" in str(info.value)
    with pytest.raises(CheckpointError, match="crop_size is 'big'"):
        read(dict(dinov2, crop_size="big"))


def test_preprocessing_from_timm_pretrained_cfg(tmp_path):
    folder = str(tmp_path / "timm")
    cfg = dict(mean=[0.5] * 3, std=[0.5] * 3, input_size=[3, 32, 32], interpolation="bilinear", crop_pct=0.95)
    save_timm(keras_vit.ViT("tiny", num_classes=3), folder, pretrained_cfg=cfg)
    found = Checkpoint(folder).preprocessing
    assert (found.scaling, found.mean, found.std, found.image_size, found.interpolation, found.crop_pct) == \
        ("symmetric", (0.5,) * 3, (0.5,) * 3, (32, 32), "bilinear", 0.95)
    assert found.source == os.path.join(folder, "config.json") + " (pretrained_cfg.mean, pretrained_cfg.std)"
    config = json.load(open(os.path.join(folder, "config.json")))
    legacy = {**config.pop("pretrained_cfg"), **config}  # timm's older single-dict config.json
    legacy["interpolation"] = "sideways"
    json.dump(legacy, open(os.path.join(folder, "config.json"), "w"))
    with pytest.raises(CheckpointError, match="interpolation is 'sideways'"):
        Checkpoint(folder).preprocessing


def test_preprocessing_of_a_named_preset(tmp_path, monkeypatch):
    path = str(tmp_path / "published.npz")
    keras_vit.weights.save_npz(keras_vit.ViT("tiny", num_classes=3), path)
    monkeypatch.setitem(CHECKPOINTS, "test-tiny", CheckpointSpec("file://" + path, None, "tiny", resolution=32,
                                                                 preprocessing="symmetric"))
    checkpoint = Checkpoint("test-tiny", cache_dir=str(tmp_path / "cache"))
    found = checkpoint.preprocessing
    assert (found.scaling, found.mean, found.image_size) == ("symmetric", (0.5, 0.5, 0.5), (32, 32))
    assert "CHECKPOINTS['test-tiny']" in found.source and checkpoint.source.startswith("test-tiny = ")


@pytest.fixture(scope="module")
def hub_repos(tmp_path_factory):
    """A cache with a timm repository (commits A at main, B at tag v1) and a Hugging Face one."""
    root = tmp_path_factory.mktemp("hub")
    cache = str(root / "cache")
    models = {}
    for name, seed in (("a", 0), ("b", 1)):
        models[name] = _randomized(keras_vit.ViT("tiny", num_classes=3, classifier_activation=None), seed)
        save_timm(models[name], str(root / name), pretrained_cfg=IMAGENET)
    commits = {"a": "a" * 40, "b": "b" * 40}
    fill_cache(cache, "timm/vit_tiny_test", str(root / "a"), commits["a"], refs=("main",))
    fill_cache(cache, "timm/vit_tiny_test", str(root / "b"), commits["b"], refs=("v1",))
    models["hf"] = _randomized(_dinov2_with_registers(), 2)
    save_hf(models["hf"], str(root / "hf"))
    with open(root / "hf" / "preprocessor_config.json", "w") as f:
        json.dump({"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "size": {"height": 16, "width": 16}}, f)
    fill_cache(cache, "someone/dinov2-tiny", str(root / "hf"), "c" * 40)
    return types.SimpleNamespace(cache=cache, models=models, commits=commits)


def _head(checkpoint):
    return checkpoint.tensors["head.weight"]


def test_hub_ids_from_an_offline_cache(hub_repos, no_network, monkeypatch):
    cache, commits = hub_repos.cache, hub_repos.commits
    main = Checkpoint("hf-hub:timm/vit_tiny_test", cache_dir=cache)
    assert main.source == f"hf-hub:timm/vit_tiny_test (revision {commits['a']})"
    assert main.architecture["num_heads"] == 2 and main.preprocessing.scaling == "imagenet"
    tagged = Checkpoint("hf-hub:timm/vit_tiny_test@v1", cache_dir=cache)
    pinned = Checkpoint(f"hf-hub:timm/vit_tiny_test@{commits['b']}", cache_dir=cache)
    assert not np.array_equal(_head(main), _head(tagged)) and np.array_equal(_head(tagged), _head(pinned))
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", cache)  # ViT(weights=) uses the default cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = keras_vit.ViT(weights="hf-hub:someone/dinov2-tiny", include_top=False)
    images = _images(model)
    np.testing.assert_array_equal(to_numpy(model(images)), to_numpy(hub_repos.models["hf"](images)))
    found = Checkpoint("hf-hub:someone/dinov2-tiny").preprocessing
    assert (found.scaling, found.image_size) == ("symmetric", (16, 16))
    classifier = keras_vit.ViT("tiny", num_classes=3, classifier_activation=None)
    keras_vit.load_weights(classifier, "hf-hub:timm/vit_tiny_test@v1")
    np.testing.assert_array_equal(to_numpy(classifier(_images(classifier))),
                                  to_numpy(hub_repos.models["b"](_images(classifier))))


def test_an_id_the_cache_lacks_is_one_clear_error(hub_repos, no_network, monkeypatch, tmp_path):
    with pytest.raises(CheckpointError) as info:
        Checkpoint("hf-hub:timm/vit_absent", cache_dir=hub_repos.cache)
    message = str(info.value)
    assert "'hf-hub:timm/vit_absent'" in message and "cannot be reached" in message and "HF_HUB_OFFLINE" in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for spec in ("hf-hub:timm/vit_absent", "hf-hub:timm/vit_tiny_test@v9"):
        with pytest.raises(CheckpointError) as info:
            keras_vit.weights.load_weights(keras_vit.ViT("tiny"), spec, cache_dir=hub_repos.cache)
        message = str(info.value)
        assert repr(spec) in message and "HF_HUB_OFFLINE is set" in message and "\n" not in message
    with pytest.raises(CheckpointError, match="Invalid Hub id 'hf-hub:timm'"):
        hub.parse_hub_id("hf-hub:timm")


def test_a_corrupt_cached_blob_is_refused_by_path(tmp_path, no_network):
    model = keras_vit.ViT("tiny", num_classes=3)
    save_timm(model, str(tmp_path / "repo"), pretrained_cfg=IMAGENET)
    cache = str(tmp_path / "cache")
    snapshot = fill_cache(cache, "timm/corrupt", str(tmp_path / "repo"), "d" * 40)
    blob = os.path.realpath(os.path.join(snapshot, "model.safetensors"))
    with open(blob, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(CheckpointError, match="is corrupt") as info:
        Checkpoint("hf-hub:timm/corrupt", cache_dir=cache)
    assert blob in str(info.value) and os.path.join(snapshot, "model.safetensors") in str(info.value)


def test_named_hub_preset_checks_its_published_sha256(hub_repos, no_network, monkeypatch):
    snapshot = os.path.join(hub_repos.cache, "models--timm--vit_tiny_test", "snapshots", hub_repos.commits["a"])
    digest = hashlib.sha256(open(os.path.join(snapshot, "model.safetensors"), "rb").read()).hexdigest()
    monkeypatch.setitem(CHECKPOINTS, "test-hub", CheckpointSpec("hf-hub:timm/vit_tiny_test", digest, "tiny"))
    checkpoint = Checkpoint("test-hub", cache_dir=hub_repos.cache)
    assert checkpoint.source == f"test-hub = hf-hub:timm/vit_tiny_test (revision {hub_repos.commits['a']})"
    monkeypatch.setitem(CHECKPOINTS, "test-hub", CheckpointSpec("hf-hub:timm/vit_tiny_test", "0" * 64, "tiny"))
    with pytest.raises(CheckpointError, match="does not have the published sha256 0000"):
        Checkpoint("test-hub", cache_dir=hub_repos.cache)


def test_hub_errors_say_what_to_do(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub import errors

    response = types.SimpleNamespace(headers={}, status_code=401, request=None, text="", url="https://huggingface.co")

    def gated(*args, **kwargs):
        raise errors.GatedRepoError("403 gated", response=response)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    with pytest.raises(CheckpointError, match="gated repository.*token=.*HF_TOKEN"):
        hub.download("hf-hub:meta/gated")
    sharded = tmp_path / "snapshot"
    sharded.mkdir()
    (sharded / hub.SHARDED_INDEX).write_text('{"metadata": {}}')
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *args, **kwargs: str(sharded))
    with pytest.raises(CheckpointError, match="^Sharded checkpoint index .*index.json' has weight_map None; expected"):
        hub.download("hf-hub:big/sharded")


def _sharded_hf_folder(folder):
    """A Hugging Face ViT folder in three shards, as transformers' save_pretrained writes a large model."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                                    image_size=16, patch_size=4, num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(folder, max_shard_size="20KB")
    return model


def test_sharded_folder_and_hub_id_load_every_shard(tmp_path, no_network, monkeypatch):
    """transformers' sharded save_pretrained loads as one checkpoint, from a folder and from a Hub cache;
    a missing shard, or a shard without what the index assigns it, is refused by name."""
    pytest.importorskip("transformers")
    import torch

    folder = tmp_path / "sharded"
    reference = _sharded_hf_folder(folder)
    shards = sorted(name for name in os.listdir(folder) if name.startswith("model-"))
    assert len(shards) >= 2 and not (folder / "model.safetensors").exists()
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    with torch.no_grad():
        expected = reference(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits.numpy()
    model = keras_vit.ViT(weights=str(folder), classifier_activation=None)
    np.testing.assert_allclose(to_numpy(model(images)), expected, atol=1e-5)

    import huggingface_hub

    cache = str(tmp_path / "cache")
    snapshot = fill_cache(cache, "org/sharded", str(folder), "c" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", cache)  # ViT(weights=) uses the default cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from_hub = keras_vit.ViT(weights="hf-hub:org/sharded", classifier_activation=None)
    np.testing.assert_allclose(to_numpy(from_hub(images)), expected, atol=1e-5)

    os.remove(os.path.join(snapshot, shards[-1]))
    with pytest.raises(CheckpointError, match=f"lacks shard file.*{shards[-1]}"):
        hub.download("hf-hub:org/sharded", cache_dir=cache)
    with pytest.raises(CheckpointError, match=f"lacks shard file.*{shards[-1]}"):
        Checkpoint(snapshot)
    index = json.loads((folder / hub.SHARDED_INDEX).read_text())
    moved = next(key for key, name in index["weight_map"].items() if name == shards[0])
    index["weight_map"][moved] = shards[1]
    (folder / hub.SHARDED_INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"model-0000.-of-0000..safetensors' does not hold what .*{moved}"):
        Checkpoint(str(folder))

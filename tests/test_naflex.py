"""SigLIP 2 NaFlex: parity with transformers' Siglip2VisionModel and Siglip2ImageProcessor, the serving signature.

A tiny random Siglip2VisionModel (hidden 32, 2 blocks, patch 4, a 4x4 position grid), every
weight redrawn, saved with save_pretrained and loaded with `keras_vit.ViT(weights=...)` alone;
images of odd, non-square sizes go through `keras_vit.naflex.naflex_inputs` under a budget of 20
patches, one batch of two aspects with padding.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="parity tests need torch (pip install -e '.[parity]')")
transformers = pytest.importorskip("transformers", reason="parity tests need transformers (the parity extra)")

import keras_vit  # noqa: E402
from helpers import ALL_BACKENDS, to_numpy  # noqa: E402
from keras_vit.naflex import naflex_image_size, naflex_inputs, resize_antialiased  # noqa: E402
from keras_vit.weights import CheckpointError  # noqa: E402

PATCH, BUDGET = 4, 20


def _vision_config():
    return transformers.Siglip2VisionConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                            num_attention_heads=2, patch_size=PATCH, num_patches=16)


def _redraw(model, seed=0):
    """Every parameter redrawn: norms around 1, everything else around 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * 0.3
            norm_scale = "norm" in name and param.ndim == 1 and not name.endswith("bias")
            param.copy_(1.0 + noise if norm_scale else noise)
    return model.eval()


def _images(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (13, 29, 3)).astype("uint8"), rng.integers(0, 256, (23, 7, 3)).astype("uint8")]


def _random_tiny(seed, **arguments):
    """keras_vit's tiny_siglip2 with every weight drawn around 0."""
    model = keras_vit.ViT("tiny_siglip2", **arguments)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.3)
    return model


def _processor_folder(folder):
    """A folder holding Siglip2ImageProcessor(patch_size=4, max_num_patches=20)'s preprocessor_config.json."""
    transformers.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=BUDGET).save_pretrained(str(folder))
    return str(folder)


def _reference(vision_model, inputs, mask):
    with torch.no_grad():
        return vision_model(pixel_values=torch.from_numpy(inputs["patches"]),
                            pixel_attention_mask=torch.from_numpy(mask.astype("int32")),
                            spatial_shapes=torch.from_numpy(inputs["spatial_shapes"]).long())


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory):
    """(folder, transformers model) of a redrawn Siglip2VisionModel saved with save_pretrained."""
    hf = _redraw(transformers.Siglip2VisionModel(_vision_config()))
    folder = str(tmp_path_factory.mktemp("siglip2"))
    hf.save_pretrained(folder)
    return folder, hf


@ALL_BACKENDS
def test_naflex_matches_transformers_on_a_padded_batch_of_two_aspects(siglip2):
    folder, hf = siglip2
    inputs, mask = naflex_inputs(_images(), PATCH, BUDGET)
    assert inputs["spatial_shapes"].tolist() == [[3, 6], [7, 2]] and mask.sum(axis=1).tolist() == [18, 14]
    expected = _reference(hf, inputs, mask)
    model = keras_vit.ViT(weights=folder, include_top=False)
    config = model.vit_config
    assert (config["naflex"], config["grid_size"], config["interpolation"]) == (True, (4, 4), "bilinear_antialias")
    pooled = to_numpy(model(inputs))
    assert np.abs(pooled - expected.pooler_output.numpy()).max() <= 1e-4
    out = model.intermediates_model()(inputs)
    np.testing.assert_array_equal(to_numpy(out["padding_mask"]), mask)
    tokens = to_numpy(out["tokens"])
    assert np.abs(tokens - expected.last_hidden_state.numpy())[mask].max() <= 1e-4
    fused = keras_vit.ViT(weights=folder, include_top=False, fused_attention=True)  # each backend's own kernel
    np.testing.assert_allclose(to_numpy(fused(inputs)), pooled, atol=1e-5)


def test_padding_changes_nothing(siglip2):
    """Each image alone, at its own length, gives what it gave in a padded batch (pooled and every real token)."""
    model = keras_vit.ViT(weights=siglip2[0], include_top=False).intermediates_model()
    inputs, mask = naflex_inputs(_images(), PATCH, BUDGET)
    batch = model(inputs)
    for i, image in enumerate(_images()):
        alone, alone_mask = naflex_inputs(image, PATCH, int(mask[i].sum()))
        assert alone_mask.all()
        out = model(alone)
        np.testing.assert_allclose(to_numpy(out["output"])[0], to_numpy(batch["output"])[i], atol=1e-5)
        np.testing.assert_allclose(to_numpy(out["tokens"])[0], to_numpy(batch["tokens"])[i][mask[i]], atol=1e-5)


def test_two_tower_siglip2_reads_the_image_tower_and_image_models_read_the_grid(siglip2, tmp_path):
    text = transformers.Siglip2TextConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                          num_attention_heads=2, vocab_size=50, bos_token_id=1, eos_token_id=2)
    config = transformers.Siglip2Config(text_config=text.to_dict(), vision_config=_vision_config().to_dict())
    hf = _redraw(transformers.Siglip2Model(config), seed=2)
    hf.save_pretrained(str(tmp_path / "two"))
    inputs, mask = naflex_inputs(_images(), PATCH, BUDGET)
    with torch.no_grad():
        expected = hf.get_image_features(pixel_values=torch.from_numpy(inputs["patches"]),
                                         pixel_attention_mask=torch.from_numpy(mask.astype("int32")),
                                         spatial_shapes=torch.from_numpy(inputs["spatial_shapes"]).long())
    expected = getattr(expected, "pooler_output", expected).numpy()
    model = keras_vit.ViT(weights=str(tmp_path / "two"), include_top=False)
    assert np.abs(to_numpy(model(inputs)) - expected).max() <= 1e-4
    # The same weights on images of one size (naflex=False): the grid resampled once, at load, as NaFlex
    # resamples it per image; a square image of 3x3 patches is the same model either way.
    folder, _ = siglip2
    naflex = keras_vit.ViT(weights=folder, include_top=False)
    image = np.random.default_rng(3).normal(size=(1, 12, 12, 3)).astype("float32")
    on_images = keras_vit.ViT(weights=folder, include_top=False, naflex=False, image_size=12)
    patches = image.reshape(1, 3, PATCH, 3, PATCH, 3).transpose(0, 1, 3, 2, 4, 5).reshape(1, 9, -1)
    as_patches = {"patches": patches, "spatial_shapes": np.array([[3, 3]], "int32")}
    np.testing.assert_allclose(to_numpy(on_images(image)), to_numpy(naflex(as_patches)), atol=1e-5)
    # A NaFlex model written as .npz says so, and reads back as one.
    keras_vit.weights.save_npz(naflex, str(tmp_path / "naflex.npz"))
    again = keras_vit.ViT(weights=str(tmp_path / "naflex.npz"), include_top=False)
    assert again.vit_config["naflex"] and again.vit_config["interpolation"] == "bilinear_antialias"
    np.testing.assert_allclose(to_numpy(again(as_patches)), to_numpy(naflex(as_patches)), atol=1e-6)


def test_naflex_inputs_are_the_reference_processors():
    from transformers.models.siglip2.image_processing_pil_siglip2 import (
        Siglip2ImageProcessorPil,
        get_image_size_for_max_num_patches,
    )

    rng = np.random.default_rng(0)
    for height, width, patch, budget in zip(rng.integers(1, 2000, 400), rng.integers(1, 2000, 400),
                                            rng.choice([4, 14, 16], 400), rng.integers(1, 1025, 400)):
        args = (int(height), int(width), int(patch), int(budget))
        assert naflex_image_size(*args) == get_image_size_for_max_num_patches(*args), args
    images = _images() + [np.random.default_rng(2).integers(0, 256, (3, 5, 3)).astype("uint8")]  # below a patch
    inputs, mask = naflex_inputs(images, PATCH, BUDGET)
    processor = Siglip2ImageProcessorPil(patch_size=PATCH, max_num_patches=BUDGET)
    expected = processor(images, return_tensors="np", input_data_format="channels_last")
    np.testing.assert_array_equal(inputs["spatial_shapes"], expected["spatial_shapes"])
    np.testing.assert_array_equal(mask, expected["pixel_attention_mask"].astype(bool))
    # PIL's own fixed-point resize, in Pillow's pass order: the same pixel levels.
    assert np.abs(inputs["patches"] - expected["pixel_values"]).max() <= 1e-6
    # torchvision's backend (not importable here) resizes with torch's uint8 kernel: at most one level apart.
    for image, (rows, cols) in zip(images, inputs["spatial_shapes"]):
        size = (int(rows) * PATCH, int(cols) * PATCH)
        kernel = torch.nn.functional.interpolate(torch.from_numpy(image).permute(2, 0, 1)[None], size=size,
                                                 mode="bilinear", antialias=True)[0].permute(1, 2, 0).numpy()
        ours = resize_antialiased(image, *size).astype(int)
        assert np.abs(ours - kernel).max() <= 1 and (ours != kernel).mean() < 0.1, (ours != kernel).mean()


@pytest.fixture(scope="module")
def with_processor(siglip2, tmp_path_factory):
    """The siglip2 folder with the preprocessor_config.json of Siglip2ImageProcessor(patch_size=4, max_num_patches=20)."""
    import shutil

    return _processor_folder(shutil.copytree(siglip2[0], tmp_path_factory.mktemp("processor") / "siglip2"))


@ALL_BACKENDS
def test_the_budget_patch_size_and_scaling_come_from_the_checkpoints_processor(siglip2, with_processor):
    """A folder with Siglip2ImageProcessor's preprocessor_config.json: nothing to pass, contradictions refused."""
    folder = with_processor
    images = _images()
    inputs, mask = naflex_inputs(images, weights=folder)
    expected, expected_mask = naflex_inputs(images, PATCH, BUDGET, "symmetric")
    np.testing.assert_array_equal(inputs["patches"], expected["patches"])
    np.testing.assert_array_equal(mask, expected_mask)
    assert naflex_inputs(images, PATCH, BUDGET, weights=keras_vit.weights.Checkpoint(folder))[1].shape == (2, BUDGET)
    for kwargs, message in (({"max_num_patches": 256}, r"Contradicting max_num_patches=256 and weights=.*states "
                                                        r"max_num_patches=20"),
                            ({"patch_size": 16}, r"Contradicting patch_size=16 and weights=.*states patch_size=4"),
                            ({"scaling": "unit"}, r"Contradicting scaling='unit' .* states scaling='symmetric'")):
        with pytest.raises(ValueError, match=message):
            naflex_inputs(images, weights=folder, **kwargs)
    with pytest.raises(ValueError, match=r"Missing max_num_patches: weights=.*it has no preprocessor_config.json\) "
                                         r"states none. Pass max_num_patches="):
        naflex_inputs(images, PATCH, weights=siglip2[0])


@ALL_BACKENDS
def test_load_pretrained_takes_naflex_weights_at_one_image_size(with_processor):
    """The probes' backbone: the NaFlex weights on square images of the stored grid, scaling from the processor."""
    from keras_vit.transfer import load_pretrained

    model, info = load_pretrained(with_processor)
    assert info.image_size == (16, 16) and "naflex=False" in info.image_size_reason and info.scaling == "symmetric"
    image = np.random.default_rng(4).integers(0, 256, (16, 16, 3)).astype("uint8")
    naflex = keras_vit.ViT(weights=with_processor, include_top=False)
    expected = to_numpy(naflex(naflex_inputs(image, weights=with_processor)[0]))
    np.testing.assert_allclose(to_numpy(model(image[None].astype("float32"))), expected, atol=1e-5)


def test_naflex_inputs_check_the_channels_against_the_checkpoint_or_model(with_processor):
    """A grey image for an RGB model: refused naming the channels, not by Keras' shape message after."""
    grey = np.zeros((16, 16, 1), "uint8")
    for weights in (with_processor, keras_vit.weights.Checkpoint(with_processor)):
        with pytest.raises(ValueError, match=r"Invalid images: 1 channel each, but weights=.* takes 3 \(its "
                                             r".*\)\. Pass images of 3 channels: .*np\.repeat\(image, 3, axis=-1\)"):
            naflex_inputs(grey, weights=weights)
    model = keras_vit.ViT("tiny_siglip2", include_top=False)
    with pytest.raises(ValueError, match=r"Invalid images: 1 channel each, but model='.*' takes 3"):
        naflex_inputs(grey, max_num_patches=BUDGET, model=model)
    # The model gives the patch size; one that contradicts it is refused, and so is a model that is no NaFlex one.
    inputs, mask = naflex_inputs(np.zeros((16, 16, 3), "uint8"), max_num_patches=BUDGET, model=model)
    assert to_numpy(model(inputs)).shape == (1, model.output_shape[-1]) and mask.shape == (1, BUDGET)
    with pytest.raises(ValueError, match=r"Contradicting patch_size=16 and model='.*', whose patch_size is 4"):
        naflex_inputs(grey, 16, BUDGET, model=model)
    with pytest.raises(ValueError, match=r"Invalid model='.*': it takes images, not NaFlex patch sequences"):
        naflex_inputs(grey, PATCH, BUDGET, model=keras_vit.ViT("tiny"))


@pytest.mark.parametrize("call, message", [
    (lambda: naflex_inputs(np.zeros((0, 5, 3), "uint8"), PATCH, BUDGET), r"image 0 of shape \(0, 5, 3\): it has no pixels"),
    (lambda: naflex_inputs(np.zeros((8, 8), "uint8"), PATCH, BUDGET), r"image 0 of shape \(8, 8\).*\(height, width, channels\)"),
    (lambda: naflex_inputs(np.full((8, 8, 3), np.nan, "float32"), PATCH, BUDGET), r"image 0: it has NaN"),
    (lambda: naflex_inputs(np.zeros((8, 8, 3), "uint8"), PATCH, 0), r"max_num_patches=0"),
    (lambda: naflex_inputs([np.zeros((8, 8, 3)), np.zeros((8, 8, 1))], PATCH, BUDGET), r"channels differ \(\[1, 3\]\)"),
    (lambda: naflex_image_size(1, 10**9, PATCH, 4), r"image of 1x1000000000 pixels for max_num_patches=4: .* 1x251 grid"),
])
def test_bad_images_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_naflex_model_refuses_images_and_grids_over_its_patches():
    model = keras_vit.ViT("tiny_siglip2", include_top=False)
    with pytest.raises(ValueError, match=r"expects 2 named input\(s\) with keys \['patches', 'spatial_shapes'\]"):
        model(np.zeros((1, 16, 16, 3), "float32"))
    patches = np.zeros((2, BUDGET, 48), "float32")
    for grid, message in (([[3, 6], [0, 4]], r"spatial_shapes\[1\]=\(0, 4\).*at least 1x1"),
                          ([[5, 5], [2, 2]], r"spatial_shapes\[0\]=\(5, 5\).*25 patches, over the 20")):
        with pytest.raises(ValueError, match=message):
            model({"patches": patches, "spatial_shapes": np.array(grid, "int32")})


def test_siglip2_classification_head_is_refused_naming_the_classes(tmp_path):
    text = transformers.Siglip2TextConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                          num_attention_heads=2, vocab_size=50, bos_token_id=1, eos_token_id=2)
    config = transformers.Siglip2Config(text_config=text.to_dict(), vision_config=_vision_config().to_dict(),
                                        num_labels=3)
    transformers.Siglip2ForImageClassification(config).save_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"'classifier.weight': a Siglip2ForImageClassification head.*"
                                              r"Siglip2VisionModel, Siglip2Model"):
        keras_vit.ViT(weights=str(tmp_path))


def test_naflex_serving_signature_takes_encoded_images_of_any_aspect(tmp_path):
    import tensorflow as tf

    from keras_vit.export import naflex_saved_model

    model = _random_tiny(0, include_top=False)
    path = naflex_saved_model(model, str(tmp_path / "serving"), weights=_processor_folder(tmp_path / "hf"))  # budget 20
    serve = tf.saved_model.load(path).signatures["serving_default"]
    images = _images()
    encoded = tf.stack([tf.io.encode_png(images[0]), tf.io.encode_jpeg(images[1], quality=100)])
    decoded = [images[0], tf.io.decode_jpeg(encoded[1], dct_method="INTEGER_ACCURATE").numpy()]  # Pillow's pixels
    expected = to_numpy(model(naflex_inputs(decoded, PATCH, BUDGET)[0]))
    np.testing.assert_allclose(serve(image_bytes=encoded)["embeddings"].numpy(), expected, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"image_bytes\[1\] is an empty string"):
        serve(image_bytes=tf.stack([encoded[0], b""]))
    with pytest.raises(ValueError, match=r"include_top=False"):
        naflex_saved_model(keras_vit.ViT("tiny_siglip2", num_classes=3), str(tmp_path / "head"))
    with pytest.raises(ValueError, match=r"not a NaFlex model"):
        naflex_saved_model(keras_vit.ViT("tiny_siglip", include_top=False), str(tmp_path / "images"))


def test_cli_predict_and_export_take_a_naflex_model_and_inspect_refuses_it(tmp_path, capsys):
    from PIL import Image

    from keras_vit.cli import main
    from keras_vit.export import load_predictor

    model = _random_tiny(5, num_classes=3)
    path = str(tmp_path / "naflex.keras")
    model.save(path)
    files = [str(tmp_path / f"{i}.png") for i in range(2)]
    for image, file in zip(_images(), files):
        Image.fromarray(image).save(file)
    expected = to_numpy(model(naflex_inputs(_images(), PATCH, BUDGET)[0]))
    predictor = load_predictor(path, scaling="symmetric", max_num_patches=BUDGET)
    np.testing.assert_allclose(predictor.predict_files(files), expected, atol=1e-5)
    # float32, as `expected`: `auto` computes in bfloat16 on some CPUs.
    assert main(["predict", path, *files, "--scaling", "symmetric", "--max-num-patches", str(BUDGET),
                 "--precision", "float32"]) == 0
    assert f"{expected[0].max():.4f}" in capsys.readouterr().out
    for argv, message in ((["inspect", path, files[0], "--out", str(tmp_path / "figures")], "Cannot inspect NaFlex"),
                          (["export", path, "--tflite", str(tmp_path / "m.tflite"), "--quantization", "float16"],
                           "--quantization float16: not for a NaFlex model"),
                          (["predict", path, files[0], "--scaling", "symmetric", "--max-num-patches", "0"],
                           "--max-num-patches")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["export", path, "--tflite", str(tmp_path / "m.tflite"), "--max-num-patches", str(BUDGET)]) == 0
    assert "TFLite (NaFlex patch sequence -> probabilities)" in capsys.readouterr().out


def test_save_hf_writes_a_siglip2_folder_transformers_reads_with_equal_outputs(siglip2, tmp_path):
    from keras_vit.weights import save_hf

    model = keras_vit.ViT(weights=siglip2[0], include_top=False)
    save_hf(model, str(tmp_path / "hf"))
    hf = transformers.AutoModel.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf).__name__ == "Siglip2VisionModel"
    inputs, mask = naflex_inputs(_images(), PATCH, BUDGET)
    expected, written = _reference(siglip2[1], inputs, mask), _reference(hf, inputs, mask)
    for key in ("pooler_output", "last_hidden_state"):
        np.testing.assert_array_equal(getattr(written, key).numpy(), getattr(expected, key).numpy())
    assert np.abs(to_numpy(model(inputs)) - written.pooler_output.numpy()).max() <= 1e-5


def test_naflex_tflite_and_onnx_take_one_padded_sequence_of_any_grid(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    from keras_vit.export import naflex_onnx, naflex_tflite

    onnxruntime = pytest.importorskip("onnxruntime")
    model = _random_tiny(6, include_top=False)
    lite = naflex_tflite(model, str(tmp_path / "naflex.tflite"), weights=_processor_folder(tmp_path / "hf"))  # budget 20
    runner = Interpreter(model_path=lite.path).get_signature_runner()
    session = onnxruntime.InferenceSession(naflex_onnx(model, str(tmp_path / "naflex.onnx"), BUDGET).path)
    assert [i.name for i in session.get_inputs()] == ["patches", "spatial_shapes"]
    full = np.random.default_rng(7).integers(0, 256, (16, 20, 3)).astype("uint8")
    for image in _images() + [full]:  # padded twice, then a full sequence
        inputs, _ = naflex_inputs(image, PATCH, BUDGET)
        expected = to_numpy(model(inputs))
        assert np.abs(runner(**inputs)["embeddings"] - expected).max() <= 1e-5
        assert np.abs(session.run(["embeddings"], inputs)[0] - expected).max() <= 1e-5
    with pytest.raises(ValueError, match=r"not a NaFlex model"):
        naflex_tflite(keras_vit.ViT("tiny_siglip", include_top=False), str(tmp_path / "images.tflite"))


def test_writers_and_readers_refuse_what_they_cannot_hold(siglip2, tmp_path):
    import json
    import shutil

    from keras_vit.weights import save_hf, save_timm

    model = keras_vit.ViT("tiny_siglip2", include_top=False)
    with pytest.raises(CheckpointError, match=r"'siglip2_vision_model' cannot hold: .*include_top=True"):
        save_hf(keras_vit.ViT("tiny_siglip2", num_classes=3), str(tmp_path / "hf"))
    with pytest.raises(CheckpointError, match=r"naflex=True \(timm's VisionTransformer takes images"):
        save_timm(model, str(tmp_path / "timm"))
    folder = shutil.copytree(siglip2[0], tmp_path / "odd")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_patches": 15}))
    with pytest.raises(CheckpointError, match=r"config.json'?: num_patches is 15; expected a square number"):
        keras_vit.ViT(weights=str(folder))

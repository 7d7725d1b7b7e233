"""A checkpoint's own image processor (issue 52): CLIP's shortest-edge resize and centre crop,
SigLIP's plain resize, PIL's filters, kept by every classifier made from the checkpoint, in
`load_predictor(...).predict_files` (the SavedModel's `serve_bytes` signature runs the same graph:
tests/test_zeroshot.py checks it on a CLIP processor).

The references are transformers' PIL image processors on a non-square photo-like image (smooth
shading, edges and sensor noise, 45 x 70 pixels), saved as PNG so that no JPEG decoder stands
between the two pipelines.
"""

import json
import os

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")

import keras_vit  # noqa: E402
from keras_vit.export import load_predictor  # noqa: E402
from keras_vit.image_processor import FILTERS, process_image, processor_record  # noqa: E402

SIZE = 16
HEIGHT, WIDTH = 45, 70


def _photo(seed=0):
    """A photo-like uint8 image: shaded sky and ground, a dark disc, noise."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:HEIGHT, 0:WIDTH].astype("float64")
    sky = np.stack([90 + rows, 140 + 0.5 * rows, 220 - rows], axis=-1)
    ground = np.stack([60 + 0.8 * cols, 120 + 0.3 * cols, 40 + 0 * cols], axis=-1)
    image = np.where((rows > 0.5 * HEIGHT + 5 * np.sin(cols / 9))[..., None], ground, sky)
    disc = (rows - 18) ** 2 + (cols - 48) ** 2 < 81
    image[disc] = [30, 25, 20]
    return np.clip(image + rng.normal(0, 6, image.shape), 0, 255).astype("uint8")


def _hf_pixels(processor, image):
    """The processor's pixel_values as [0, 255] pixels (H, W, C): its normalisation undone."""
    values = processor(images=PIL.fromarray(image), return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
    return (values * np.asarray(processor.image_std) + np.asarray(processor.image_mean)) * 255


# What CLIPImageProcessor.save_pretrained writes (a side of SIZE, symmetric mean and std).
CLIP_PROCESSOR = {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": SIZE},
                  "do_center_crop": True, "crop_size": {"height": SIZE, "width": SIZE}, "resample": 3,
                  "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
                  "image_std": [0.5] * 3, "do_convert_rgb": True}


def _clip_pixels(image):
    """CLIP's processor written out in PIL: the short side to SIZE (bicubic), the centre SIZE x SIZE, floor offsets."""
    height, width = image.shape[:2]
    new_h, new_w = (SIZE, int(SIZE * width / height)) if height <= width else (int(SIZE * height / width), SIZE)
    resized = np.asarray(PIL.fromarray(image).resize((new_w, new_h), resample=3))
    top, left = (new_h - SIZE) // 2, (new_w - SIZE) // 2
    return resized[top : top + SIZE, left : left + SIZE].astype("float32")


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_pixels_equal_transformers_pil_processors(name):
    transformers = pytest.importorskip("transformers", reason="processor parity needs transformers (the parity extra)")
    image = _photo()
    if name == "clip":
        processor = transformers.CLIPImageProcessorPil(**CLIP_PROCESSOR)
        record = processor_record("shortest_edge", SIZE, [SIZE, SIZE], "bicubic", "floor", "clip")
    else:
        processor = transformers.SiglipImageProcessorPil(size={"height": SIZE, "width": 2 * SIZE})
        record = processor_record("squash", [SIZE, 2 * SIZE], None, "bicubic", "floor", "siglip")
    expected = _hf_pixels(processor, image)
    got = process_image(image, record, expected.shape[:2])
    assert np.abs(got - expected).max() <= 1e-3  # PIL's own fixed-point arithmetic: equal levels
    if name == "clip":
        np.testing.assert_array_equal(_clip_pixels(image), got)  # the reference the classifier tests use


def test_every_pil_filter_equals_pil_resize():
    rng = np.random.default_rng(1)
    codes = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
    for name in FILTERS:
        # Width first, and height first (Pillow's order where the height shrinks by over twice the width's pixels).
        for source, target in (((37, 53), (16, 12)), ((9, 5), (13, 17)), ((50, 19), (16, 12))):
            image = rng.integers(0, 256, (*source, 3), dtype=np.uint8)
            expected = np.asarray(PIL.fromarray(image).resize(target[::-1], resample=codes[name]))
            record = processor_record("squash", list(target), None, name, "floor", "x")
            assert np.array_equal(process_image(image, record, target), expected), name


@pytest.fixture(scope="module")
def clip_classifier(tmp_path_factory):
    """A 3-class ViT saved as a Hugging Face folder whose processor is CLIP's, loaded back, saved as .keras."""
    folder = str(tmp_path_factory.mktemp("clip_vit"))
    source = keras_vit.ViT("tiny", num_classes=3, image_size=SIZE, preprocessing="symmetric")
    rng = np.random.default_rng(0)
    source.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in source.get_weights()])
    keras_vit.weights.save_hf(source, folder)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as file:
        json.dump(CLIP_PROCESSOR, file)
    model = keras_vit.ViT(weights=folder, preprocessing="symmetric")
    path = os.path.join(folder, "clip.keras")
    model.save(path)
    photo = os.path.join(folder, "photo.png")
    PIL.fromarray(_photo()).save(photo)
    expected = model.predict(_clip_pixels(_photo())[None], verbose=0)
    return model, path, photo, expected


def test_the_model_keeps_the_checkpoints_processor(clip_classifier):
    model, path, _, _ = clip_classifier
    processor = json.loads(json.dumps(model.vit_config["image_processor"]))
    assert (processor["resize"], processor["size"], processor["crop"], processor["interpolation"]) == (
        "shortest_edge", SIZE, [SIZE, SIZE], "bicubic")
    assert keras_vit.models.vit.build(model.vit_config).vit_config["image_processor"] == processor


def test_predict_files_scores_as_the_processor(clip_classifier):
    _, path, photo, expected = clip_classifier
    got = load_predictor(path).predict_files([photo])
    squashed = np.asarray(PIL.open(photo).resize((SIZE, SIZE), resample=2), "float32")  # the resize before issue 52
    square = clip_classifier[0].predict(squashed[None], verbose=0)
    assert np.abs(square - expected).max() > 1e-3  # resizing the photo to the square scores it otherwise
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("offset", ["floor", "round"])
def test_the_graph_processor_in_tf_data_equals_the_numpy_one(offset):
    # timm's centre crop rounds its offsets: in a tf.data map (a graph, no numpy behaviour) tnp.round failed
    # ("SymbolicTensor object has no attribute 'astype'") where `keras-vit embed` fed a timm checkpoint.
    import tensorflow as tf

    from keras_vit.data.processor_graph import process_image_tensor
    from keras_vit.image_processor import process_image, processor_record

    timm = processor_record("shortest_edge", 36, [32, 32], "bicubic", offset, "x", crop_pct=0.875)
    images = np.random.default_rng(0).integers(0, 256, (2, 45, 37, 3)).astype("uint8")
    graph = tf.data.Dataset.from_tensor_slices(images).map(lambda image: process_image_tensor(image, timm, 32, 32))
    for image, pixels in zip(images, graph):
        np.testing.assert_array_equal(pixels.numpy(), process_image(image, timm, (32, 32)))

"""`keras-vit inspect` and the plotting helpers: real PNG files on a tiny model, clear errors on bad input."""

import sys

import keras
import numpy as np
import pytest
from matplotlib import image as mpimg
from PIL import Image

import keras_vit
from keras_vit import cli
from keras_vit.inspect import plots

FIGURES = (
    "attention_rollout.png",
    "mean_attention_distance.png",
    "position_embedding_similarity.png",
    "patch_embedding_filters.png",
)


@pytest.fixture(scope="module")
def saved_vit(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    model = keras_vit.ViT(
        patch_size=4, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=16,
        input_shape=(16, 16, 1), num_classes=3, preprocessing="unit",
    )
    model.save(path)
    return str(path)


def _check_pngs(paths):
    for path in paths:
        image = mpimg.imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) > 50, path
        assert image.std() > 0.01, f"{path} is blank"


def test_inspect_writes_every_figure(saved_vit, tmp_path, capsys):
    rgb_wrong_size = tmp_path / "colour.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(rgb_wrong_size)
    gray = tmp_path / "gray.jpg"
    Image.fromarray(np.full((16, 16), 200, dtype=np.uint8), mode="L").save(gray)
    out = tmp_path / "figures"
    code = cli.main(["inspect", saved_vit, str(rgb_wrong_size), str(gray), "--out", str(out), "--head-fusion", "max"])
    assert code == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / name) for name in FIGURES]
    _check_pngs(printed)
    assert sorted(p.name for p in out.iterdir()) == sorted(FIGURES)  # no temporary files left


def test_inspect_defaults_to_sample_images(saved_vit, tmp_path, capsys):
    assert cli.main(["inspect", saved_vit, "--out", str(tmp_path), "--components", "3"]) == 0
    captured = capsys.readouterr()
    assert "Fashion-MNIST" in captured.err
    _check_pngs(captured.out.split())


def test_inspect_rejects_what_is_not_a_vit(saved_vit, tmp_path, capsys):
    cnn_path = tmp_path / "cnn.keras"
    keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3), keras.layers.Flatten(), keras.layers.Dense(2)]).save(cnn_path)
    assert cli.main(["inspect", str(cnn_path), "--out", str(tmp_path / "cnn")]) == 2
    assert "no TransformerBlock layers" in capsys.readouterr().err
    weights = tmp_path / "model.weights.h5"
    weights.write_bytes(b"")
    assert cli.main(["inspect", str(weights), "--out", str(tmp_path)]) == 2
    assert "expected a saved Keras model file ending in .keras" in capsys.readouterr().err
    assert cli.main(["inspect", saved_vit, str(tmp_path / "missing.png"), "--out", str(tmp_path)]) == 2
    assert "Image file not found" in capsys.readouterr().err
    assert cli.main(["inspect", saved_vit, "--out", str(tmp_path), "--image-size", "8", "8"]) == 2
    assert "takes 16x16 images only" in capsys.readouterr().err
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    assert cli.main(["inspect", saved_vit, str(not_an_image), "--out", str(tmp_path)]) == 2
    assert "not a readable image file" in capsys.readouterr().err


def test_plots_validate_and_need_matplotlib(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"\.png"):
        plots.plot_mean_attention_distance(np.ones((2, 2)), tmp_path / "distance.jpg")
    with pytest.raises(ValueError, match=r"\(layers, heads\)"):
        plots.plot_mean_attention_distance(np.ones(3), tmp_path / "distance.png")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"keras_vit\[plot\]"):
        plots.plot_mean_attention_distance(np.ones((2, 2)), tmp_path / "distance.png")


def test_cli_without_matplotlib_says_what_to_install(saved_vit, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["inspect", saved_vit, "--out", str(tmp_path)]) == 2
    assert "keras_vit[plot]" in capsys.readouterr().err


def test_cli_head_fusions_are_the_library_ones():
    from keras_vit.inspect import HEAD_FUSIONS

    action = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices["inspect"]._actions if a.dest == "head_fusion")
    assert tuple(action.choices) == HEAD_FUSIONS


def test_inspect_refuses_to_replace_figures_without_overwrite(saved_vit, tmp_path, capsys):
    out = tmp_path / "figures"
    out.mkdir()
    (out / FIGURES[0]).write_bytes(b"precious")
    assert cli.main(["inspect", saved_vit, "--out", str(out), "--components", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{FIGURES[0]}' already exists; pass overwrite=True (--overwrite)" in err[0], err
    assert (out / FIGURES[0]).read_bytes() == b"precious" and len(list(out.iterdir())) == 1
    assert cli.main(["inspect", saved_vit, "--out", str(out), "--components", "3", "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FIGURES)
    _check_pngs([out / FIGURES[0]])

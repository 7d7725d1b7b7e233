"""Tiny two-tower checkpoints (CLIP, SigLIP, SigLIP 2) saved by transformers, with real-format tokenizer files.

Each folder is what `save_pretrained` writes for a `CLIPModel`, `SiglipModel` or `Siglip2Model`
of random weights (`SIZES`: "tiny", hidden 32 and 2 layers, for the tests; "small", a CLIP
B/32-like text width 512, for benchmarks/image_text.py) beside its tokenizer and image processor: CLIP's real
vocabulary and merges (open_clip's `bpe_simple_vocab_16e6.txt.gz`), a SentencePiece model
trained here for SigLIP, a Gemma-style BPE `tokenizer.json` trained here for SigLIP 2. The local
text they learn from is keras_vit's README and ImageNet class names. Every weight is redrawn away
from its initial value, so a missing or swapped tensor changes the outputs.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import os

import numpy as np

# Tower sizes: text and vision (width, layers, heads, MLP); CLIP's projection; image side; CLIP's patch and SigLIP's;
# SigLIP 2's patch budget; the std of the redrawn weights.
SIZES = {
    "tiny": dict(text=(32, 2, 2, 48), vision=(32, 2, 2, 48), projection=24, image=32, patch=8, siglip_patch=8,
                 budget=16, noise=0.3),
    "small": dict(text=(512, 4, 8, 2048), vision=(384, 4, 6, 1536), projection=512, image=224, patch=32,
                  siglip_patch=16, budget=256, noise=0.05),  # CLIP B/32 and SigLIP B/16 grids, 4 blocks each
}
IMAGE, PATCH = SIZES["tiny"]["image"], SIZES["tiny"]["patch"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing():
    """Why the fixtures cannot be made here (a missing package), or None."""
    for package in ("torch", "transformers", "sentencepiece", "tokenizers", "open_clip"):
        if importlib.util.find_spec(package) is None:
            extra = " (pip install --no-deps open-clip-torch ftfy regex)" if package == "open_clip" else ""
            return f"image-text parity needs {package}{extra}"
    return None


def local_text():
    """Sentences of local text to train the tokenizers on."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as file:
        lines = [line.strip() for line in file if line.strip()]
    with open(os.path.join(ROOT, "keras_vit", "imagenet1k_classes.txt"), encoding="utf-8") as file:
        lines += [f"This is a photo of a {line.strip()}." for line in file if line.strip()]
    return lines


def _redraw(model, noise_std, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * noise_std
            norm = "norm" in name and param.ndim == 1 and not name.endswith("bias")
            param.copy_(1.0 + noise if norm else noise)
        if hasattr(model, "logit_scale"):
            model.logit_scale.fill_(1.7)
        if getattr(model, "logit_bias", None) is not None:
            model.logit_bias.fill_(-2.5)
    return model.eval()


def _tower(transformers, kind, shape, **kwargs):
    hidden, layers, heads, mlp = shape
    common = dict(hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers, num_attention_heads=heads)
    return getattr(transformers, kind)(**common, **kwargs).to_dict()


def open_clip_file(name):
    spec = importlib.util.find_spec("open_clip")
    return os.path.join(os.path.dirname(spec.origin), name)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table, which CLIP's vocabulary is written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def write_clip_vocabulary(folder):
    """vocab.json and merges.txt of CLIP's real vocabulary (49,408 tokens) from open_clip's package."""
    with gzip.open(open_clip_file("bpe_simple_vocab_16e6.txt.gz"), "rt", encoding="utf-8") as file:
        merges = file.read().split("\n")[1:49152 - 256 - 2 + 1]
    pairs = [tuple(line.split()) for line in merges]
    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(pair) for pair in pairs]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as file:
        json.dump({token: i for i, token in enumerate(vocab)}, file, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as file:
        file.write("#version: 0.2\n" + "\n".join(" ".join(pair) for pair in pairs) + "\n")
    return len(vocab)


def make_clip(folder, size="tiny"):
    """A CLIPModel two-tower folder with CLIP's real tokenizer; returns the torch model."""
    import transformers

    sizes = SIZES[size]
    image, projection = sizes["image"], sizes["projection"]

    vocab_size = write_clip_vocabulary(folder)
    tokenizer = transformers.CLIPTokenizer(vocab=os.path.join(folder, "vocab.json"),
                                           merges=os.path.join(folder, "merges.txt"))
    text = _tower(transformers, "CLIPTextConfig", sizes["text"], vocab_size=vocab_size, max_position_embeddings=77,
                  projection_dim=projection, eos_token_id=vocab_size - 1, bos_token_id=vocab_size - 2,
                  pad_token_id=vocab_size - 1)
    vision = _tower(transformers, "CLIPVisionConfig", sizes["vision"], image_size=image, patch_size=sizes["patch"],
                    projection_dim=projection)
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection)
    model = _redraw(transformers.CLIPModel(config), sizes["noise"])
    images = transformers.CLIPImageProcessor(size={"shortest_edge": image}, crop_size={"height": image, "width": image})
    model.save_pretrained(folder)
    transformers.CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the Hub's folders keep it
    return model


def train_sentencepiece(folder, vocab_size=400):
    """A unigram SentencePiece model (T5's special ids: <pad> 0, </s> 1, <unk> 2) on local text."""
    import sentencepiece

    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as file:
        file.write("\n".join(local_text()))
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(folder, "spiece"), vocab_size=vocab_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2)
    os.remove(corpus)
    os.remove(os.path.join(folder, "spiece.vocab"))
    return os.path.join(folder, "spiece.model"), vocab_size


def make_siglip(folder, size="tiny"):
    """A SiglipModel two-tower folder with a SentencePiece tokenizer; returns the torch model."""
    import transformers

    sizes = SIZES[size]
    image, patch = sizes["image"], sizes["siglip_patch"]

    os.makedirs(folder, exist_ok=True)
    model_file, vocab_size = train_sentencepiece(folder)
    tokenizer = transformers.SiglipTokenizer(model_file)
    text = _tower(transformers, "SiglipTextConfig", sizes["text"], vocab_size=vocab_size, max_position_embeddings=64,
                  projection_size=sizes["vision"][0], pad_token_id=1, eos_token_id=1)
    vision = _tower(transformers, "SiglipVisionConfig", sizes["vision"], image_size=image, patch_size=patch)
    model = _redraw(transformers.SiglipModel(transformers.SiglipConfig(text_config=text, vision_config=vision)),
                    sizes["noise"])
    images = transformers.SiglipImageProcessor(size={"height": image, "width": image})
    model.save_pretrained(folder)
    transformers.SiglipProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the Hub's folders keep it
    return model


def train_gemma_style(vocab_size=600):
    """A Gemma-style byte-fallback BPE (`tokenizers`): spaces as "▁", <pad> <eos> <bos> <unk> <mask> first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    byte_tokens = [f"<0x{byte:02X}>" for byte in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + byte_tokens, show_progress=False)
    tokenizer.train_from_iterator(local_text(), trainer)
    return tokenizer


def make_siglip2(folder, size="tiny"):
    """A Siglip2Model (NaFlex) two-tower folder with a Gemma-style tokenizer.json; returns the torch model."""
    import transformers

    sizes = SIZES[size]
    patch, budget = sizes["siglip_patch"], sizes["budget"]

    os.makedirs(folder, exist_ok=True)
    backend = train_gemma_style()
    vocab_size = backend.get_vocab_size()
    tokenizer = transformers.GemmaTokenizer(tokenizer_object=backend, add_bos_token=False, add_eos_token=True,
                                            padding_side="right", model_max_length=64, pad_token="<pad>",
                                            eos_token="<eos>", bos_token="<bos>", unk_token="<unk>")
    text = _tower(transformers, "Siglip2TextConfig", sizes["text"], vocab_size=vocab_size, max_position_embeddings=64,
                  projection_size=sizes["vision"][0], pad_token_id=0, eos_token_id=1, bos_token_id=2)
    vision = _tower(transformers, "Siglip2VisionConfig", sizes["vision"], patch_size=patch, num_patches=budget)
    model = _redraw(transformers.Siglip2Model(transformers.Siglip2Config(text_config=text, vision_config=vision)),
                    sizes["noise"])
    images = transformers.Siglip2ImageProcessor(patch_size=patch, max_num_patches=budget)
    model.save_pretrained(folder)
    transformers.Siglip2Processor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the Hub's folders keep it
    return model


MAKERS = {"clip": make_clip, "siglip": make_siglip, "siglip2": make_siglip2}


@functools.lru_cache(maxsize=None)
def reference_tokenizer(folder):
    """The tokenizer transformers' zero-shot pipeline loads from `folder` (AutoTokenizer), loaded once."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(folder)


def pipeline_kwargs(kind):
    """The tokenizer arguments of transformers' zero-shot-image-classification pipeline for `kind`."""
    return dict(padding="max_length", max_length=64, truncation=True) if "siglip" in kind else dict(padding=True)


def images(count=2, seed=1, size=(40, 52)):
    return np.random.default_rng(seed).integers(0, 256, size=(count, *size, 3)).astype("uint8")


def photos():
    """Two non-square uint8 images, one wide and one tall (Pillow resizes a tall one's height first)."""
    return [images(1, seed=1, size=(40, 52))[0], images(1, seed=2, size=(70, 23))[0]]


_MADE = {}


def made(kind, tmp_path_factory):
    """(folder, torch model) of `kind`, made once per test process (every image-text test module shares it)."""
    if kind not in _MADE:
        folder = str(tmp_path_factory.mktemp(f"image_text_{kind}"))
        _MADE[kind] = (folder, MAKERS[kind](folder))
    return _MADE[kind]


_LOADED = {}


def loaded(kind, tmp_path_factory):
    """`keras_vit.ImageTextModel` of `made(kind)`'s folder, read once per test process (tests only read it)."""
    if kind not in _LOADED:
        import keras_vit

        _LOADED[kind] = keras_vit.ImageTextModel(weights=made(kind, tmp_path_factory)[0])
    return _LOADED[kind]


def reference_pixels(folder, images):
    """The pixel inputs transformers' PIL image processor of `folder` gives (what keras_vit reproduces to the level)."""
    import transformers

    processor = transformers.AutoImageProcessor.from_pretrained(folder, backend="pil")
    return processor(images=[np.asarray(image) for image in images], return_tensors="pt")


def reference_image_embeddings(model, pixels):
    """transformers' L2-normalised image embedding (`get_image_features`, normalised as its `image_embeds`)."""
    import torch

    with torch.no_grad():
        out = model.get_image_features(**pixels)
    embeds = getattr(out, "pooler_output", out).numpy()
    return embeds / np.linalg.norm(embeds, axis=-1, keepdims=True)


def torch_inputs(arrays):
    import torch

    return {key: torch.from_numpy(np.asarray(value).astype("int64")) for key, value in arrays.items()}


def reference_text_embeddings(model, tokens):
    """transformers' unnormalised text embedding (`get_text_features`) of `tokens`."""
    import torch

    with torch.no_grad():
        out = model.get_text_features(**torch_inputs(tokens))
    return getattr(out, "pooler_output", out).numpy()

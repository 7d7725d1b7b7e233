"""Tokenizers of image-text checkpoints, read from their own files, giving transformers 5's zero-shot pipeline's ids.

transformers 5 rebuilds each family's tokenizer from the vocabulary in its files and the rules of
its class, whatever else `tokenizer.json` says; its zero-shot-image-classification pipeline then
pads CLIP's texts to the longest of the batch and SigLIP's to `max_length` 64, truncated. This
module applies the same rules through the `tokenizers` and `sentencepiece` libraries:

- CLIP (`CLIPTokenizer`): byte-level BPE with "</w>" word ends on NFC, whitespace-collapsed,
  lower-cased text; `<|startoftext|>` ... `<|endoftext|>`. Files: `tokenizer.json`, or
  `vocab.json` + `merges.txt`. Truncated at the tower's context (77), as open_clip does.
- SigLIP (`SiglipTokenizer`): SentencePiece (`spiece.model`) on text lower-cased (its
  `do_lower_case`), stripped of ASCII punctuation and whitespace-collapsed; `</s>` appended.
- SigLIP 2 (`Siglip2Tokenizer`, whatever class its `tokenizer_config.json` names): Gemma's
  byte-fallback BPE from `tokenizer.json` on lower-cased text, spaces as "▁"; the special tokens
  its `tokenizer.json` post-processor adds, or those `add_bos_token` / `add_eos_token` state.

Example:

>>> sorted(TOKENIZER_FILES)
['clip', 'siglip', 'siglip2']
"""

from __future__ import annotations

import html
import os
import re
import string
import warnings

import numpy as np

from keras_vit.weights.files import CheckpointError, read_json_object

TOKENIZER_CONFIG = "tokenizer_config.json"
# The files each family reads its vocabulary from: alternatives, the first found is read.
TOKENIZER_FILES = {
    "clip": (("tokenizer.json",), ("vocab.json", "merges.txt")),
    "siglip": (("spiece.model",),),
    "siglip2": (("tokenizer.json",),),
}
# open_clip's tokenizer pads every text with this id to its context length.
OPEN_CLIP_PAD_ID = 0
# transformers' zero-shot pipeline pads and truncates SigLIP's texts to this length.
SIGLIP_TEXT_LENGTH = 64
# The special tokens of each family's tokenizer class where its tokenizer_config.json is silent.
_SPECIALS = {
    "clip": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
             "unk_token": "<|endoftext|>"},
    "siglip": {"eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"},
    "siglip2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                "mask_token": "<mask>"},
}
# Padding side of each tokenizer class (Siglip2Tokenizer pads left unless its config says otherwise).
_PADDING_SIDE = {"clip": "right", "siglip": "right", "siglip2": "left"}
# CLIPTokenizer's pre-tokenizer: its special tokens, contractions, letters, single digits, other symbols.
_CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


class TextTokenizer:
    """Texts -> {"input_ids", "attention_mask"} (int32 arrays), as the checkpoint's processor gives them.

    Built by `read_tokenizer`. Texts whose tokens exceed `max_length` are truncated as the
    reference does (the end-of-text token kept), with one warning per call naming how many.

    Args:
        kind: str. "clip", "siglip" or "siglip2".
        encode: callable (list of str, truncate: bool) -> list of list of int. Ids with the
            special tokens.
        pad_id: int. The padding id.
        max_length: int. Most tokens a text keeps.
        pad_to_max_length: bool. Pad every batch to `max_length` (SigLIP), else to its longest
            text (CLIP).
        padding_side: str. "right" or "left".
        source: str. The files read, for messages.
    """

    def __init__(self, kind, encode, pad_id, max_length, pad_to_max_length, padding_side, source):
        self.kind = kind
        self._encode = encode
        self.pad_id = int(pad_id)
        self.max_length = int(max_length)
        self.pad_to_max_length = bool(pad_to_max_length)
        self.padding_side = padding_side
        self.source = source

    def __call__(self, texts):
        texts = checked_texts(texts)
        ids = self._encode(texts, truncate=False)
        long = [i for i, row in enumerate(ids) if len(row) > self.max_length]
        if long:
            warnings.warn(
                f"{len(long)} of {len(texts)} texts have more than the {self.max_length} tokens the {self.kind} text "
                f"tower takes (the first: text {long[0]}, {len(ids[long[0]])} tokens); they are truncated to "
                f"{self.max_length}, keeping the end-of-text token, as the reference tokenizer does.",
                stacklevel=2)
            truncated = self._encode([texts[i] for i in long], truncate=True)
            for i, row in zip(long, truncated):
                ids[i] = row
        length = self.max_length if self.pad_to_max_length else max(len(row) for row in ids)
        input_ids = np.full((len(ids), length), self.pad_id, "int32")
        mask = np.zeros((len(ids), length), "int32")
        for i, row in enumerate(ids):
            span = slice(length - len(row), length) if self.padding_side == "left" else slice(0, len(row))
            input_ids[i, span], mask[i, span] = row, 1
        return {"input_ids": input_ids, "attention_mask": mask}

    def __repr__(self):
        return f"TextTokenizer({self.kind!r}, max_length={self.max_length}, source={self.source!r})"


def checked_texts(texts):
    """`texts` as a list of str; refused naming `texts` when empty or not strings."""
    if isinstance(texts, str):
        texts = [texts]
    try:
        texts = list(texts)
    except TypeError:
        raise ValueError(f"Invalid texts={texts!r}: expected a list of strings.") from None
    if not texts:
        raise ValueError("Invalid texts=[]: expected at least one string (an empty string is a text; no texts is not).")
    bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
    if bad:
        raise ValueError(f"Invalid texts: item {bad[0]} is {texts[bad[0]]!r} ({type(texts[bad[0]]).__name__}); "
                         "expected strings.")
    return texts


def tokenizer_files(folder, kind):
    """The paths of the files `kind` reads in `folder`; CheckpointError naming what is missing."""
    for names in TOKENIZER_FILES[kind]:
        if all(os.path.isfile(os.path.join(folder, name)) for name in names):
            return [os.path.join(folder, name) for name in names]
    wanted = " or ".join(" + ".join(names) for names in TOKENIZER_FILES[kind])
    raise CheckpointError(
        f"Folder {folder!r} has no tokenizer files: a {kind} checkpoint's text tower needs {wanted} (as "
        "save_pretrained of its processor or tokenizer writes them) beside config.json."
    )


def read_tokenizer(folder, kind, max_length, *, open_clip=False):
    """The `TextTokenizer` of checkpoint folder `folder` of family `kind`.

    Args:
        folder: str. The checkpoint folder.
        kind: str. "clip", "siglip" or "siglip2".
        max_length: int. CLIP: the text tower's context (its position table); SigLIP's is
            SIGLIP_TEXT_LENGTH, as the pipeline pads to it.
        open_clip: bool. Tokenise as open_clip's `SimpleTokenizer` (CLIP only): its text
            clean-up (ftfy, HTML entities) first, every text padded with id 0 to `max_length`.
            Defaults to False.
    """
    files = tokenizer_files(folder, kind)
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    config = read_json_object(config_path, "tokenizer config") if os.path.isfile(config_path) else {}
    specials = {key: _token_text(config.get(key, default)) for key, default in _SPECIALS[kind].items()}
    side = config.get("padding_side", _PADDING_SIDE[kind])
    if side not in ("left", "right"):
        raise CheckpointError(f"Tokenizer config {config_path!r}: padding_side is {side!r}; expected 'left' or 'right'.")
    source = ", ".join(os.path.basename(path) for path in files)
    if kind == "siglip":
        encode, pad_id = _sentencepiece(files[0], config, specials)
        return TextTokenizer(kind, encode, pad_id, SIGLIP_TEXT_LENGTH, True, side, source)
    backend = _clip_backend(files, specials) if kind == "clip" else _siglip2_backend(files[0], config, specials)
    pad_id = _token_id(backend, specials["pad_token"], files[0])
    length = SIGLIP_TEXT_LENGTH if kind == "siglip2" else min(max_length, _model_max_length(config, max_length))

    if open_clip:
        length, pad_id, side = max_length, OPEN_CLIP_PAD_ID, "right"

    def encode(texts, truncate):
        if truncate:
            backend.enable_truncation(length)
        else:
            backend.no_truncation()
        return [encoding.ids for encoding in backend.encode_batch([open_clip_clean(t) for t in texts] if open_clip
                                                                  else texts)]

    return TextTokenizer(kind, encode, pad_id, length, kind == "siglip2" or open_clip, side, source)


def open_clip_clean(text):
    """open_clip's `basic_clean` of a text: ftfy's `fix_text`, then HTML entities unescaped twice.

    ftfy is needed only where it could change the text: printable ASCII without "&" passes as
    it is without it; other texts are refused, naming the package, where it is not installed.

    Example:

    >>> open_clip_clean("a photo of a dog.")
    'a photo of a dog.'
    """
    try:
        import ftfy
    except ImportError:
        if "&" not in text and all(" " <= char <= "~" or char in "\t\n\r" for char in text):
            return text
        raise ValueError(f"Invalid texts: {text[:40]!r} needs ftfy to be cleaned up as open_clip's tokenizer does "
                         "(pip install ftfy).") from None
    return html.unescape(html.unescape(ftfy.fix_text(text)))


def _token_text(value):
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    return value.get("content") if isinstance(value, dict) else value


def _model_max_length(config, default):
    value = config.get("model_max_length")
    return int(value) if isinstance(value, (int, float)) and 0 < value < 1e9 else default


def _token_id(backend, token, path):
    token_id = backend.token_to_id(token)
    if token_id is None:
        raise CheckpointError(f"Tokenizer {path!r} has no token {token!r}, which its tokenizer config names.")
    return token_id


def _bpe_vocabulary(files):
    """(vocab dict, merges list of pairs) from a tokenizer.json, or a vocab.json and merges.txt."""
    if len(files) == 1:
        model = read_json_object(files[0], "tokenizer").get("model") or {}
        if model.get("type", "BPE") != "BPE" or not isinstance(model.get("vocab"), dict):
            raise CheckpointError(f"Tokenizer {files[0]!r} holds no BPE model (model.type {model.get('type')!r}).")
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        return model["vocab"], merges
    vocab = read_json_object(files[0], "vocabulary")
    with open(files[1], encoding="utf-8") as file:
        merges = [tuple(line.split()) for line in file.read().split("\n")
                  if line.strip() and not line.startswith("#version")]
    return vocab, merges


def _clip_backend(files, specials):
    from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = _bpe_vocabulary(files)
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, continuing_subword_prefix="", end_of_word_suffix="</w>",
                            fuse_unk=False, unk_token=specials["unk_token"]))
    backend.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    backend.add_special_tokens([AddedToken(token, special=True) for token in dict.fromkeys(specials.values())])
    bos, eos = specials["bos_token"], specials["eos_token"]
    backend.post_processor = processors.RobertaProcessing(
        (eos, _token_id(backend, eos, files[0])), (bos, _token_id(backend, bos, files[0])), False, False)
    return backend


def _siglip2_backend(path, config, specials):
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = _bpe_vocabulary([path])
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=True, unk_token=specials["unk_token"], dropout=None,
                            byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(" ", "▁")])
    added = [_token_text(token) for token in (config.get("added_tokens_decoder") or {}).values()]
    backend.add_special_tokens([AddedToken(token, special=True)
                                for token in dict.fromkeys([*specials.values(), *added]) if token])
    if "add_bos_token" in config or "add_eos_token" in config:
        bos, eos = specials["bos_token"], specials["eos_token"]
        first = [bos] if config.get("add_bos_token") else []
        last = [eos] if config.get("add_eos_token") else []
        single = " ".join([f"{token}:0" for token in first] + ["$A:0"] + [f"{token}:0" for token in last])
        backend.post_processor = processors.TemplateProcessing(
            single=single, special_tokens=[(token, _token_id(backend, token, path)) for token in first + last])
    else:
        backend.post_processor = Tokenizer.from_file(path).post_processor
    return backend


def _sentencepiece(path, config, specials):
    """SiglipTokenizer's encoding: (encode(texts, truncate), pad id)."""
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor()
    model.Load(path)
    lower = config.get("do_lower_case", True)
    unk, eos = specials["unk_token"], specials["eos_token"]
    added = [_token_text(token) for token in (config.get("added_tokens_decoder") or {}).values()]
    special_ids = {}
    for token in dict.fromkeys([*specials.values(), *added]):
        if token:
            token_id = model.piece_to_id(token)
            if token_id == model.unk_id() and token != unk:
                raise CheckpointError(f"SentencePiece model {path!r} has no piece {token!r}, which its tokenizer "
                                      "config names.")
            special_ids[token] = token_id
    splitter = re.compile("(" + "|".join(re.escape(t) for t in sorted(special_ids, key=len, reverse=True)) + ")")
    unk_length = len(model.encode(unk, out_type=str))
    punctuation = str.maketrans("", "", string.punctuation)

    def pieces(chunk):
        if lower:
            chunk = chunk.lower()
        chunk = re.sub(r"\s+", " ", chunk.translate(punctuation)).strip()
        found = model.encode(unk + chunk, out_type=str)
        return found[unk_length:] if len(found) >= unk_length else found

    def one(text):
        tokens = []
        for chunk in splitter.split("▁" + text.replace("▁", " ")):
            if chunk in special_ids:
                tokens.append(chunk)
            elif chunk:
                tokens += pieces(chunk)
        if len(tokens) > 1 and tokens[0] == "▁" and tokens[1] in special_ids:
            tokens = tokens[1:]
        ids = [special_ids[token] if token in special_ids else model.piece_to_id(token) for token in tokens]
        return ids if ids and ids[-1] == special_ids[eos] else ids + [special_ids[eos]]

    def encode(texts, truncate):
        rows = [one(text) for text in texts]
        if truncate:
            rows = [row if len(row) <= SIGLIP_TEXT_LENGTH else row[:SIGLIP_TEXT_LENGTH - 1] + [special_ids[eos]]
                    for row in rows]
        return rows

    return encode, special_ids[specials["pad_token"]]

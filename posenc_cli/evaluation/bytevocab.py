"""The tiny passkey model's byte-fallback vocabulary, SentencePiece style (stdlib only).

Ids: 0 ``<unk>``, 1 ``<s>`` (BOS), 2 ``</s>`` (EOS), 3..258 the byte tokens ``<0x00>``..``<0xFF>``, 259 ``▁``
(U+2581, SentencePiece's space). :func:`encode` is BOS followed by one id per UTF-8 byte: 259 for a space, else
``byte + 3``. This is what llama.cpp's SPM tokenizer computes for the GGUF vocabulary written by
``posenc_cli.experiment.export`` (no piece but ``▁`` is a normal token, so every other byte falls back to its byte
token) and what the Hugging Face ``tokenizer.json`` written beside it computes (BPE, no merges, byte fallback,
spaces replaced by ``▁`` without a prefix).
"""

from __future__ import annotations

from typing import Any

UNK, BOS, EOS = 0, 1, 2
BYTE0 = 3
SPACE = 259
SPACE_PIECE = "\u2581"
VOCAB_SIZE = 260

#: llama.cpp's ``enum llama_token_type`` values (``tokenizer.ggml.token_type``).
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6


def pieces() -> list[str]:
    """The 260 token strings in id order."""
    return ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), SPACE_PIECE]


def token_types() -> list[int]:
    return [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL, *([TYPE_BYTE] * 256), TYPE_NORMAL]


def encode(text: str, *, bos: bool = True) -> list[int]:
    """BOS (unless ``bos`` is false), then 259 for each space byte and ``byte + 3`` for every other UTF-8 byte."""
    ids = [BOS] if bos else []
    ids.extend(SPACE if b == 0x20 else b + BYTE0 for b in text.encode("utf-8"))
    return ids


def count(text: str) -> int:
    """``len(encode(text))``: the token count with BOS, as ``build_prompt`` wants it."""
    return len(text.encode("utf-8")) + 1


def decode(ids: list[int]) -> str:
    """The inverse of :func:`encode`: control and unknown tokens are dropped, bytes decoded as UTF-8 (replace)."""
    out = bytearray()
    for i in ids:
        if i == SPACE:
            out.append(0x20)
        elif BYTE0 <= i < BYTE0 + 256:
            out.append(i - BYTE0)
        elif not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"token id {i} is outside the vocabulary (0..{VOCAB_SIZE - 1})")
    return out.decode("utf-8", errors="replace")


def hf_tokenizer_json() -> dict[str, Any]:
    """A ``tokenizers`` ``tokenizer.json`` (Llama-2 style BPE with byte fallback, no merges) for this vocabulary."""
    names = pieces()
    special = [{"id": i, "content": names[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in (UNK, BOS, EOS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE_PIECE},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE_PIECE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {name: i for i, name in enumerate(names)}, "merges": []},
    }


def hf_tokenizer_config() -> dict[str, Any]:
    """``tokenizer_config.json`` for :func:`hf_tokenizer_json`."""
    names = pieces()
    return {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
        "add_bos_token": True, "add_eos_token": False, "add_prefix_space": False, "legacy": False,
        "clean_up_tokenization_spaces": False, "model_max_length": 256,
        "added_tokens_decoder": {str(i): {"content": names[i], "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
                                 for i in (UNK, BOS, EOS)},
    }

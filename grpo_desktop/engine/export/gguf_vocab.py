"""A Hugging Face tokenizer read into the arrays a GGUF file carries (`tokenizer.ggml.*`).

Three tokenizer kinds have a GGUF form that llama.cpp, Ollama and LM Studio tokenize exactly as
transformers does (`read_vocab` says how each is written): byte-level BPE (GPT-2 style; Llama 3,
Qwen2), SentencePiece (Llama 2, Mistral, TinyLlama style) and one token per character (the
built-in demo model's). Everything is read through `transformers`/`tokenizers` (the
tokenizer.json state and the tokenizer's behaviour), not by parsing files by hand; anything else
(word-level over words, WordPiece) raises a `ModelError` naming what is supported. Embedding rows
beyond the tokenizer's ids become unused "[PAD<id>]" tokens, as llama.cpp needs one token per row.

Not here: the tensors (export/gguf_tensors.py) and the file (export/gguf.py).
Try it: the example in export/gguf.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gguf import TokenType

from grpo_desktop.engine.errors import ModelError

SUPPORTED_TOKENIZERS = (
    "byte-level BPE (GPT-2 style, as in Llama 3 and Qwen2), SentencePiece (BPE with byte "
    "fallback or Unigram, as in Llama 2, Mistral and TinyLlama) and one-token-per-character "
    "tokenizers (the built-in demo's)"
)

# The pre-tokenizer regexes llama.cpp knows for byte-level BPE, as the tokenizers library
# spells them, by the `tokenizer.ggml.pre` name that selects each one in llama.cpp.
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_WORDS_AND_SPACES = (
    r"[^\r\n\p{L}\p{N}]?\p{L}+|{digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_REGEXES = {
    "gpt-2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama-bpe": _CONTRACTIONS + "|" + _WORDS_AND_SPACES.replace("{digits}", r"\p{N}{1,3}"),
    "qwen2": _CONTRACTIONS + "|" + _WORDS_AND_SPACES.replace("{digits}", r"\p{N}"),
}
# Text that tells the three apart: digit runs (1-3 digits vs one), contractions in capitals,
# punctuation before letters, runs of spaces and newlines, tabs, non-Latin letters.
PROBE_TEXT = (
    "Hello world! I'm here, DON'T we've 12345 apples + 7 = 12352.\n\n  \tdef f(x):\n"
    "    return x**2  # ok   \n¿Qué? 中文字符 3.14159 a1b22c333d4444 $100,000 (x) [y] {z}\r\n"
    "   trailing spaces   "
)


@dataclass
class Vocab:
    """What `tokenizer.ggml.*` holds, plus the facts the Modelfile needs."""

    model: str  # "gpt2" or "llama"
    pre: str | None  # gpt2 only: the pre-tokenizer's llama.cpp name
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None  # llama only
    merges: list[str] = field(default_factory=list)  # gpt2 only: "a b"
    bos_id: int | None = None
    eos_ids: list[int] = field(default_factory=list)  # every EOS, the tokenizer's first
    unk_id: int | None = None
    pad_id: int | None = None
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False  # llama only


def _component_types(node: dict | None) -> list[str]:
    """The types of a tokenizer.json component and of every member of its Sequence."""
    if not node:
        return []
    found = [node.get("type", "")]
    for key in ("pretokenizers", "decoders", "normalizers"):
        for member in node.get(key) or []:
            found += _component_types(member)
    return found


def _pre_tokenizer_name(backend, ignore_merges: bool, text: str = PROBE_TEXT) -> str:
    """The llama.cpp name of the regex whose split of `text` equals the tokenizer's own split.
    llama.cpp's "llama-bpe" also takes a word that is a whole token as that token without
    merging ("ignore_merges", as Llama 3's tokenizer.json says); "smaug-bpe" is the same regex
    with the merges always applied."""
    import regex

    if backend.pre_tokenizer is None:
        raise ModelError(_unsupported("a byte-level BPE tokenizer without a pre-tokenizer"))
    ours = [text[a:b] for _, (a, b) in backend.pre_tokenizer.pre_tokenize_str(text)]
    for name, pattern in PRE_TOKENIZER_REGEXES.items():
        if regex.findall(pattern, text) == ours:
            return "smaug-bpe" if name == "llama-bpe" and not ignore_merges else name
    raise ModelError(
        "The tokenizer is byte-level BPE, but its pre-tokenizer splits text unlike any that "
        "llama.cpp knows (GPT-2, Llama 3 or Qwen2), so a GGUF file would tokenize prompts "
        "differently from the trained model. Export it as `merged` and use it with transformers."
    )


def _unsupported(what: str) -> str:
    return (
        f"This model's tokenizer is {what}, which has no GGUF form that llama.cpp reads. GGUF "
        f"export supports {SUPPORTED_TOKENIZERS}. Export it as `merged` or `adapter` instead."
    )


def _token_list(backend, rows: int) -> tuple[list[str], dict[int, object]]:
    """Token texts by id, padded to `rows`; and the added tokens by id."""
    vocab = backend.get_vocab(with_added_tokens=True)
    added = backend.get_added_tokens_decoder()
    n_ids = max(vocab.values()) + 1 if vocab else 0
    if n_ids > rows:
        raise ModelError(
            f"The tokenizer has {n_ids} token ids but the model's embedding only {rows} rows: "
            "the tokenizer does not belong to this model. Save the model with its own tokenizer."
        )
    tokens: list[str | None] = [None] * rows
    for text, token_id in vocab.items():
        tokens[token_id] = text
    return [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)], added


def _types(tokens: list[str], added: dict, vocab_ids: set[int], byte_tokens: bool) -> list[int]:
    types = []
    for i, text in enumerate(tokens):
        if i in added:
            kind = TokenType.CONTROL if added[i].special else TokenType.USER_DEFINED
        elif i not in vocab_ids:
            kind = TokenType.UNUSED
        elif byte_tokens and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            kind = TokenType.BYTE
        else:
            kind = TokenType.NORMAL
        types.append(int(kind))
    return types


def _spm_scores(model: dict, tokens: list[str]) -> list[float]:
    """Scores for llama.cpp's SentencePiece merging (highest first)."""
    if model["type"] == "Unigram":
        scores = [0.0] * len(tokens)
        for i, (_, score) in enumerate(model["vocab"]):
            scores[i] = float(score)
        return scores
    index = {text: i for i, text in enumerate(tokens)}
    # A piece no merge makes (a character, a byte, a special) is never the result of a merge;
    # a longer one that no merge makes gets a score that never wins one.
    scores = [0.0 if len(t) == 1 or t.startswith(("<0x", "[PAD")) else -1e9 for t in tokens]
    ranked: set[int] = set()
    for rank, merge in enumerate(model["merges"]):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        piece = index.get(left + right)
        if piece is not None and piece not in ranked:
            ranked.add(piece)
            scores[piece] = -float(rank + 1)
    return scores


def _special_ids(tok, generation: dict) -> dict:
    """bos/eos/unk/pad ids from the tokenizer, then generation_config.json."""
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    extra = generation.get("eos_token_id")
    for token_id in [extra] if isinstance(extra, int) else extra or []:
        if token_id not in eos:
            eos.append(token_id)
    bos = tok.bos_token_id if tok.bos_token_id is not None else generation.get("bos_token_id")
    pad = tok.pad_token_id if tok.pad_token_id is not None else generation.get("pad_token_id")
    encoded = tok("a", add_special_tokens=True)["input_ids"]
    return dict(
        bos_id=bos,
        eos_ids=eos,
        unk_id=tok.unk_token_id,
        pad_id=pad,
        add_bos=bool(encoded) and bos is not None and encoded[0] == bos,
        add_eos=bool(eos) and bool(encoded) and encoded[-1] in eos,
    )


def _one_token_per_character(backend, model: dict, added: dict) -> bool:
    """A word-level tokenizer whose words are single characters (the built-in demo's)."""
    if backend.pre_tokenizer is None:
        return False
    # Single line breaks only: the demo's Split(".") leaves a run of them as one word (which
    # transformers then reads as <|unk|>; llama.cpp gives one newline token each).
    pieces = backend.pre_tokenizer.pre_tokenize_str("Hello, world! 12 + 3 = 15.\n(a*b) x: ok?")
    if any(len(piece) != 1 for piece, _ in pieces):
        return False
    return all(len(text) == 1 for text, i in model["vocab"].items() if i not in added)


def _characters_as_bpe(tokens: list[str], added: dict, vocab_ids: set[int], specials) -> Vocab:
    """A character-level vocabulary as byte-level BPE: each character's token spelled in
    byte-level form, a character of several UTF-8 bytes joined by merges of its bytes. Merges
    never cross characters, so llama.cpp's pre-tokenizer regex cannot change the result and
    text made of the vocabulary's characters tokenizes as in transformers, except a run of
    line breaks, which the demo's tokenizer reads as one <|unk|> and llama.cpp as one newline
    each; a character outside the vocabulary is <|unk|> there and dropped by llama.cpp."""
    from tokenizers import pre_tokenizers

    spell = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    out, merges = list(tokens), []
    for i, text in enumerate(tokens):
        if i in added or i not in vocab_ids:
            continue
        ((encoded, _),) = spell.pre_tokenize_str(text)
        out[i] = encoded
        for k in range(2, len(encoded) + 1):  # "ÃĹ" (×): "Ã Ĺ"; three bytes: two merges
            merges.append(f"{encoded[: k - 1]} {encoded[k - 1]}")
    vocab = Vocab(
        model="gpt2",
        pre="gpt-2",
        tokens=out,
        types=_types(out, added, vocab_ids, byte_tokens=False),
        merges=merges,
        **specials,
    )
    if vocab.unk_id is not None:
        vocab.types[vocab.unk_id] = int(TokenType.UNKNOWN)
    return vocab


def read_vocab(tok, rows: int, generation: dict | None = None) -> Vocab:
    """The GGUF vocabulary of the loaded fast tokenizer `tok` for an embedding of `rows` rows;
    `generation` is generation_config.json's content (its EOS and BOS ids count too).

    - byte-level BPE: `tokenizer.ggml.model = "gpt2"`, the tokens in their byte-level spelling,
      merges, token types, and `tokenizer.ggml.pre` naming the pre-tokenizer regex llama.cpp
      applies before BPE. Which one is found by behaviour: the tokenizer's own pre-tokenizer
      splits a probe text, and the split is compared with each regex llama.cpp knows (GPT-2,
      Llama 3, Qwen2), so a tokenizer.json spelling the regex differently is still recognised,
      and one that splits otherwise is refused rather than silently mis-split.
    - SentencePiece (BPE with byte fallback or Unigram, "▁" for spaces): `tokenizer.ggml.model
      = "llama"`, pieces, scores and types. For a BPE model the score of a piece is minus the
      rank of the merge that makes it, so llama.cpp's highest-score-first merging picks the same
      pairs as transformers' lowest-rank-first.
    - one token per character (a word-level tokenizer over single characters): written as
      byte-level BPE whose only merges join the UTF-8 bytes of a character.

    Embedding rows beyond the ids (Qwen2.5 has 151,936 rows for 151,665 ids) become unused
    "[PAD<id>]" tokens."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ModelError(_unsupported("a slow (Python-only) tokenizer without a tokenizer.json"))
    state = json.loads(backend.to_str())
    model = state["model"]
    kinds = set(
        _component_types(state.get("pre_tokenizer"))
        + _component_types(state.get("decoder"))
        + _component_types(state.get("normalizer"))
    )
    tokens, added = _token_list(backend, rows)
    vocab_ids = set(backend.get_vocab(with_added_tokens=True).values())
    specials = _special_ids(tok, generation or {})
    if model["type"] == "BPE" and "ByteLevel" in kinds:
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        return Vocab(
            model="gpt2",
            pre=_pre_tokenizer_name(backend, bool(model.get("ignore_merges"))),
            tokens=tokens,
            types=_types(tokens, added, vocab_ids, byte_tokens=False),
            merges=merges,
            **specials,
        )
    spm = (model["type"] == "BPE" and model.get("byte_fallback")) or model["type"] == "Unigram"
    if spm and ({"Metaspace", "Replace", "Prepend"} & kinds):
        first = tok("Hello", add_special_tokens=False)["input_ids"]
        vocab = Vocab(
            model="llama",
            pre=None,
            tokens=tokens,
            types=_types(tokens, added, vocab_ids, byte_tokens=True),
            scores=_spm_scores(model, tokens),
            add_space_prefix=bool(first) and tokens[first[0]].startswith("\u2581"),
            **specials,
        )
        if vocab.unk_id is not None:
            vocab.types[vocab.unk_id] = int(TokenType.UNKNOWN)
        return vocab
    if model["type"] == "WordLevel" and _one_token_per_character(backend, model, added):
        return _characters_as_bpe(tokens, added, vocab_ids, specials)
    described = {
        "WordLevel": "a word-level tokenizer (one token per word)",
        "WordPiece": "a WordPiece tokenizer",
    }.get(model["type"], f"a {model['type']} tokenizer of a kind llama.cpp does not read")
    raise ModelError(_unsupported(described))

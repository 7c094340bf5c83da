"""Sampling completions and scoring their tokens: one batched decode, then per-token log-probs.

`generate_completions` samples all B·G completions of a step in one batched decode (sampler.py)
and returns the completion tokens with their mask (padding and everything after the first EOS
excluded); a model whose forward does not take the sampler's arguments goes through `generate`.
`token_logps` (logps.py, imported here) recomputes log-probs of those tokens under any module
(policy, old policy, reference) at the sampling temperature, holding one chunk of logits at a
time and running each group's shared prompt once.

Does not compute rewards or losses. Try it: tests/engine/sampling/test_rollout.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from grpo_desktop.engine.data.dataset import build_prompt
from grpo_desktop.engine.ops.kernels import fast_linear
from grpo_desktop.engine.sampling.logps import token_logps
from grpo_desktop.engine.sampling.sampler import lora_merged, sample_tokens

__all__ = ["Completions", "generate_completions", "token_logps", "tokenize_prompts"]


@dataclass
class Completions:
    prompt_ids: torch.Tensor  # (N, P) left-padded
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, C)
    completion_mask: torch.Tensor  # (N, C) float, 1 up to and including the first EOS
    truncated: torch.Tensor  # (N,) bool, no EOS within max_new_tokens
    texts: list[str]
    # (N, C) float32 entropy of the distribution each token was drawn from (sampler.py), when
    # asked for and the sampler ran (not `generate`'s fallback); 0 after a row's end
    entropy: torch.Tensor | None = None

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)  # (N,)


def added_bos(tokenizer) -> int | None:
    """The BOS id this tokenizer puts in front of every text it encodes (Llama, Gemma, Mistral
    tokenizers do; Qwen's and GPT-2's do not), or None."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return None
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return bos if tokenizer("a")["input_ids"][:1] == [bos] and plain[:1] != [bos] else None


def prompt_token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """Each prompt's ids as the model was trained to see them: the tokenizer's own BOS exactly
    once (chat templates that write it keep theirs; plain prompts get it), no other special
    token added (some tokenizers would append an EOS, which must not end a prompt)."""
    if not texts:
        return []
    rows = tokenizer(texts, add_special_tokens=False)["input_ids"]
    bos = added_bos(tokenizer)
    if bos is None:
        return rows
    return [row if row[:1] == [bos] else [bos, *row] for row in rows]


TAIL_MARGIN = 16  # tokens read beyond the limit: the first ones of a cut-out end may differ
CHARS_PER_TOKEN = 8  # the first guess of how many characters hold a token (then it grows)


def tail_token_ids(tokenizer, text: str, keep: int) -> list[int] | None:
    """The last `keep` token ids of `text` (no special token added), found by tokenizing only
    its end, for a text far longer than that; None when it is not (tokenize it whole). A 5 MB
    prompt cut to 512 tokens then costs milliseconds, not the seconds of tokenizing all of it.
    The end is read with TAIL_MARGIN tokens to spare, so the tokens kept are the whole text's
    (tokenization is local: only the first tokens of a cut-out piece can differ)."""
    chars = CHARS_PER_TOKEN * (keep + TAIL_MARGIN)
    while 2 * chars < len(text):
        ids = tokenizer(text[-chars:], add_special_tokens=False)["input_ids"]
        if len(ids) >= keep + TAIL_MARGIN:
            return ids[len(ids) - keep :]
        chars *= 4
    return None


def tokenize_prompts(tokenizer, texts: list[str], max_length: int, device: torch.device):
    """Left-padded prompt ids and mask; over-long prompts lose their beginning (after the BOS),
    not their question. Of a prompt far over the limit only the end is tokenized
    (tail_token_ids)."""
    tokenizer.padding_side = "left"
    bos = added_bos(tokenizer)
    tails = [tail_token_ids(tokenizer, text, max_length) for text in texts]
    whole = iter(prompt_token_ids(tokenizer, [t for t, cut in zip(texts, tails) if cut is None]))
    rows = []
    for tail in tails:
        row = next(whole) if tail is None else tail if bos is None else [bos, *tail]
        if len(row) > max_length:
            head = row[:1] if bos is not None and row[:1] == [bos] else []
            row = head + row[len(row) - max_length + len(head) :]
        rows.append(row)
    P = max(1, max((len(row) for row in rows), default=1))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), P), pad, dtype=torch.long)  # (N, P)
    mask = torch.zeros((len(rows), P), dtype=torch.long)  # (N, P)
    for i, row in enumerate(rows):
        if row:
            ids[i, P - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, P - len(row) :] = 1
    return ids.to(device), mask.to(device)  # (N, P), (N, P)


BYTE_MARGIN = 8  # SentencePiece's dummy prefix can add a token to a text's byte count


def overlong_prompts(
    tokenizer,
    problems: list[str],
    max_length: int,
    system_prompt: str = "",
    chunk: int = 256,
    example: tuple[str, str] | None = None,
    prefix: str = "",
) -> list[tuple[int, int]]:
    """(index, token count) of each problem whose prompt is longer than `max_length` tokens,
    which `tokenize_prompts` would cut. Tokens never outnumber UTF-8 bytes (but for a dummy
    prefix), so only problems with more bytes than the limit less the template's are templated
    and tokenized: checking a whole dataset costs little. A prompt of more than
    EXACT_COUNT_CHARS characters is counted from its end's tokens per character (an estimate,
    exact for it when that says it fits): tokenizing a 5 MB prompt whole takes seconds."""
    template = _bytes(build_prompt(tokenizer, "", system_prompt, example, prefix))
    room = max_length - template - BYTE_MARGIN
    suspects = [i for i, p in enumerate(problems) if len(p) > room // 4 and _bytes(p) > room]
    out = []
    for s in range(0, len(suspects), chunk):
        part = suspects[s : s + chunk]
        texts = [build_prompt(tokenizer, problems[i], system_prompt, example, prefix) for i in part]
        counts = [_estimated_count(tokenizer, text, max_length) for text in texts]
        exact = [text for text, n in zip(texts, counts) if n is None]
        whole = iter(prompt_token_ids(tokenizer, exact))
        counts = [len(next(whole)) if n is None else n for n in counts]
        out += [(i, n) for i, n in zip(part, counts) if n > max_length]
    return out


EXACT_COUNT_CHARS = 200_000  # longer prompts' token counts are estimated (overlong_prompts)


def _estimated_count(tokenizer, text: str, max_length: int) -> int | None:
    """About how many tokens a huge `text` has (its last EXACT_COUNT_CHARS // 4 characters' tokens
    per character); None when it is not huge, or the estimate is not over the limit."""
    if len(text) <= EXACT_COUNT_CHARS:
        return None
    sample = text[-(EXACT_COUNT_CHARS // 4) :]
    n = len(tokenizer(sample, add_special_tokens=False)["input_ids"])
    estimate = round(n * len(text) / len(sample))
    return estimate if estimate > max_length else None


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def stop_ids(model, tokenizer) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS and each id the model's
    generation_config lists (Llama-3, Qwen2.5 and Gemma instruct models end a turn with ids the
    tokenizer does not call its EOS: <|eot_id|> and <|end_of_text|>, <|im_end|> and
    <|endoftext|>), in that order, each once."""
    config = getattr(model, "generation_config", None)
    ids: list[int] = []
    for source in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        for i in [source] if isinstance(source, int) else source or []:
            if int(i) not in ids:
                ids.append(int(i))
    return ids


def completion_mask(
    completion_ids: torch.Tensor, eos_id: int | list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask of real completion tokens (through the first EOS, any of `eos_id` when it is a list)
    and the truncated flag per row."""
    stops = torch.tensor([eos_id] if isinstance(eos_id, int) else eos_id, dtype=torch.long)
    is_eos = torch.isin(completion_ids, stops.to(completion_ids.device))  # (N, C)
    has_eos = is_eos.any(dim=1)  # (N,)
    C = completion_ids.size(1)
    first_eos = torch.where(
        has_eos, is_eos.int().argmax(dim=1), torch.full_like(has_eos, C, dtype=torch.long)
    )
    positions = torch.arange(C, device=completion_ids.device).expand_as(completion_ids)  # (N, C)
    mask = (positions <= first_eos.unsqueeze(1)).float()  # (N, C)
    return mask, ~has_eos


@torch.no_grad()
def generate_completions(
    model,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    min_new_tokens: int = 0,
    on_token: Callable[[int, torch.Tensor], bool | None] | None = None,
    with_entropy: bool = False,
    decode_dtype: torch.dtype | None = None,
) -> Completions:
    """Sample one completion per row of prompt_ids (repeat prompts G times before calling).
    `on_token(t, tokens)`: see sampler.sample_tokens (streaming, and False to stop early; models
    that fall back to `generate` report their tokens only at the end). `with_entropy`: also each
    token's sampling entropy (Completions.entropy; None on `generate`'s fallback).
    `decode_dtype`: bfloat16 sampling (sampling/precision.py; the lean CPU decode only)."""
    was_training = model.training
    model.eval()
    eos_id, pad_id = stop_ids(model, tokenizer), tokenizer.pad_token_id
    args = dict(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        greedy=greedy,
        min_new_tokens=min_new_tokens,
    )
    entropy: list | None = [] if with_entropy else None
    try:
        with lora_merged(model):
            try:
                completion_ids = sample_tokens(
                    model,
                    prompt_ids,
                    prompt_mask,
                    eos_id=eos_id,
                    pad_id=pad_id,
                    on_token=on_token,
                    entropy=entropy,
                    decode_dtype=decode_dtype,
                    **args,
                )  # (N, C')
            except TypeError:  # a forward without position_ids / logits_to_keep: use generate
                with fast_linear(prompt_ids.device):
                    completion_ids = _hf_generate(
                        model, prompt_ids, prompt_mask, eos_id, pad_id, **args
                    )
                if on_token is not None:
                    for t in range(completion_ids.size(1)):
                        if on_token(t, completion_ids[:, t]) is False:
                            break
    finally:
        model.train(was_training)
    mask, truncated = completion_mask(completion_ids, eos_id)
    completion_ids = completion_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    entropies = entropy[0] * mask if entropy else None  # (N, C')
    return Completions(prompt_ids, prompt_mask, completion_ids, mask, truncated, texts, entropies)


def _hf_generate(model, prompt_ids, prompt_mask, eos_id, pad_id, *, greedy, **args) -> torch.Tensor:
    """`generate` sampling exactly as the run says: the loss scores the plain softmax at the
    run's temperature and top-p, so nothing from the model's generation_config.json may change
    the distribution (a Qwen2.5 instruct model's sets repetition_penalty 1.1, top_k 20 ...)."""
    from transformers import GenerationConfig

    sampling = {} if greedy else {"temperature": args["temperature"], "top_p": args["top_p"]}
    config = GenerationConfig(
        do_sample=not greedy,
        max_new_tokens=args["max_new_tokens"],
        min_new_tokens=args["min_new_tokens"],
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        use_cache=True,
        top_k=0,  # generate's own default is 50
        num_beams=1,
        **sampling,
    )
    with _without_model_defaults(model):
        out = model.generate(
            input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config
        )  # (N, P + C')
    return out[:, prompt_ids.size(1) :]  # (N, C')


@contextlib.contextmanager
def _without_model_defaults(model) -> Iterator[None]:
    """`generate` fills every setting its config leaves unset from model.generation_config
    (transformers 5): blank that one for the call (in place, since wrappers such as peft's share
    the object), and put it back afterwards."""
    from transformers import GenerationConfig

    current = getattr(model, "generation_config", None)
    if current is None:
        yield
        return
    saved = dict(current.__dict__)
    current.__dict__.update({k: v for k, v in GenerationConfig().__dict__.items() if k in saved})
    try:
        yield
    finally:
        current.__dict__.clear()
        current.__dict__.update(saved)

"""Sampling completions and scoring their tokens: one batched generate, then per-token log-probs.

`generate_completions` samples all B·G completions of a step in one batched decode (sampler.py) and returns the
completion tokens with their mask (padding and everything after the first EOS excluded).
`token_logps` recomputes log-probs of those tokens under any module (policy, old policy, reference)
from logits divided by the sampling temperature, keeping logits only for completion positions and
processing rows in chunks so the full-vocabulary logits never exist for the whole batch at once.
Rows that repeat a prompt (a group's G rows) run it through the model once and share its keys and
values: with a 40-token prompt and 64-token completions that is a third fewer token-passes in the
reference pass and in the policy's forward and backward.

Does not compute rewards or losses. Try it: see tests/test_rollout.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_desktop.engine.data import build_prompt
from grpo_desktop.engine.kernels import fast_linear
from grpo_desktop.engine.sampler import (
    CACHE,
    expand_rows,
    lora_merged,
    out_cache,
    prompt_runs,
    sample_tokens,
)

LOGITS_BUDGET = 2**25  # elements of (rows, C, V) float logits materialised at once (~128 MB fp32)


@dataclass
class Completions:
    prompt_ids: torch.Tensor  # (N, P) left-padded
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, C)
    completion_mask: torch.Tensor  # (N, C) float, 1 up to and including the first EOS
    truncated: torch.Tensor  # (N,) bool, no EOS within max_new_tokens
    texts: list[str]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)  # (N,)


def tokenize_prompts(tokenizer, texts: list[str], max_length: int, device: torch.device):
    """Left-padded prompt ids and mask; over-long prompts lose their beginning, not their question."""
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    enc = tokenizer(
        texts,
        return_tensors="pt",
        padding=True,
        truncation=True,
        max_length=max_length,
        add_special_tokens=False,
    )
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)  # (N, P), (N, P)


BYTE_MARGIN = 8  # SentencePiece's dummy prefix can add a token to a text's byte count


def overlong_prompts(
    tokenizer, problems: list[str], max_length: int, system_prompt: str = "", chunk: int = 256
) -> list[tuple[int, int]]:
    """(index, token count) of each problem whose prompt is longer than `max_length` tokens,
    which `tokenize_prompts` would cut. Tokens never outnumber UTF-8 bytes (but for a dummy
    prefix), so only problems with more bytes than the limit less the template's are templated
    and tokenized: checking a whole dataset costs little."""
    template = _bytes(build_prompt(tokenizer, "", system_prompt))
    room = max_length - template - BYTE_MARGIN
    suspects = [i for i, p in enumerate(problems) if len(p) > room // 4 and _bytes(p) > room]
    out = []
    for s in range(0, len(suspects), chunk):
        part = suspects[s : s + chunk]
        texts = [build_prompt(tokenizer, problems[i], system_prompt) for i in part]
        enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
        out += [(i, len(ids)) for i, ids in zip(part, enc) if len(ids) > max_length]
    return out


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def completion_mask(completion_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask of real completion tokens (through the first EOS) and the truncated flag per row."""
    is_eos = completion_ids == eos_id  # (N, C)
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
) -> Completions:
    """Sample one completion per row of prompt_ids (repeat prompts G times before calling)."""
    was_training = model.training
    model.eval()
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    args = dict(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        greedy=greedy,
        min_new_tokens=min_new_tokens,
    )
    try:
        with lora_merged(model):
            try:
                completion_ids = sample_tokens(
                    model, prompt_ids, prompt_mask, eos_id=eos_id, pad_id=pad_id, **args
                )  # (N, C')
            except TypeError:  # a forward without position_ids / logits_to_keep: use generate
                with fast_linear():
                    completion_ids = _hf_generate(
                        model, prompt_ids, prompt_mask, eos_id, pad_id, **args
                    )
    finally:
        model.train(was_training)
    mask, truncated = completion_mask(completion_ids, eos_id)
    completion_ids = completion_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Completions(prompt_ids, prompt_mask, completion_ids, mask, truncated, texts)


def _hf_generate(model, prompt_ids, prompt_mask, eos_id, pad_id, *, greedy, **args) -> torch.Tensor:
    sampling = {} if greedy else {"temperature": args["temperature"], "top_p": args["top_p"]}
    out = model.generate(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        do_sample=not greedy,
        max_new_tokens=args["max_new_tokens"],
        min_new_tokens=args["min_new_tokens"],
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        use_cache=True,
        top_k=None,
        **sampling,
    )  # (N, P + C')
    return out[:, prompt_ids.size(1) :]  # (N, C')


def token_logps(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (N, C) of completion_ids under `model` and optionally entropies (N, C).

    Gradients flow when called outside no_grad. Position ids follow the attention mask, as in
    generation, so left-padded rows see the same positions they were sampled with.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P + C)
    attention = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)  # (N, P + C)
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (N, P + C)
    N, C = completion_ids.shape
    vocab = getattr(model.config, "vocab_size", 32000)
    rows = max(1, LOGITS_BUDGET // max(1, C * vocab))
    share = _can_share_prompts(model)
    logps, entropies = [], []
    for start in range(0, N, rows):
        sl = slice(start, start + rows)
        logits = None
        with fast_linear():  # float32 CPU products in oneDNN where it is faster (kernels.py)
            if share:
                logits = _logits_sharing_prompts(
                    model, prompt_ids[sl], attention[sl], position_ids[sl], completion_ids[sl]
                )  # (n, C, V) or None
            if logits is None:
                logits = model(
                    input_ids=input_ids[sl],
                    attention_mask=attention[sl],
                    position_ids=position_ids[sl],
                    logits_to_keep=C + 1,
                    use_cache=False,
                ).logits[:, :-1, :]  # (n, C, V): position t predicts completion token t
        logits = logits.float() / temperature
        log_norm = torch.logsumexp(logits, dim=-1)  # (n, C)
        picked = logits.gather(-1, completion_ids[sl].unsqueeze(-1)).squeeze(-1)  # (n, C)
        logps.append(picked - log_norm)
        if with_entropy:
            with torch.no_grad():
                logp_all = logits - log_norm.unsqueeze(-1)  # (n, C, V)
                entropies.append(-(logp_all.exp() * logp_all).sum(-1))  # (n, C)
    entropy = torch.cat(entropies) if with_entropy else None
    return torch.cat(logps), entropy  # (N, C), (N, C) | None


def _can_share_prompts(model) -> bool:
    """A KV cache cannot carry gradients through checkpointed layers (transformers drops it)."""
    if not (torch.is_grad_enabled() and model.training):
        return True
    return not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def _logits_sharing_prompts(model, prompt_ids, attention, position_ids, completion_ids):
    """Completion logits (n, C, V) with each distinct prompt run through the model once.

    The G rows of a group share their prompt: its keys and values are computed for one row and
    copied to the others (gradients flow back through the copy), then only the completion tokens
    go through the model. Same result as one pass over prompt + completion, up to float rounding,
    for (P + C) / (P / G + C) times fewer token-passes. None when no prompt repeats or the model's
    forward does not take a cache this way (the caller then runs the plain pass).
    """
    P, C = prompt_ids.size(1), completion_ids.size(1)
    runs = prompt_runs(prompt_ids, attention[:, :P])
    if runs is None:
        return None
    first, owner = runs  # (U,), (n,)
    try:
        out = model(
            input_ids=prompt_ids[first],
            attention_mask=attention[first, :P],
            position_ids=position_ids[first, :P],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out_cache(out)
        if cache is None or not expand_rows(cache, owner):  # (U, ...) -> (n, ...) per layer
            return None
        head = out.logits[owner, -1:, :]  # (n, 1, V): the last prompt position predicts token 0
        if C == 1:
            return head
        rest = model(
            input_ids=completion_ids[:, :-1],
            attention_mask=attention[:, :-1],
            position_ids=position_ids[:, P:-1],
            use_cache=True,
            **{CACHE: cache},
        ).logits  # (n, C - 1, V)
    except TypeError:  # a forward without position_ids / logits_to_keep / a cache
        return None
    return torch.cat([head, rest], dim=1)  # (n, C, V)

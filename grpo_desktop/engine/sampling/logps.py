"""Per-token log-probs of completions under a model, in memory that does not grow with the vocab.

`token_logps` scores completion tokens under any module (the policy, the old policy, the
reference) at the sampling temperature. It runs the model's decoder for the final hidden states
and turns them into log-probs with `fused_head.head_logps` a chunk of tokens at a time, so the
logits alive at any time are one chunk's (≈64 MiB) in the forward and the backward, whatever the
batch; all of them would take 74 MiB per 128-token row at Qwen's 151,936-token vocabulary. Rows
that repeat a prompt (a group's G rows) run it through the decoder once and share its keys and
values (gradients flow back through the copy), the beginning that all the batch's prompts share
(a system prompt, a chat template's header) once for all of them (common_start.py); where
their answers' lengths differ enough, the answers then go through packed into one row after it,
without padding (packing.py). Masked completion positions (after the first EOS) get log-prob 0,
entropy 0 and no gradient: the loss never reads them. A model whose logits are not
`output_embeddings(decoder(x))` (soft-capped or scaled logits; checked once per model) is scored
through its own forward, a few rows at a time, its logits memory growing with the vocabulary
again. Does not sample (rollout.py) or compute losses (grpo/loss.py).

Try it: tests/engine/ops/test_fused_logps.py, tests/engine/sampling/test_packed_logps.py.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

from grpo_desktop.engine.ops.bf16_products import bf16_products
from grpo_desktop.engine.ops.fused_head import head_logps, routing
from grpo_desktop.engine.sampling import packing
from grpo_desktop.engine.sampling.common_start import prompt_pass
from grpo_desktop.engine.sampling.decoders import CACHE, out_cache
from grpo_desktop.engine.sampling.packing import PackPlan, token_costs
from grpo_desktop.engine.sampling.sampler import expand_rows, prompt_runs

PLAIN_LOGITS_BUDGET = 2**25  # the plain path: elements of (rows, C, V) logits at once (~128 MB)
# Config fields of models that change their logits after the output layer.
LOGIT_CHANGES = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")
_split: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # base model -> splits cleanly


def token_logps(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (N, C) float32 of completion_ids under `model` and optionally their
    entropies (N, C), 0 where completion_mask is 0. `chunk`: tokens per chunk of logits (default
    from the vocabulary, fused_head.CHUNK_ELEMENTS).

    Gradients flow when called outside no_grad. Position ids follow the attention mask, as in
    generation, so left-padded rows see the same positions they were sampled with.
    """
    attention = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)  # (N, P+C)
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)  # (N, P + C)
    parts = decoder_and_head(model)
    if parts is None:
        return _plain_logps(
            model, prompt_ids, completion_ids, attention, position_ids, temperature, with_entropy
        )
    decoder, head = parts
    keep = completion_mask > 0  # (N, C)
    with routing(prompt_ids.device):  # float32 CPU products in oneDNN where faster (kernels.py)
        kept = hidden = None
        share = _can_share_prompts(model)
        runs = prompt_runs(prompt_ids, prompt_mask)  # rows repeating a prompt, or None
        if runs is not None:
            kept = _kept_hidden_packed(
                decoder, prompt_ids, attention, position_ids, completion_ids, keep, runs, share
            )  # (M, H) or None
        if runs is not None and kept is None and share:
            hidden = _hidden_sharing_prompts(
                decoder, prompt_ids, attention, position_ids, completion_ids, runs
            )  # (N, C, H) or None
        if kept is None and hidden is None:
            hidden = _hidden_plain(decoder, prompt_ids, completion_ids, attention, position_ids)
    if kept is None:
        kept = hidden[keep]  # (M, H)
    with _autocast_like_forward(model):
        logp, entropy = head_logps(
            head, kept, completion_ids[keep], temperature, with_entropy, chunk
        )  # (M,), (M,) | None
    zeros = torch.zeros(keep.shape, dtype=torch.float32, device=keep.device)  # (N, C)
    logps = zeros.index_put((keep,), logp)
    if entropy is not None:
        entropy = zeros.index_put((keep,), entropy)
    return logps, entropy  # (N, C), (N, C) | None


def decoder_and_head(model):
    """(decoder, output layer) of a causal LM (a peft model's base model) when its logits are
    exactly output_layer(decoder(...).last_hidden_state), else None. Checked once per model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        decoder, head = base.get_decoder(), base.get_output_embeddings()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if decoder is None or head is None or decoder is base:
        return None
    if base not in _split:
        _split[base] = _splits_cleanly(base, decoder, head)
    return (decoder, head) if _split[base] else None


def _splits_cleanly(base, decoder, head) -> bool:
    """The model's logits on a few tokens equal head(decoder(...)): no soft-capping or scaling
    after the output layer (also named in the config), and the decoder takes these arguments."""
    config = getattr(base, "config", None)
    for name in LOGIT_CHANGES:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0, False):
            return False
    try:
        device = next(base.parameters()).device
    except StopIteration:
        return False
    vocab = int(getattr(config, "vocab_size", 0) or 8)
    ids = (torch.arange(8, device=device) % max(1, vocab)).unsqueeze(0)  # (1, 8)
    mask, positions = torch.ones_like(ids), torch.arange(8, device=device).unsqueeze(0)
    modes = [(m, m.training) for m in base.modules()]
    try:
        base.eval()  # no dropout: the two passes must see the same function
        with torch.no_grad():
            args = dict(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
            full = base(**args).logits.float()  # (1, 8, V)
            hidden = decoder(**args).last_hidden_state  # (1, 8, H)
            with _autocast_like_forward(base):
                split = head(hidden).float()  # (1, 8, V)
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return False
    finally:
        for module, training in modes:
            module.training = training
    scale = float(full.abs().max().clamp(min=1.0))
    return full.shape == split.shape and bool((full - split).abs().max() <= 1e-4 * scale)


def _autocast_like_forward(model) -> contextlib.AbstractContextManager:
    """The autocast the model's own forward runs under (float32 master weights in full
    fine-tuning, modeling.py), for the output layer that logps runs outside that forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    setting = getattr(base, "autocast_forward", None)
    if setting is None:
        return contextlib.nullcontext()
    device_type, dtype = setting
    if device_type == "bf16-products":  # bfloat16 on the CPU (ops/bf16_products.py)
        return bf16_products()
    return torch.autocast(device_type, dtype=dtype)


def _can_share_prompts(model) -> bool:
    """A KV cache cannot carry gradients through checkpointed layers (transformers drops it)."""
    if not (torch.is_grad_enabled() and model.training):
        return True
    return not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def _hidden_plain(decoder, prompt_ids, completion_ids, attention, position_ids) -> torch.Tensor:
    """Final hidden states (N, C, H) that predict each completion token, from one pass over
    prompt + completion."""
    P = prompt_ids.size(1)
    out = decoder(
        input_ids=torch.cat([prompt_ids, completion_ids], dim=1),  # (N, P + C)
        attention_mask=attention,
        position_ids=position_ids,
        use_cache=False,
    )
    return out.last_hidden_state[:, P - 1 : -1]  # (N, C, H): position t predicts token t


def _hidden_sharing_prompts(decoder, prompt_ids, attention, position_ids, completion_ids, runs):
    """The same (N, C, H) with each distinct prompt run through the decoder once: its keys and
    values are computed for one row and copied to the others, then only the completion tokens go
    through. Equal to the plain pass up to float rounding, for (P + C) / (P / G + C) times fewer
    token-passes. `runs`: `prompt_runs` of the batch. None when the decoder does not take a
    cache this way."""
    P, C = prompt_ids.size(1), completion_ids.size(1)
    first, owner = runs  # (U,), (N,)
    try:
        ends, cache = _prompts_once(
            decoder, prompt_ids[first], attention[first, :P], position_ids[first, :P]
        )  # (U, H)
        if cache is None or not expand_rows(cache, owner):  # (U, ...) -> (N, ...) per layer
            return None
        head = ends.unsqueeze(1).index_select(0, owner)  # (N, 1, H): predicts token 0
        if C == 1:
            return head
        rest = decoder(
            input_ids=completion_ids[:, :-1],
            attention_mask=attention[:, :-1],
            position_ids=position_ids[:, P:-1],
            use_cache=True,
            **{CACHE: cache},
        ).last_hidden_state  # (N, C - 1, H)
    except TypeError:  # a decoder without position_ids / a cache
        return None
    return torch.cat([head, rest], dim=1)  # (N, C, H)


def _prompts_once(decoder, prompt_ids, prompt_mask, positions):
    """(final hidden state (U, H) of each distinct prompt's last position, the cache of their
    keys and values) from the decoder's pass over the prompts (U, P), their common beginning (a
    system prompt, a chat template's header) run once for all of them where it is long enough
    (common_start.py). The cache is None where the decoder returns none."""
    shared = prompt_pass(decoder, prompt_ids, prompt_mask, positions)
    if shared is not None:
        out, cache = shared
    else:
        out = decoder(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=positions,
            use_cache=True,
        )
        cache = out_cache(out)
    return out.last_hidden_state[:, -1], cache  # (U, H)


def _kept_hidden_packed(
    decoder, prompt_ids, attention, position_ids, completion_ids, keep, runs, cached: bool
):
    """The final hidden states (M, H) of the kept completion positions (row-major), each prompt
    run through the decoder once and its rows' answers packed into one row after it
    (packing.py). `runs`: `prompt_runs` of the batch. `cached`: the prompt in a pass of its own,
    its keys and values kept for the answers' pass; else prompt and answers in one pass
    (checkpointed layers drop a cache). None where packing would not pay, or cannot be done for
    this decoder."""
    costs = token_costs(decoder)
    if costs is None:
        return None
    P = prompt_ids.size(1)
    first, owner = runs  # (U,), (N,)
    implementation = getattr(decoder.config, "_attn_implementation", None) or "eager"
    plan = PackPlan.build(
        keep, first, owner, P, costs, with_prompt=not cached,
        scores_kept=implementation == "eager", tokens=completion_ids if packing.TREE else None,
    )  # fmt: skip
    if plan is None:
        return None
    U = first.numel()
    ids, positions = plan.inputs(completion_ids, position_ids[:, P:], U)  # (U, S), (U, S)
    prompt_mask = attention[first, :P]  # (U, P)
    dtype = next(p.dtype for p in decoder.parameters() if p.is_floating_point())  # not 4-bit
    try:
        if cached:
            ends, cache = _prompts_once(
                decoder, prompt_ids[first], prompt_mask, position_ids[first, :P]
            )  # (U, H): the prompt's end predicts token 0
            if cache is None:
                return None
            packed = decoder(
                input_ids=ids,
                attention_mask=plan.mask(prompt_mask, implementation, dtype),
                position_ids=positions,
                use_cache=True,
                **{CACHE: cache},
            ).last_hidden_state  # (U, S, H)
        else:
            out = decoder(
                input_ids=torch.cat([prompt_ids[first], ids], dim=1),  # (U, P + S)
                attention_mask=plan.mask(prompt_mask, implementation, dtype, with_prompt=True),
                position_ids=torch.cat([position_ids[first, :P], positions], dim=1),
                use_cache=False,
            ).last_hidden_state  # (U, P + S, H)
            ends, packed = out[:, P - 1], out[:, P:]  # (U, H), (U, S, H)
    except TypeError:  # a decoder without position_ids / a cache
        return None
    flat = torch.cat([ends, packed.reshape(U * plan.S, -1)])  # (U + U·S, H)
    return flat.index_select(0, plan.source)  # (M, H)


def _plain_logps(
    model, prompt_ids, completion_ids, attention, position_ids, temperature, with_entropy
):
    """Through the model's own forward, a few rows at a time (models that change their logits
    after the output layer). Every chunk's logits stay in the autograd graph until backward."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P + C)
    N, C = completion_ids.shape
    vocab = getattr(model.config, "vocab_size", 32000)
    rows = max(1, PLAIN_LOGITS_BUDGET // max(1, C * vocab))
    mask = attention[:, prompt_ids.size(1) :]  # (N, C)
    logps, entropies = [], []
    for s in range(0, N, rows):
        sl = slice(s, s + rows)
        with routing(input_ids.device):
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
        logps.append((picked - log_norm) * mask[sl])
        if with_entropy:
            with torch.no_grad():
                logp_all = logits - log_norm.unsqueeze(-1)  # (n, C, V)
                entropies.append(-(logp_all.exp() * logp_all).sum(-1) * mask[sl])  # (n, C)
    return torch.cat(logps), torch.cat(entropies) if with_entropy else None

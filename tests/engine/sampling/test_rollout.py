"""Rollouts: completion masks, and log-probs that match what generate sampled from."""

from __future__ import annotations

import torch

from grpo_desktop.engine.sampling import logps as logps_module
from grpo_desktop.engine.sampling import sampler
from grpo_desktop.engine.sampling.rollout import (
    completion_mask,
    generate_completions,
    token_logps,
    tokenize_prompts,
)


def _load(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_completion_mask_stops_after_first_eos():
    eos = 2
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 5, 5, 5, 5], [2, 9, 9, 9, 9]])
    mask, truncated = completion_mask(ids, eos)
    # Row 0: tokens 5, 6 and the EOS count (3); row 1 never ends (truncated); row 2 is only EOS.
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def test_prompts_are_left_padded_and_left_truncated(tiny_model_dir):
    _, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, ["What is 17 × 24?", "Hi"], 8, torch.device("cpu"))
    assert ids.shape == (2, 8)
    assert tok.decode(ids[0]) == " 17 × 24?"[-8:]  # the end of the question survives
    assert mask[1].tolist() == [0] * 6 + [1, 1]


def test_logps_equal_the_distribution_generate_sampled_from(tiny_model_dir):
    """Left-padded rows must see the same positions in the loss pass as during sampling."""
    model, tok = _load(tiny_model_dir)
    texts = ["<|user|>What is 2×3?<|end|><|assistant|>", "<|user|>Hi<|end|><|assistant|>"]
    ids, mask = tokenize_prompts(tok, texts, 64, torch.device("cpu"))
    torch.manual_seed(0)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=0.7,
        top_k=None,
        max_new_tokens=8,
        min_new_tokens=8,
        pad_token_id=tok.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    cids = out.sequences[:, ids.size(1) :]  # (2, 8)
    sampled_logits = torch.stack(out.logits, dim=1).float() / 0.7  # (2, 8, V)
    expected = torch.log_softmax(sampled_logits, -1).gather(-1, cids.unsqueeze(-1)).squeeze(-1)
    logps, _ = token_logps(model, ids, mask, cids, torch.ones_like(cids, dtype=torch.float), 0.7)
    assert torch.allclose(logps, expected, atol=1e-5)


def test_chunked_logps_equal_unchunked(tiny_model_dir, monkeypatch):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, ["<|user|>a<|end|>", "<|user|>bcd<|end|>"] * 3, 32, "cpu")
    comps = generate_completions(model, tok, ids, mask, max_new_tokens=6)
    args = (ids, mask, comps.completion_ids, comps.completion_mask)
    whole, ent = token_logps(model, *args, with_entropy=True)
    chunked, ent2 = token_logps(model, *args, with_entropy=True, chunk=1)  # one token per chunk
    assert torch.allclose(whole, chunked, atol=1e-6)
    assert torch.allclose(ent, ent2, atol=1e-6)
    assert (ent >= 0).all()


def test_generate_masks_pad_after_eos_and_decodes(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, ["<|user|>a<|end|><|assistant|>"] * 4, 32, "cpu")
    torch.manual_seed(1)
    comps = generate_completions(model, tok, ids, mask, max_new_tokens=12)
    assert comps.completion_ids.shape[0] == 4 and len(comps.texts) == 4
    pad = comps.completion_ids[comps.completion_mask == 0]
    assert (pad == tok.pad_token_id).all()
    assert comps.lengths.tolist() == comps.completion_mask.sum(1).tolist()


def _grouped_batch(model, tok, G=3):
    """Two prompts of different lengths (left padding), G sampled completions each, some ending."""
    ids, mask = tokenize_prompts(tok, ["<|user|>a<|end|>", "<|user|>bcd<|end|>"], 32, "cpu")
    ids, mask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)  # (2G, P)
    torch.manual_seed(0)
    comps = generate_completions(model, tok, ids, mask, max_new_tokens=7)
    return ids, mask, comps.completion_ids, comps.completion_mask


def test_prompt_runs_find_rows_that_repeat_the_row_above():
    ids = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [3, 4], [1, 2]])
    first, owner = sampler.prompt_runs(ids, torch.ones_like(ids))
    assert first.tolist() == [0, 2, 5] and owner.tolist() == [0, 0, 1, 1, 1, 2]
    assert sampler.prompt_runs(ids[1:3], torch.ones(2, 2)) is None  # nothing repeats


def test_shared_prompt_pass_equals_the_plain_pass_with_gradients(tiny_model_dir, monkeypatch):
    """Each distinct prompt goes through the model once; log-probs, entropies and gradients equal
    the plain pass over prompt + completion (float rounding aside), with one chunk of logits or
    chunks of 2 tokens."""
    model, tok = _load(tiny_model_dir)
    args = _grouped_batch(model, tok)
    model.train()

    def run(share: bool, chunk: int | None):
        monkeypatch.setattr(logps_module, "_can_share_prompts", lambda m: share)
        model.zero_grad(set_to_none=True)
        logps, ent = token_logps(model, *args, temperature=0.7, with_entropy=True, chunk=chunk)
        (logps * args[3]).sum().backward()
        return logps.detach(), ent, [p.grad.clone() for p in model.parameters()]

    shared_calls = []
    inner = logps_module._hidden_sharing_prompts

    def spy(*a):
        out = inner(*a)
        shared_calls.append(out is not None)
        return out

    monkeypatch.setattr(logps_module, "_hidden_sharing_prompts", spy)
    plain = run(False, None)
    assert shared_calls == []
    for chunk in (None, 2):
        shared = run(True, chunk)
        assert shared_calls == [True]  # all six rows in one pass: two prompts, each run once
        shared_calls.clear()
        assert torch.allclose(shared[0], plain[0], atol=1e-5)
        assert torch.allclose(shared[1], plain[1], atol=1e-5)
        for a, b in zip(shared[2], plain[2]):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_gradient_checkpointing_keeps_the_plain_pass(tiny_model_dir):
    model, _ = _load(tiny_model_dir)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    assert not logps_module._can_share_prompts(model)  # its layers would drop the prompt's cache
    with torch.no_grad():
        assert logps_module._can_share_prompts(model)  # nothing is checkpointed without gradients

"""The lean sampler: same tokens as `generate` when greedy, the right distribution when sampling."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.ops.draw import nucleus
from grpo_desktop.engine.sampling import common_start, sampler
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts
from grpo_desktop.engine.sampling.sampler import sample_tokens

PROMPTS = ["<|user|>What is 17 × 24?<|end|><|assistant|>", "<|user|>Hi<|end|><|assistant|>"]


def _load(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def test_greedy_matches_generate_with_left_padding(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS * 2, 64, torch.device("cpu"))
    for min_new in (0, 5):
        ours = sample_tokens(
            model, ids, mask, max_new_tokens=12, eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id, greedy=True, min_new_tokens=min_new,
        )  # fmt: skip
        ref = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
            min_new_tokens=min_new, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        )[:, ids.size(1):]  # fmt: skip
        width = max(ours.size(1), ref.size(1))

        def pad(t, w=width):
            return torch.nn.functional.pad(t, (0, w - t.size(1)), value=tok.pad_token_id)

        assert torch.equal(pad(ours), pad(ref)), (ours, ref)


def test_repeated_prompts_are_prefilled_once_and_decode_as_generate(
    tiny_model_dir, monkeypatch, choose_linear
):
    """A group's G rows share their prompt: the prefill runs each distinct prompt once and copies
    its cache; greedy tokens still equal generate's, and sampling equals the unshared prefill
    (with the same products on both sides: kernels.py would pick oneDNN for the larger one)."""
    choose_linear("0")
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    ids, mask = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)  # (6, P)
    widths = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    args = dict(max_new_tokens=10, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    ours = sample_tokens(model, ids, mask, greedy=True, **args)
    hook.remove()
    assert widths[0] == (2, ids.size(1)) and widths[1] == (6, 1)  # prefill on the 2 distinct
    ref = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=10,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )[:, ids.size(1):]  # fmt: skip
    assert torch.equal(ours, ref[:, : ours.size(1)])
    torch.manual_seed(5)
    shared = sample_tokens(model, ids, mask, **args)
    monkeypatch.setattr(sampler, "prompt_runs", lambda ids, mask: None)  # prefill every row
    torch.manual_seed(5)
    plain = sample_tokens(model, ids, mask, **args)
    assert torch.equal(shared, plain)


def test_sampling_follows_softmax_of_logits_over_temperature(micro_model_dir):
    model, tok = _load(micro_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS[:1], 64, torch.device("cpu"))
    T, n = 1.5, 20000
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[0, -1].float()  # (V,)
    expected = torch.softmax(logits / T, -1)  # (V,)
    torch.manual_seed(0)
    big_ids, big_mask = ids.expand(n, -1), mask.expand(n, -1)
    first = sample_tokens(
        model, big_ids, big_mask, max_new_tokens=1, eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id, temperature=T,
    )[:, 0]  # fmt: skip
    observed = torch.bincount(first, minlength=expected.numel()).float() / n
    # Each frequency within 5 standard errors of its probability.
    se = (expected * (1 - expected) / n).sqrt()
    assert ((observed - expected).abs() <= 5 * se + 1e-4).all()


def test_top_p_keeps_the_nucleus_only():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(nucleus(logits, 0.7))
    # 0.5 alone < 0.7, 0.5 + 0.3 reaches it: the two most likely tokens stay.
    assert kept.tolist() == [[True, True, False, False]]
    assert torch.isfinite(nucleus(logits, 0.01)).sum() == 1  # never empty


def test_finished_rows_are_padded_and_decoding_stops(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    torch.manual_seed(3)
    out = sample_tokens(
        model, ids, mask, max_new_tokens=60, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id
    )
    for row in out.tolist():
        if tok.eos_token_id in row:
            after = row[row.index(tok.eos_token_id) + 1 :]
            assert all(t == tok.pad_token_id for t in after)
    if all(tok.eos_token_id in row for row in out.tolist()):
        assert out.size(1) < 60  # stopped once every row ended


class _NoPositionIds(torch.nn.Module):
    """A model whose forward takes no position_ids (as some remote-code models)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.generation_config = inner.generation_config

    def forward(self, input_ids, attention_mask=None):  # **kw would swallow position_ids
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    def generate(self, **kw):
        return self.inner.generate(**kw)


def test_models_without_position_ids_fall_back_to_generate(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    wrapped = _NoPositionIds(model)
    comps = generate_completions(wrapped, tok, ids, mask, max_new_tokens=6, greedy=True)
    direct = generate_completions(model, tok, ids, mask, max_new_tokens=6, greedy=True)
    assert comps.texts == direct.texts


def _lora_model(path, seed=0):
    from peft import LoraConfig, get_peft_model

    model, tok = _load(path)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # peft starts B at 0 (adapter = identity): make it matter
            p.data.normal_(0.0, 0.5)
    return model.eval(), tok


def test_lora_merged_decodes_the_same_function_and_restores_the_weights(tiny_model_dir):
    model, tok = _lora_model(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    weights = {n: p for n, p in model.named_parameters() if "base_layer.weight" in n}
    before = {n: p.detach().clone() for n, p in weights.items()}
    with torch.no_grad():
        adapted = model(input_ids=ids, attention_mask=mask).logits  # (2, P, V)
        with model.disable_adapter():
            base = model(input_ids=ids, attention_mask=mask).logits
        with sampler.lora_merged(model):
            merged = model(input_ids=ids, attention_mask=mask).logits
    assert not torch.allclose(adapted, base, atol=1e-3)  # the adapter changes the function
    assert torch.allclose(merged, adapted, atol=1e-5)  # merged = adapter on, up to rounding
    for n, p in model.named_parameters():
        if n in weights:
            assert p is weights[n] and torch.equal(p, before[n])  # put back exactly
    args = dict(max_new_tokens=8, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=True)
    unmerged = sample_tokens(model, ids, mask, **args)  # (2, C): adapters run as three matmuls
    comps = generate_completions(model, tok, ids, mask, max_new_tokens=8, greedy=True)
    assert torch.equal(comps.completion_ids, unmerged)  # generation decodes merged


def test_lora_merged_restores_after_an_error_and_skips_what_it_cannot_merge(tiny_model_dir):
    model, _ = _lora_model(tiny_model_dir)
    weight = next(p for n, p in model.named_parameters() if "base_layer.weight" in n)
    ptr, values = weight.data_ptr(), weight.detach().clone()

    def adapters_on() -> bool:
        return not any(m.disable_adapters for m in model.modules() if hasattr(m, "lora_A"))

    try:
        with sampler.lora_merged(model):
            assert weight.data_ptr() != ptr and not adapters_on()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert weight.data_ptr() == ptr and torch.equal(weight, values) and adapters_on()
    model.to(torch.bfloat16)  # merging would round bf16 weights: decode unmerged instead
    ptr = weight.data_ptr()
    with sampler.lora_merged(model):
        assert weight.data_ptr() == ptr and adapters_on()
    plain, _ = _load(tiny_model_dir)
    assert sampler._mergeable_lora_layers(plain) == []  # no peft model, nothing to merge
    from peft import LoraConfig, get_peft_model

    extra = LoraConfig(r=4, target_modules="all-linear", modules_to_save=["lm_head"])
    # disable_adapter() would also swap the trained lm_head copy back: not the same function
    assert sampler._mergeable_lora_layers(get_peft_model(plain, extra)) == []


def test_a_model_that_gives_nan_logits_stops_sampling_with_a_message(tiny_model_dir):
    """A diverged model (NaN weights) gets a UserError that says what happened and what to do,
    not torch's bare "probability tensor contains nan"."""
    from grpo_desktop.engine.ops.draw import DivergedError

    model, tok = _load(tiny_model_dir)
    with torch.no_grad():
        model.get_output_embeddings().weight[5].fill_(float("nan"))
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    with pytest.raises(DivergedError, match="diverged"):
        sample_tokens(
            model, ids, mask, max_new_tokens=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id
        )


@pytest.mark.parametrize("temperature, top_p, min_new", [(1.0, 1.0, 0), (0.7, 0.9, 4)])
def test_the_samplers_entropy_is_the_log_prob_passs_entropy(
    tiny_model_dir, temperature, top_p, min_new
):
    # Issue 28: the step's entropy metric comes from the sampler, so the update needs no pass
    # over the rows it leaves out. It must be what the log-prob pass measures: the entropy of
    # softmax(logits / T) at each sampled position, before top-p and before EOS is held back.
    from grpo_desktop.engine.sampling.logps import token_logps

    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS * 3, 64, torch.device("cpu"))
    torch.manual_seed(4)
    comps = generate_completions(
        model, tok, ids, mask, max_new_tokens=14, temperature=temperature, top_p=top_p,
        min_new_tokens=min_new, with_entropy=True,
    )  # fmt: skip
    assert comps.entropy is not None and comps.entropy.shape == comps.completion_ids.shape
    with torch.no_grad():
        _, entropy = token_logps(
            model, comps.prompt_ids, comps.prompt_mask, comps.completion_ids,
            comps.completion_mask, temperature, with_entropy=True,
        )  # fmt: skip
    live = comps.completion_mask > 0
    assert bool((comps.entropy[live] > 0).all())
    assert torch.allclose(comps.entropy[live], entropy[live], rtol=1e-4, atol=1e-5)
    assert bool((comps.entropy[~live] == 0).all())  # nothing after a row's end


def test_no_entropy_unless_asked_and_none_from_generates_fallback(tiny_model_dir):
    model, tok = _load(tiny_model_dir)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    assert generate_completions(model, tok, ids, mask, max_new_tokens=4).entropy is None
    wrapped = _NoPositionIds(model)
    comps = generate_completions(wrapped, tok, ids, mask, max_new_tokens=4, with_entropy=True)
    assert comps.entropy is None  # the update then measures it itself


SYSTEM = "<|system|>Think step by step inside <think></think>, then answer inside <answer></answer>.<|end|>"


def test_common_start_counts_the_shared_beginning_after_each_rows_padding():
    pad = 0
    ids = torch.tensor(
        [
            [pad, pad, 5, 6, 7, 8, 9],
            [5, 6, 7, 8, 1, 2, 3],
            [pad, 5, 6, 7, 4, 4, 4],
        ]
    )
    mask = (torch.arange(7) >= torch.tensor([[2], [0], [1]])).long()
    assert common_start.common_start(ids, mask) == 3  # 5 6 7, wherever each row starts
    assert common_start.common_start(ids[:1], mask[:1]) == 4  # one row: all but its last token


@pytest.mark.parametrize("groups", [1, 3])
def test_a_long_common_beginning_is_prefilled_once_with_the_same_tokens(
    tiny_model_dir, monkeypatch, groups
):
    # Issue 28: the held-out prompts share a system prompt and a chat template's header; running
    # that once instead of per prompt must not change a token, greedy or sampled, left padding
    # and a group's repeated rows included.
    model, tok = _load(tiny_model_dir)
    questions = ["What is 17 × 24?", "Hi", "Name three prime numbers below twenty, please."]
    texts = [f"{SYSTEM}<|user|>{q}<|end|><|assistant|>" for q in questions]
    ids, mask = tokenize_prompts(tok, texts, 128, torch.device("cpu"))
    ids, mask = ids.repeat_interleave(groups, 0), mask.repeat_interleave(groups, 0)
    least = common_start.MIN_COMMON
    assert common_start.common_start(ids, mask) >= least
    shared = []
    real = sampler._prefill_common_start
    monkeypatch.setattr(
        sampler, "_prefill_common_start", lambda *a: shared.append(real(*a)) or shared[-1]
    )

    def decode(min_common, greedy):
        monkeypatch.setattr(common_start, "MIN_COMMON", min_common)
        torch.manual_seed(2)
        return generate_completions(
            model, tok, ids, mask, max_new_tokens=12, greedy=greedy, temperature=0.9
        ).completion_ids

    for greedy in (True, False):
        shared.clear()
        plain = decode(10**9, greedy)
        assert all(s is None for s in shared)
        once = decode(least, greedy)
        assert shared[-1] is not None  # the common beginning did run once
        assert torch.equal(plain, once)

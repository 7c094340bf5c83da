"""Log-probs from hidden states a chunk of logits at a time (engine/ops/fused_head.py, engine/sampling/logps.py).

Every result is checked against the plain computation: the model's own forward, its full logits
divided by the temperature, log_softmax and gather — log-probs, entropies and gradients (hidden
states, the output weight, LoRA parameters, every parameter in full fine-tuning with tied
embeddings) in float32 within 1e-5. And the point of it all: the autograd graph never holds a
tensor the size of all the completion logits.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops.fused_head import chunk_tokens, head_logps
from grpo_desktop.engine.sampling import logps as logps_module
from grpo_desktop.engine.sampling.logps import decoder_and_head, token_logps
from tests.support.logps import logps_and_grads, plain_logps

REAL_VOCAB = 151_936  # Qwen2.5's embedding rows


def _plain_head(hidden, weight, bias, targets, temperature):
    z = F.linear(hidden, weight, bias).float() / temperature  # (M, V)
    logp_all = torch.log_softmax(z, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(1, targets.unsqueeze(1)).squeeze(1), entropy


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [1, 7, 64])  # 7 does not divide the 23 tokens; 64 > 23
@pytest.mark.parametrize("bias", [False, True])
def test_fused_head_equals_the_plain_head_with_gradients(temperature, chunk, bias):
    g = torch.Generator().manual_seed(0)
    M, H, V = 23, 16, 301
    hidden = torch.randn(M, H, generator=g, requires_grad=True)
    weight = torch.randn(V, H, generator=g).mul_(0.5).requires_grad_()
    b = torch.randn(V, generator=g).requires_grad_() if bias else None
    head = torch.nn.Linear(H, V, bias=bias)
    head.weight = torch.nn.Parameter(weight.detach().clone())
    if bias:
        head.bias = torch.nn.Parameter(b.detach().clone())
    targets = torch.randint(0, V, (M,), generator=g)
    upstream = torch.randn(M, generator=g)  # an arbitrary incoming gradient per token

    expected, expected_entropy = _plain_head(hidden, weight, b, targets, temperature)
    (expected * upstream).sum().backward()
    x = hidden.detach().clone().requires_grad_()
    got, entropy = head_logps(head, x, targets, temperature, with_entropy=True, chunk=chunk)
    (got * upstream).sum().backward()

    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(entropy, expected_entropy, atol=1e-5)
    assert not entropy.requires_grad  # a metric
    assert torch.allclose(x.grad, hidden.grad, atol=1e-5)
    assert torch.allclose(head.weight.grad, weight.grad, atol=1e-5)
    if bias:
        assert torch.allclose(head.bias.grad, b.grad, atol=1e-5)


def test_fused_head_without_gradients_needs_none_and_keeps_nothing():
    head = torch.nn.Linear(8, 50, bias=False).requires_grad_(False)
    hidden, targets = torch.randn(9, 8), torch.randint(0, 50, (9,))
    with torch.no_grad():
        got, entropy = head_logps(head, hidden, targets, 0.5, chunk=4)
    expected, _ = _plain_head(hidden, head.weight, None, targets, 0.5)
    assert entropy is None and not got.requires_grad
    assert torch.allclose(got, expected, atol=1e-6)


def _grouped_batch(vocab: int, G: int = 3):
    """Two prompts of different lengths (the second left-padded), G rows each; completions of 7
    tokens, some ending early (mask 0 after), as sampling leaves them."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, min(vocab, 60), (2, 6), generator=g).repeat_interleave(G, 0)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[G:, :2] = 0  # (2G, 6)
    completion = torch.randint(3, min(vocab, 60), (2 * G, 7), generator=g)  # (2G, 7)
    completion_mask = torch.ones(2 * G, 7)
    completion_mask[1, 4:] = 0
    completion_mask[G + 1, 1:] = 0  # a row that is only its first token
    return prompt, prompt_mask, completion, completion_mask


def _tiny(tiny_model_dir, mode: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.tie_word_embeddings
    if mode != "full":
        from peft import LoraConfig, get_peft_model

        targets = "all-linear" if mode == "lora" else ["q_proj", "v_proj", "lm_head"]
        model = get_peft_model(model, LoraConfig(r=4, lora_dropout=0.0, target_modules=targets))
        with torch.no_grad():  # B = 0 at init would hide A's gradient
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.3)
    return model.train()


@pytest.mark.parametrize("chunk", [3, None])  # 3 tokens: 10 chunks for 30 kept, ragged end
@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("mode", ["full", "lora", "lora_on_lm_head"])
def test_token_logps_equal_the_models_own_logits(tiny_model_dir, monkeypatch, mode, share, chunk):
    """Full fine-tuning (tied embedding: lm_head's gradient adds to the embedding's), LoRA on
    the linear layers (lm_head frozen) and LoRA on lm_head itself (the checkpointed route)."""
    model = _tiny(tiny_model_dir, mode)
    batch = _grouped_batch(model.config.vocab_size)
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(2))
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 0.7), weights)

    shared = []
    inner = logps_module._hidden_sharing_prompts
    monkeypatch.setattr(logps_module, "_can_share_prompts", lambda m: share)
    monkeypatch.setattr(
        logps_module, "_hidden_sharing_prompts", lambda *a: shared.append(1) or inner(*a)
    )
    got = logps_and_grads(
        model, lambda: token_logps(model, *batch, 0.7, with_entropy=True, chunk=chunk), weights
    )
    assert len(shared) == int(share)
    assert decoder_and_head(model) is not None  # the fused route, not the fallback
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert (got[0][batch[3] == 0] == 0).all()  # masked positions: 0, no gradient
    assert torch.allclose(got[1], expected[1], atol=1e-5)
    assert got[2].keys() == expected[2].keys() and len(got[2]) > 0
    if mode == "lora_on_lm_head":
        assert any("lm_head.lora_A" in n for n in got[2])
    if mode == "full":
        assert "model.embed_tokens.weight" in got[2]  # the tied output weight's gradient lands
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def _wide_vocab_model(cls=None):
    """A Qwen2 with the real 151,936-token vocabulary but a 32-wide, 1-layer body."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=REAL_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return (cls or Qwen2ForCausalLM)(config).train()


def _saved_sizes(fn):
    """Elements of every tensor autograd saves while fn runs, model parameters left out (saving
    a weight costs nothing), and fn's result."""
    sizes: list[int] = []

    def pack(t):
        if not isinstance(t, torch.nn.Parameter):
            sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sizes, out


def test_the_graph_keeps_one_chunk_of_logits_whatever_the_batch():
    model = _wide_vocab_model()
    batch = _grouped_batch(REAL_VOCAB, G=4)  # 8 rows × 7 completion tokens
    N, C = batch[2].shape
    all_logits = N * C * REAL_VOCAB
    plain_sizes, _ = _saved_sizes(lambda: plain_logps(model, *batch, 1.0))
    assert max(plain_sizes) >= all_logits  # what the plain pass keeps: this test can fail

    sizes, (logps, _) = _saved_sizes(lambda: token_logps(model, *batch, chunk=5))
    assert max(sizes) < 5 * REAL_VOCAB  # not even one chunk of logits is kept
    assert sum(sizes) < all_logits / 20  # hidden states, activations, one log-sum-exp per token
    logps.sum().backward()  # and the backward, recomputing each chunk, runs
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_prompts_are_shared_at_a_real_vocabulary(monkeypatch):
    """Before, rows went one at a time at this vocabulary (logits budget), so no prompt was ever
    shared; now a group's rows share theirs in one pass, and the result is the plain one."""
    model = _wide_vocab_model()
    batch = _grouped_batch(REAL_VOCAB, G=4)
    calls = []
    inner = logps_module._hidden_sharing_prompts
    monkeypatch.setattr(
        logps_module, "_hidden_sharing_prompts", lambda *a: calls.append(a[1].size(0)) or inner(*a)
    )
    weights = torch.ones(batch[3].shape)
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 1.0), weights)
    got = logps_and_grads(model, lambda: token_logps(model, *batch, with_entropy=True), weights)
    assert calls == [8]  # all 8 rows in one pass, through the sharing route
    assert chunk_tokens(REAL_VOCAB) == 110  # 2**24 logits per chunk
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def test_models_that_change_their_logits_are_scored_by_their_own_forward():
    """A model that scales its logits after lm_head (as Cohere or Granite do) or says in its
    config that it soft-caps them (Gemma 2) cannot be split into decoder + lm_head: scored
    through its forward, it still gets the right log-probs."""
    from transformers import Qwen2ForCausalLM

    class Scaled(Qwen2ForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 3.0
            return out

    model = _wide_vocab_model(Scaled)
    batch = _grouped_batch(REAL_VOCAB, G=2)
    assert decoder_and_head(model) is None
    with torch.no_grad():
        expected, expected_entropy = plain_logps(model, *batch, 0.7)
        got, entropy = token_logps(model, *batch, 0.7, with_entropy=True)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(entropy, expected_entropy, atol=1e-5)

    capped = _wide_vocab_model()
    capped.config.final_logit_softcapping = 30.0
    assert decoder_and_head(capped) is None
    assert decoder_and_head(_wide_vocab_model()) is not None


def test_float32_master_weights_score_the_head_under_the_models_autocast(tiny_model_dir):
    """Full fine-tuning in bfloat16 keeps float32 master weights and runs the forward under
    autocast (modeling.py); the output layer, run here outside that forward, runs under the same
    autocast: the log-probs are the model's own (its lm_head computes in bfloat16). Gradients in
    bfloat16 differ from the model's own autocast backward by bfloat16 rounding (~0.5 %), so both
    are held against float32 ones: the fused ones are as close."""
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.models.loading import load_policy

    cfg = TrainConfig().replace(
        model={"name_or_path": tiny_model_dir, "dtype": "bfloat16", "device": "cpu"},
        lora={"enabled": False},
        algorithm={"beta": 0.0},
    )
    model = load_policy(cfg).model.train()
    exact = load_policy(cfg.replace(model={"dtype": "float32"})).model.train()
    assert model.lm_head.weight.dtype == torch.float32
    batch = _grouped_batch(model.config.vocab_size)
    weights = torch.ones(batch[3].shape)
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 0.7), weights)
    got = logps_and_grads(model, lambda: token_logps(model, *batch, 0.7, chunk=4), weights)
    reference = logps_and_grads(exact, lambda: plain_logps(exact, *batch, 0.7), weights)
    assert decoder_and_head(model) is not None
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert not torch.allclose(reference[0], expected[0], atol=1e-4)  # bfloat16 logits: not fp32

    def error(grads, name):
        return float((grads[name] - reference[2][name]).norm() / reference[2][name].norm())

    ours = [error(got[2], name) for name in reference[2]]
    theirs = [error(expected[2], name) for name in reference[2]]
    assert max(ours) < 0.02 and sum(ours) <= 1.05 * sum(theirs)
    assert all(a <= 1.25 * b for a, b in zip(ours, theirs))


@pytest.mark.parametrize("vocab", [107, 49_152])
def test_probs_entropy_is_torchs_entr_sum_and_counts_a_zero_probability_as_zero(vocab):
    # The sampler's entropy (session 23): clamp, log, product and sum in place of torch's
    # unvectorised special.entr on the CPU; the same numbers to float rounding, written into the
    # column it is given, and 0 · log 0 counted 0 (a masked token, an underflowed probability).
    from grpo_desktop.engine.ops.fused_head import probs_entropy

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, vocab, generator=g) * 4  # (N, V)
    logits[0, : vocab // 2] = float("-inf")  # probabilities of exactly 0
    logits[1] = -1e4
    logits[1, 3] = 0.0  # one token takes all: entropy 0
    probs = torch.softmax(logits, dim=-1)  # (N, V)
    assert bool((probs == 0).any())
    expected = torch.special.entr(probs.double()).sum(-1)  # (N,) in float64
    buffer = torch.full((6, 3), -1.0)  # the sampler writes one column of its (N, C) buffer
    out = probs_entropy(probs, buffer[:, 1])
    assert out.data_ptr() == buffer[:, 1].data_ptr()
    assert bool(torch.isfinite(buffer[:, 1]).all())
    assert torch.allclose(buffer[:, 1].double(), expected, rtol=1e-5, atol=1e-6)
    assert buffer[1, 1].item() == 0.0
    assert bool((buffer[:, [0, 2]] == -1.0).all())  # the other columns untouched
    reference = torch.empty(6)
    torch.sum(torch.special.entr(probs), dim=-1, out=reference)  # what the sampler computed before
    assert torch.allclose(buffer[:, 1], reference, rtol=1e-5, atol=1e-6)

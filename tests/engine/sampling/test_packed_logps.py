"""A group's answers packed into one row for the log-prob passes (engine/sampling/packing.py).

Held against the plain computation (the model's own forward over prompt + completion, full
logits): log-probs, entropies and every gradient within 1e-5, for Llama and Qwen2, full
fine-tuning and LoRA, sdpa and eager attention, left-padded prompts and answers of 1 to 9
tokens. The packed route is shown to run (the decoder sees one packed row per prompt), and the
cost rule to pack SmolLM2's uneven answers and not the demo's even ones.
"""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.sampling import logps as logps_module
from grpo_desktop.engine.sampling import packing
from grpo_desktop.engine.sampling.logps import decoder_and_head, token_logps
from grpo_desktop.engine.sampling.packing import PackPlan, token_costs
from tests.support.logps import logps_and_grads, plain_logps


def _batch(vocab: int, G: int = 4):
    """Two prompts (the second left-padded by 2), G rows each; answers of uneven length, as
    sampling leaves them (mask 1 up to and including EOS, 0 after): 9, 2, 5, 1 | 3, 9, 6, 4."""
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, min(vocab, 60), (2, 6), generator=g).repeat_interleave(G, 0)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[G:, :2] = 0  # (2G, 6)
    C = 9
    completion = torch.randint(3, min(vocab, 60), (2 * G, C), generator=g)  # (2G, 9)
    lengths = torch.tensor([9, 2, 5, 1, 3, 9, 6, 4][: 2 * G])
    completion_mask = (torch.arange(C).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (2G, 9)
    return prompt, prompt_mask, completion, completion_mask


def _model(kind: str, mode: str, attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    else:
        model = LlamaForCausalLM(LlamaConfig(**shape))
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=4, lora_dropout=0.0, target_modules="all-linear")
        )
        with torch.no_grad():  # B = 0 at init would hide A's gradient
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.3)
    return model.train()


def _spy_decoder(monkeypatch, model):
    """Record the input shapes the decoder is called with (the real decoder runs)."""
    decoder, _ = decoder_and_head(model)
    shapes = []
    inner = decoder.forward

    def forward(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return inner(*args, **kwargs)

    monkeypatch.setattr(decoder, "forward", forward)
    return shapes


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("mode", ["full", "lora"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_packed_passes_equal_the_models_own_logits(monkeypatch, kind, mode, attention, cached):
    """`cached`: the prompt's own pass, then the answers' against its keys and values; else
    (layers that cannot keep a cache) prompt and packed answers in one pass."""
    model = _model(kind, mode, attention)
    batch = _batch(97)
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(2))
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 0.7), weights)

    monkeypatch.setattr(packing, "PACK_BELOW", 100.0)  # pack whatever the cost
    monkeypatch.setattr(logps_module, "_can_share_prompts", lambda m: cached)
    shapes = _spy_decoder(monkeypatch, model)
    got = logps_and_grads(
        model, lambda: token_logps(model, *batch, 0.7, with_entropy=True, chunk=5), weights
    )
    # Each prompt once, then its answers packed: 8+1+4+0 = 13 and 2+8+5+3 = 18 input tokens.
    assert shapes == ([(2, 6), (2, 18)] if cached else [(2, 6 + 18)])
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert (got[0][batch[3] == 0] == 0).all()  # masked positions: 0, no gradient
    assert torch.allclose(got[1], expected[1], atol=1e-5)
    assert got[2].keys() == expected[2].keys() and len(got[2]) > 0
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def test_without_gradients_and_one_group(monkeypatch):
    """The reference pass (no_grad) of one group, and a group whose answers are all 1 token
    long (nothing to pack: the prompt's last position scores them all)."""
    model = _model("llama", "lora", "sdpa").eval()
    prompt, prompt_mask, completion, completion_mask = (t[:4] for t in _batch(97))
    monkeypatch.setattr(packing, "PACK_BELOW", 100.0)
    with torch.no_grad():
        expected, _ = plain_logps(model, prompt, prompt_mask, completion, completion_mask, 1.0)
        got, _ = token_logps(model, prompt, prompt_mask, completion, completion_mask)
    assert torch.allclose(got, expected, atol=1e-5)

    ones = torch.zeros_like(completion_mask)
    ones[:, 0] = 1
    with torch.no_grad():
        expected, _ = plain_logps(model, prompt, prompt_mask, completion, ones, 1.0)
        shapes = _spy_decoder(monkeypatch, model)
        got, _ = token_logps(model, prompt, prompt_mask, completion, ones)
    assert torch.allclose(got, expected, atol=1e-5)
    assert shapes == [(1, 6), (4, 8)]  # nothing to pack (S = 0): the padded route


def test_a_mask_with_holes_is_not_packed(monkeypatch):
    """Packing needs each row's scored positions to be a run from column 0."""
    model = _model("llama", "full", "sdpa")
    prompt, prompt_mask, completion, completion_mask = _batch(97)
    completion_mask[0, 3] = 0  # a hole in row 0
    monkeypatch.setattr(packing, "PACK_BELOW", 100.0)
    keep = completion_mask > 0
    first, owner = torch.tensor([0, 4]), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert PackPlan.build(keep, first, owner, 6, (1.0, 1.0)) is None
    with torch.no_grad():
        expected, _ = plain_logps(model, prompt, prompt_mask, completion, completion_mask, 1.0)
        got, _ = token_logps(model, prompt, prompt_mask, completion, completion_mask)
    assert torch.allclose(got, expected, atol=1e-5)


def _one_layer(**shape):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=1, vocab_size=64, **shape)
    return LlamaForCausalLM(config).model


def _keep(lengths: list[int]) -> torch.Tensor:
    C = max(lengths)
    return torch.arange(C).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # (N, C)


def test_the_cost_rule_packs_uneven_answers_and_not_even_ones():
    """SmolLM2-135M's layer (576 wide, MLP 1536, 9 heads of 64) and one of its groups measured
    on arithmetic (answers of 8 to 56 tokens, prompt 84): packed. The demo model's layer (192
    wide, MLP 512, 6 heads) and its answers (110 to 125 tokens, prompt 93): padded."""
    smol = _one_layer(
        hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3
    )
    costs = token_costs(smol)
    assert costs is not None and costs[1] == 2 * 576
    one_group = (torch.tensor([0]), torch.zeros(8, dtype=torch.long))
    plan = PackPlan.build(_keep([56, 26, 18, 30, 12, 40, 22, 8]), *one_group, 84, costs)
    assert plan is not None and plan.S == 212 - 8

    demo = _one_layer(
        hidden_size=192, intermediate_size=512, num_attention_heads=6, num_key_value_heads=2
    )
    even = _keep([114, 110, 118, 125, 113, 116, 112, 121])
    assert PackPlan.build(even, *one_group, 93, token_costs(demo)) is None
    # Eager attention keeps every score: a pack may not hold more of them than the padding.
    uneven = _keep([56, 26, 18, 30, 12, 40, 22, 8])
    assert PackPlan.build(uneven, *one_group, 84, costs, scores_kept=True) is not None
    wide = _keep([56, 50, 48, 50, 52, 40, 54, 8])  # packed 350 × 434 scores, padded 8 × 55 × 139
    assert PackPlan.build(wide, *one_group, 84, (1e9, 1.0)) is not None
    assert PackPlan.build(wide, *one_group, 84, (1e9, 1.0), scores_kept=True) is None
    # Beyond MAX_PACKED tokens the mask alone would be too large: padded, whatever the saving.
    long = _keep([packing.MAX_PACKED, 10, 10, 10, 10, 10, 10, 10])
    assert PackPlan.build(long, *one_group, 84, costs) is None


def test_attention_the_mask_cannot_reach_is_not_packed():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=1, vocab_size=64, hidden_size=32, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    config._attn_implementation = "flex_attention"
    assert token_costs(LlamaForCausalLM(config).model) is None


def test_a_sliding_window_is_not_packed():
    """Mistral's window (and Gemma 3's) is part of the model's own mask: not packed. Qwen2
    names a window but does not use it by default: packed."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        num_hidden_layers=1, vocab_size=64, hidden_size=32, intermediate_size=64,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    mistral = MistralForCausalLM(MistralConfig(sliding_window=16, **shape)).model
    assert token_costs(mistral) is None
    qwen = Qwen2ForCausalLM(Qwen2Config(sliding_window=16, use_sliding_window=False, **shape))
    assert token_costs(qwen.model) is not None


def _qlora_model(folder: str):
    """The tiny model loaded as the app loads QLoRA (4-bit NF4 base, LoRA), in training mode,
    its lora_B drawn away from 0 so the adapters' gradients are not hidden."""
    from grpo_desktop.engine.config import TrainConfig
    from grpo_desktop.engine.models.loading import load_policy

    cfg = TrainConfig().replace(model={"name_or_path": folder}, quantization={"mode": "4bit"})
    model = load_policy(cfg).model.train()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def test_4bit_qlora_packs_with_the_padded_values(monkeypatch, tiny_model_dir):
    """QLoRA on the CPU (bitsandbytes NF4 layers, LoRA in float32): packed and padded passes
    give the same log-probs and adapter gradients."""
    model = _qlora_model(tiny_model_dir)
    batch = _batch(model.config.vocab_size)
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(5))
    results = []
    for below in (0.0, 100.0):  # padded, then packed
        monkeypatch.setattr(packing, "PACK_BELOW", below)
        shapes = _spy_decoder(monkeypatch, model)
        results.append(logps_and_grads(model, lambda: token_logps(model, *batch), weights))
        monkeypatch.undo()
        assert shapes[-1] == ((8, 8) if below == 0.0 else (2, 18))  # rows × columns, or packed
    (padded, _, padded_grads), (packed, _, packed_grads) = results
    assert torch.allclose(packed, padded, atol=1e-5)
    assert padded_grads and padded_grads.keys() == packed_grads.keys()
    for name, grad in padded_grads.items():
        assert torch.allclose(packed_grads[name], grad, atol=1e-5), name


def test_checkpointed_layers_pack_prompt_and_answers_in_one_pass(monkeypatch):
    """Gradient checkpointing drops a key/value cache, so a group's prompt cannot be shared the
    cached way: before, every row ran its own copy of the prompt, padded to the longest
    answer. Now the prompt and the packed answers run once per group, with the same values and
    gradients as the model's own forward (itself checkpointed)."""
    model = _model("llama", "lora", "sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert not logps_module._can_share_prompts(model)
    batch = _batch(97)
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(4))
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 1.0), weights)
    shapes = _spy_decoder(monkeypatch, model)
    got = logps_and_grads(model, lambda: token_logps(model, *batch), weights)
    assert shapes == [(2, 24)]  # the app's own cost rule packs here: 48 token-passes, not 112
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert got[2].keys() == expected[2].keys() and len(got[2]) > 0
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def _shared_batch(vocab: int = 97):
    """Two prompts (the second left-padded), four rows each, whose answers begin alike as a
    group's sampled answers do. Group 0: rows 0 and 3 agree on 6 tokens, row 1 on 3 of them,
    row 2 on 1; group 1: rows 4 and 5 are the same answer, row 6 shares nothing, row 7 is row
    4's first 3 tokens (it ended there)."""
    g = torch.Generator().manual_seed(8)
    prompt = torch.randint(3, 60, (2, 6), generator=g).repeat_interleave(4, 0)  # (8, 6)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[4:, :2] = 0
    C = 9
    base = torch.randint(3, 60, (2, C), generator=g)
    completion = base.repeat_interleave(4, 0).clone()  # (8, 9)
    own = torch.randint(3, 60, (8, C), generator=g)
    completion[1, 3:] = own[1, 3:]  # agrees with row 0 on 3 tokens
    completion[2, 1:] = own[2, 1:]  # on 1
    completion[3, 6:] = own[3, 6:]  # on 6
    completion[6] = own[6]  # shares nothing with its group
    completion[6, 0] = (base[1, 0] + 1) % 60  # not even the first token
    lengths = torch.tensor([9, 7, 5, 9, 8, 8, 6, 3])
    completion_mask = (torch.arange(C).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return prompt, prompt_mask, completion, completion_mask


def _distinct_inputs(completion, completion_mask, rows) -> int:
    """Distinct beginnings among the input tokens (all but each row's last) of `rows`."""
    seen = set()
    for r in rows:
        n = int(completion_mask[r].sum()) - 1
        seen |= {tuple(completion[r, : t + 1].tolist()) for t in range(n)}
    return len(seen)


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_answers_that_begin_alike_run_their_beginning_once(monkeypatch, kind, attention, cached):
    """A token that several answers of a group begin with runs once in the packed row, and every
    later token of each of them sees it: log-probs, entropies and gradients (LoRA) equal the
    model's own forward over each row."""
    model = _model(kind, "lora", attention)
    batch = _shared_batch()
    prompt, prompt_mask, completion, completion_mask = batch
    weights = torch.randn(completion_mask.shape, generator=torch.Generator().manual_seed(6))
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 0.8), weights)

    monkeypatch.setattr(packing, "PACK_BELOW", 100.0)
    monkeypatch.setattr(logps_module, "_can_share_prompts", lambda m: cached)
    shapes = _spy_decoder(monkeypatch, model)
    got = logps_and_grads(
        model, lambda: token_logps(model, *batch, 0.8, with_entropy=True, chunk=7), weights
    )
    nodes = [_distinct_inputs(completion, completion_mask, range(g * 4, g * 4 + 4)) for g in (0, 1)]
    plain = int((completion_mask.sum(1) - 1).view(2, 4).sum(1).max())
    # Input tokens 8+6+4+8 = 26 and 7+7+5+2 = 21; of them new: 8+3+3+2 = 16 and 7+0+5+0 = 12.
    assert nodes == [16, 12] and plain == 26
    S = max(nodes)
    assert shapes == ([(2, 6), (2, S)] if cached else [(2, 6 + S)])
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert (got[0][completion_mask == 0] == 0).all()
    assert torch.allclose(got[1], expected[1], atol=1e-5)
    assert got[2].keys() == expected[2].keys() and len(got[2]) > 0
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def test_the_plan_gives_shared_beginnings_one_slot_and_their_ancestry(monkeypatch):
    """Three rows of one run: rows 0 and 1 agree on their first two tokens, row 2 on none."""
    monkeypatch.setattr(packing, "PACK_BELOW", 100.0)
    tokens = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 8], [4, 6, 7, 8]])
    keep = torch.ones(3, 4, dtype=torch.bool)
    plan = PackPlan.build(
        keep, torch.tensor([0]), torch.zeros(3, dtype=torch.long), 2, (1.0, 1.0), tokens=tokens
    )
    # Input tokens (all but the last): row 0 5 6 7, row 1 5 6 9 (5 6 shared), row 2 4 6 7.
    assert plan.S == 7
    assert plan.rows.tolist() == [0, 0, 0, 1, 2, 2, 2] and plan.cols.tolist() == [
        0,
        1,
        2,
        2,
        0,
        1,
        2,
    ]
    sees = plan.sees[0].int().tolist()
    assert sees[3] == [1, 1, 0, 1, 0, 0, 0]  # row 1's "9" sees the shared 5 6 and itself
    assert sees[2] == [1, 1, 1, 0, 0, 0, 0]  # row 0's "7" sees 5 6 7, not row 1's 9
    assert sees[6] == [0, 0, 0, 0, 1, 1, 1]  # row 2 sees only its own
    # Kept position (row 1, column 3) is predicted by its input token 2 ("9", slot 3); (row 1,
    # column 1) by the shared "5" (slot 0); column 0 by the prompt's end (index 0).
    source = plan.source.view(3, 4)
    assert source[1].tolist() == [0, 1 + 0, 1 + 1, 1 + 3]
    assert source[0].tolist() == [0, 1, 2, 3] and source[2].tolist() == [0, 5, 6, 7]
    unshared = PackPlan.build(
        keep, torch.tensor([0]), torch.zeros(3, dtype=torch.long), 2, (1.0, 1.0)
    )
    assert unshared.S == 9  # without the tokens no two rows share a slot


def _system_prompt_batch(vocab: int = 97, G: int = 4):
    """_batch's answers after prompts of 26 tokens that begin with the same 18 (a system prompt
    and a chat template's header), the second prompt left-padded by 2 and so shifted right."""
    prompt, prompt_mask, completion, completion_mask = _batch(vocab, G)
    g = torch.Generator().manual_seed(5)
    start = torch.randint(3, 60, (18,), generator=g)
    tails = torch.randint(3, 60, (2, 8), generator=g)
    tails[1, 0] = tails[0, 0] + 1  # the questions differ from their first token on
    rows = [
        torch.cat([start, tails[0]]),
        torch.cat([torch.zeros(2, dtype=torch.long), start, tails[1, :6]]),
    ]
    prompt = torch.stack(rows).repeat_interleave(G, 0)  # (2G, 26)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[G:, :2] = 0
    return prompt, prompt_mask, completion, completion_mask


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("mode", ["full", "lora"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_a_system_prompt_shared_by_every_group_runs_once(monkeypatch, kind, mode, packed):
    """Issue 28: the groups' prompts begin with the same 18 tokens; those run for one row and
    every group reads their keys and values, in the packed route and in the one that runs each
    row's answer after its group's prompt. Log-probs, entropies and every gradient (the shared
    tokens' summed over the groups that read them) equal the model's own forward over each row."""
    from grpo_desktop.engine.sampling import common_start

    model = _model(kind, mode, "sdpa")
    batch = _system_prompt_batch()
    prompt, prompt_mask = batch[:2]
    assert common_start.common_start(prompt, prompt_mask) == 18
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(4))
    expected = logps_and_grads(model, lambda: plain_logps(model, *batch, 0.9), weights)

    monkeypatch.setattr(packing, "PACK_BELOW", 100.0 if packed else 0.0)
    shapes = _spy_decoder(monkeypatch, model)
    got = logps_and_grads(
        model, lambda: token_logps(model, *batch, 0.9, with_entropy=True, chunk=6), weights
    )
    # The 18 shared tokens for one row; then each prompt's other 8 columns (the padded row's
    # last 2 shared tokens among them); then the answers, packed or one row each.
    assert shapes[:2] == [(1, 18), (2, 8)]
    assert len(shapes) == 3 and shapes[2][0] == (2 if packed else 8)
    assert torch.allclose(got[0], expected[0], atol=1e-5)
    assert (got[0][batch[3] == 0] == 0).all()
    assert torch.allclose(got[1], expected[1], atol=1e-5)
    assert got[2].keys() == expected[2].keys() and len(got[2]) > 0
    for name, grad in expected[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5), name


def test_4bit_qlora_runs_the_shared_system_prompt_once(monkeypatch, tiny_model_dir):
    """QLoRA on the CPU (bitsandbytes NF4 layers): the 18 tokens every prompt begins with run
    for one row, with the log-probs and adapter gradients of running them in every group."""
    from grpo_desktop.engine.sampling import common_start

    model = _qlora_model(tiny_model_dir)
    batch = _system_prompt_batch(model.config.vocab_size)
    weights = torch.randn(batch[3].shape, generator=torch.Generator().manual_seed(7))
    results = []
    for least in (10**9, common_start.MIN_COMMON):  # every group whole, then the start once
        monkeypatch.setattr(common_start, "MIN_COMMON", least)
        monkeypatch.setattr(packing, "PACK_BELOW", 100.0)
        shapes = _spy_decoder(monkeypatch, model)
        results.append(logps_and_grads(model, lambda: token_logps(model, *batch), weights))
        monkeypatch.undo()
        assert shapes[0] == ((2, 26) if least > 26 else (1, 18))
    (whole, _, whole_grads), (once, _, once_grads) = results
    assert torch.allclose(once, whole, atol=1e-5)
    assert whole_grads and whole_grads.keys() == once_grads.keys()
    for name, grad in whole_grads.items():
        assert torch.allclose(once_grads[name], grad, atol=1e-5), name

"""native_decode.cpp's `decode_step`: the lean decoder's whole step in one call of the fused
kernels, each thread taking its rows through every layer (engine/sampling/decode.py). It must
give the very bits of the same step op by op (decode_script.py's NATIVE_SOURCE), write the same
keys and values, read a group's one copy of its prompt where told (`lead`), be used only where
it pays (rows per thread), and leave the sampler's tokens as they were."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from grpo_desktop.engine.models.tiny import build_tiny_model
from grpo_desktop.engine.ops import native
from grpo_desktop.engine.sampling import decode, sampler


@pytest.fixture
def ops():
    built = native.decode_ops()
    if built is None or not native.has_step(built):
        pytest.skip(f"no fused decode step here: {native.describe()}")
    return built


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    folder = build_tiny_model(str(tmp_path_factory.mktemp(request.param)), "tiny", 5, request.param)
    return AutoModelForCausalLM.from_pretrained(folder).eval()


def _groups(n_groups: int = 3, G: int = 8, P: int = 37):
    """n_groups prompts, each repeated G times (a step's groups); the second one left-padded."""
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 60, (n_groups, P), generator=g).repeat_interleave(G, 0)
    mask = torch.ones_like(ids)
    mask[G : 2 * G, :5] = 0
    return ids, mask


def _lean(model, ids, mask, steps: int, monkeypatch, whole: bool, share: bool = True):
    monkeypatch.setattr(decode, "WHOLE_STEP", whole)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    _, cache, copied = sampler._prefill_runs(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, ids.size(1) + steps + 1)
    lean.start(mask, positions[:, -1:] + 1)
    assert copied is not None
    if share:
        lean.share_prompts(copied)
    return lean


def _ran_whole_step(fn, *args, **kwargs) -> tuple[object, bool]:
    """fn(*args, **kwargs), and whether it ran decode_step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn(*args, **kwargs)
    return out, any(e.name == "grpo_desktop::decode_step" for e in prof.events())


@torch.no_grad()
def test_the_whole_step_is_the_scripts_bits_with_rows_dropped_and_forked(
    ops, model, monkeypatch, two_threads
):
    ids, mask = _groups()
    whole = _lean(model, ids, mask, 30, monkeypatch, whole=True)
    script = _lean(model, ids, mask, 30, monkeypatch, whole=False)
    assert whole.whole and not script.whole
    tokens = ids[:, -1]
    for t in range(30):
        if t == 10:  # rows dropped and one forked (twin_rows.py's keep), as the sampler does
            rows = torch.tensor([0, 0, 2, 3, 5, 8, 9, 9, 11, 12, 13, 16, 17, 18, 19, 20, 21, 23])
            whole.keep(rows)
            script.keep(rows)
            tokens = tokens[rows]
            assert whole.lead.tolist() == [0] * 5 + [5] * 6 + [11] * 7  # each group's first row
        mine, used = _ran_whole_step(whole.step, tokens)
        assert used  # 24 (then 18) rows on 2 threads
        expected = script.step(tokens)
        assert torch.equal(mine, expected), t
        tokens = expected.argmax(-1)
    L = whole.length  # positions written (the buffers' last one is not yet)
    for a, b in zip(whole.keys, script.keys):
        assert torch.equal(a[..., :L], b[..., :L])
    for a, b in zip(whole.values, script.values):
        assert torch.equal(a[:, :, :L], b[:, :, :L])


@torch.no_grad()
def test_a_groups_rows_read_its_first_rows_copy_of_their_prompt(
    ops, model, monkeypatch, two_threads
):
    """Change row 8's copy of its prompt's first keys and values (the first row of the second
    group): the group's other rows then attend over the changed ones, the other groups do not
    notice, and without share_prompts no row but 8 does."""
    ids, mask = _groups()
    clean = _lean(model, ids, mask, 2, monkeypatch, whole=True)
    changed = _lean(model, ids, mask, 2, monkeypatch, whole=True)
    alone = _lean(model, ids, mask, 2, monkeypatch, whole=True, share=False)
    for lean in (changed, alone):
        for k, v in zip(lean.keys, lean.values):
            k[8, ..., 5:16] += 1.0  # positions inside the prompt's first block of 16
            v[8, :, 5:16] += 1.0
    tokens = ids[:, -1]
    base, moved, apart = clean.step(tokens), changed.step(tokens), alone.step(tokens)
    differs = (moved != base).any(-1)  # (N,)
    assert differs[8:16].all() and not differs[:8].any() and not differs[16:].any()
    assert (apart != base).any(-1).tolist() == [i == 8 for i in range(24)]


@torch.no_grad()
def test_fewer_rows_than_pay_run_the_script(ops, model, monkeypatch, two_threads):
    ids, mask = _groups(n_groups=1)  # 8 rows on 2 threads: under WHOLE_MIN_ROWS a thread
    lean = _lean(model, ids, mask, 2, monkeypatch, whole=True)
    _, used = _ran_whole_step(lean.step, ids[:, -1])
    assert lean.whole and not used
    monkeypatch.setattr(decode, "WHOLE_MIN_ROWS", 4)
    _, used = _ran_whole_step(lean.step, ids[:, -1])
    assert used


@torch.no_grad()
def test_the_sampler_draws_the_same_tokens_with_the_whole_step(
    ops, model, monkeypatch, two_threads
):
    ids, mask = _groups(n_groups=4)  # 32 rows: twins part, rows end and are dropped
    runs = {}
    for whole in (True, False):
        monkeypatch.setattr(decode, "WHOLE_STEP", whole)
        torch.manual_seed(11)
        entropy: list = []
        args = dict(max_new_tokens=40, eos_id=[model.config.eos_token_id], pad_id=0)
        tokens, used = _ran_whole_step(
            sampler.sample_tokens, model, ids, mask, temperature=1.0, entropy=entropy, **args
        )
        runs[whole] = (tokens, entropy[0], used, sampler.last_decode_path())
    assert runs[True][2] and not runs[False][2]
    assert runs[True][3] == runs[False][3] == "lean"
    assert torch.equal(runs[True][0], runs[False][0])
    assert torch.equal(runs[True][1], runs[False][1])


def test_decode_step_refuses_what_it_cannot_run_before_writing(ops, model, monkeypatch):
    ids, mask = _groups()
    lean = _lean(model, ids, mask, 2, monkeypatch, whole=True)
    h = torch.randn(ids.size(0), model.config.hidden_size)
    cos, sin = lean.cos[:, 0].unsqueeze(1), lean.sin[:, 0].unsqueeze(1)
    keys = [k.clone() for k in lean.keys]
    L = lean.prompt + 1
    bad_lead = torch.full((ids.size(0),), ids.size(0), dtype=torch.long)  # past the last row
    with pytest.raises(RuntimeError, match="lead rows must be under N"):
        ops.decode_step(h, cos, sin, None, L, *lean.script_args, bad_lead, lean.prompt)
    with pytest.raises(RuntimeError, match="shared under L"):
        ops.decode_step(h, cos, sin, None, L, *lean.script_args, lean.lead, L)
    with pytest.raises(RuntimeError, match="h must be"):
        ops.decode_step(h.t(), cos, sin, None, L, *lean.script_args, None, 0)
    same_bits = [
        torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(keys, lean.keys)
    ]
    assert all(same_bits)  # nothing written (the bits: the buffers past the prompt are unset)


def test_rope_attend_gives_the_same_bits_by_row_and_by_head(ops):
    """rope_attend hands whole rows to threads when there are enough rows, else each key/value
    head apart: the same sums either way."""
    g = torch.Generator().manual_seed(2)
    N, H, Hkv, D, L = 3, 8, 4, 32, 50
    qkv = torch.randn(N, H + 2 * Hkv, D, generator=g)
    cos, sin = torch.randn(N, 1, D, generator=g), torch.randn(N, 1, D, generator=g)
    keys, values = torch.randn(N, Hkv, D, L, generator=g), torch.randn(N, Hkv, L, D, generator=g)
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2 * N):  # N >= threads: by row; else by head
            torch.set_num_threads(threads)
            outs.append(
                ops.rope_attend(qkv, cos, sin, keys.clone(), values.clone(), L, H, Hkv, 0.2, None)
            )
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])

"""The CPU decode runs on one thread or all, whichever steps faster, and samples the same tokens."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.data.dataset import load_data, prompt_for
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.sampling import decode_threads
from grpo_desktop.engine.sampling.decode_threads import DecodeThreads
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

CPU = torch.device("cpu")


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
    decode_threads.FORCE = None


@pytest.fixture(scope="module")
def demo_rows():
    """The shipped demo model and a step's 32 rows: 4 training problems, 8 rows each."""
    cfg = demo_config()
    policy = load_policy(cfg)
    problems = load_data(cfg.data, seed=0).train[:4]
    texts = [prompt_for(policy.tokenizer, ex.problem, cfg.data) for ex in problems]
    ids, mask = tokenize_prompts(policy.tokenizer, texts, 256, CPU)
    return policy, ids.repeat_interleave(8, 0), mask.repeat_interleave(8, 0)


def _decode(policy, ids, mask, force, **kw):
    decode_threads.FORCE = force
    torch.manual_seed(11)
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, **kw)
    return comps.completion_ids


@pytest.mark.parametrize("greedy", [False, True])
def test_one_thread_and_two_sample_the_same_tokens(two_threads, demo_rows, greedy):
    policy, ids, mask = demo_rows
    args = dict(max_new_tokens=40, temperature=1.0, greedy=greedy)
    one = _decode(policy, ids, mask, 1, **args)
    two = _decode(policy, ids, mask, 2, **args)
    chosen = _decode(policy, ids, mask, None, **args)
    assert one.size(1) > 20  # really decoded, not stopped at once
    assert torch.equal(one, two)
    assert torch.equal(one, chosen)
    assert torch.get_num_threads() == 2  # put back after each decode


def test_a_decode_times_both_and_keeps_the_faster(two_threads, demo_rows):
    policy, ids, mask = demo_rows
    _decode(policy, ids, mask, None, max_new_tokens=40)
    choice = decode_threads.last_choice()
    assert set(choice["seconds"]) == {1, 2}
    assert choice["threads"] == min(choice["seconds"], key=choice["seconds"].get)
    assert torch.get_num_threads() == 2


def test_short_decodes_and_one_thread_processes_make_no_trial(demo_rows):
    policy, ids, mask = demo_rows
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _decode(policy, ids, mask, None, max_new_tokens=decode_threads.MIN_TOKENS - 1)
        assert decode_threads.last_choice()["threads"] == 0
        torch.set_num_threads(1)
        _decode(policy, ids, mask, None, max_new_tokens=40)
        assert decode_threads.last_choice()["threads"] == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
        decode_threads.FORCE = None


def _run(times: dict[int, float], usual: int = 4, steps: int = 12) -> tuple[int, list[int]]:
    """Drive a chooser through `steps` decode steps that take times[threads] seconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(usual)
    try:
        chooser = DecodeThreads(CPU, max_new_tokens=64)
        seen = []
        for t in range(steps):
            chooser.before(t)
            seen.append(torch.get_num_threads())
            chooser.after(t, times[torch.get_num_threads()])
        chooser.close()
        assert torch.get_num_threads() == usual
        return chooser.chosen, seen
    finally:
        torch.set_num_threads(before)


def test_the_chooser_warms_up_alternates_then_keeps_the_faster():
    chosen, seen = _run({4: 0.010, 1: 0.004})
    assert seen[:5] == [4, 4, 1, 4, 1]  # warm-up, then 2 trials each, alternating
    assert chosen == 1 and set(seen[5:]) == {1}
    chosen, seen = _run({4: 0.002, 1: 0.004})
    assert chosen == 4 and set(seen[5:]) == {4}


def test_the_chooser_does_nothing_on_cuda():
    chooser = DecodeThreads(torch.device("cuda"), max_new_tokens=64)
    assert not chooser.active

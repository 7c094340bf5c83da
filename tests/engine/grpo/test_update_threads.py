"""The passes' CPU thread count: all of torch's, one fewer when that proves faster (issue 28)."""

from __future__ import annotations

import torch

from grpo_desktop.engine.grpo import update_threads as ut
from grpo_desktop.engine.grpo.update_threads import UpdateThreads, pass_work


def _run(threads: UpdateThreads, per_work: dict[int, float], steps: int) -> list[int]:
    """Drive `steps` steps whose time per unit of work on n threads is per_work[n]; the thread
    count each step ran on."""
    used = []
    for _ in range(steps):
        n, trial = threads._count()
        used.append(n)
        threads._record(n, trial, per_work[n])
    return used


def _threads(decode_chose_fewer: bool) -> UpdateThreads:
    return UpdateThreads("cpu", usual=2, hint=lambda: decode_chose_fewer)


def test_on_a_free_cpu_every_step_runs_on_all_threads_with_no_trial():
    threads = _threads(False)
    assert _run(threads, {2: 30e-6, 1: 50e-6}, 40) == [2] * 40


def test_a_decode_on_fewer_threads_calls_for_a_trial_and_fewer_is_kept_when_faster():
    threads = _threads(True)  # a busy neighbour: the decode went to one thread
    used = _run(threads, {2: 45e-6, 1: 30e-6}, 3 + 2 * ut.RECHECK)
    assert used[:3] == [2, 2, 1]  # warm-up, a step on all threads, then the trial
    assert threads.kept == 1
    later = used[3:]
    assert later.count(2) == 2  # one retrial of all threads per RECHECK steps, each not kept
    assert later.count(1) == len(later) - 2


def test_a_trial_that_loses_makes_the_next_hinted_trial_wait_twice_as_long():
    # A small model may decode faster on one thread on a free CPU: the hint comes every step.
    threads = _threads(True)
    used = _run(threads, {2: 30e-6, 1: 50e-6}, 80)
    trials = [i for i, n in enumerate(used) if n == 1]
    assert threads.kept == 2
    gaps = [b - a for a, b in zip(trials, trials[1:])]
    assert gaps == [ut.BACKOFF, 2 * ut.BACKOFF, 4 * ut.BACKOFF]
    assert len(trials) == 4  # of 80 steps


def test_a_neighbour_that_starts_later_is_noticed_and_one_that_stops_is_too():
    threads = _threads(False)
    _run(threads, {2: 30e-6, 1: 50e-6}, 10)
    assert threads.kept == 2
    # A neighbour takes a core: all threads slow to 2.5×, one thread to 1.2×.
    used = _run(threads, {2: 75e-6, 1: 36e-6}, 3)
    assert used[:2] == [2, 1] and threads.kept == 1  # the slow step, then a trial that wins
    # It stops: the retrial on all threads wins again.
    used = _run(threads, {2: 30e-6, 1: 50e-6}, ut.RECHECK + 1)
    assert 2 in used and threads.kept == 2


def test_noise_below_the_threshold_causes_no_trials():
    threads = _threads(False)
    used = []
    for i in range(40):
        n, trial = threads._count()
        used.append(n)
        wobble = 1.0 + 0.3 * ((i * 7) % 5) / 4  # up to 1.3× the best: load noise, not a neighbour
        threads._record(n, trial, {2: 30e-6, 1: 50e-6}[n] * wobble)
    assert used == [2] * 40


def test_passes_run_on_the_chosen_count_and_restore_torchs_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads = UpdateThreads("cpu", hint=lambda: True)
        inside = []
        for _ in range(3):
            with threads.passes(pass_work(100, 50)):
                inside.append(torch.get_num_threads())
            assert torch.get_num_threads() == 2
        assert inside == [2, 2, 1]
        assert threads.step == 3
    finally:
        torch.set_num_threads(before)


def test_the_default_hint_is_the_last_decodes_thread_choice(monkeypatch):
    from grpo_desktop.engine.sampling import decode_threads

    threads = UpdateThreads("cpu", usual=2)
    monkeypatch.setitem(decode_threads._last, "threads", 1)
    assert threads.hint()
    monkeypatch.setitem(decode_threads._last, "threads", 2)
    assert not threads.hint()
    monkeypatch.setitem(decode_threads._last, "threads", 0)  # no trial made (a short decode)
    assert not threads.hint()


def test_not_active_on_one_thread_or_on_cuda():
    assert not UpdateThreads("cpu", usual=1).active
    assert not UpdateThreads("cuda", usual=8).active
    threads = UpdateThreads("cpu", usual=1)
    with threads.passes(10.0):
        pass
    assert threads.step == 0  # nothing chosen, nothing recorded


def test_pass_work_counts_a_token_with_gradients_as_three_forwards():
    assert pass_work(100, 0) == 300.0
    assert pass_work(100, 40) == 340.0

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


def test_on_a_free_cpu_all_threads_are_kept_after_one_trial_of_fewer():
    threads = UpdateThreads("cpu", usual=2)
    used = _run(threads, {2: 30e-6, 1: 50e-6}, 30)
    assert used[:3] == [2, 1, 2]  # warm-up, then the opening pair
    assert used[3:] == [2] * 27  # steady times never call for another trial


def test_with_a_busy_core_one_fewer_is_kept_and_all_are_retried_every_recheck_steps():
    threads = UpdateThreads("cpu", usual=2)
    used = _run(threads, {2: 45e-6, 1: 30e-6}, 3 + 2 * ut.RECHECK)
    assert threads.kept == 1
    later = used[3:]
    assert later.count(2) == 2  # one retrial of all threads per RECHECK steps, each not kept
    assert later.count(1) == len(later) - 2


def test_a_neighbour_that_starts_later_is_noticed_and_one_that_stops_is_too():
    threads = UpdateThreads("cpu", usual=2)
    _run(threads, {2: 30e-6, 1: 50e-6}, 10)
    assert threads.kept == 2
    # A neighbour takes a core: all threads slow to 2.5×, one thread to 1.2×.
    used = _run(threads, {2: 75e-6, 1: 36e-6}, 3)
    assert used[:2] == [2, 1] and threads.kept == 1  # the slow step, then a trial that wins
    # It stops: the retrial on all threads wins again.
    used = _run(threads, {2: 30e-6, 1: 50e-6}, ut.RECHECK + 1)
    assert 2 in used and threads.kept == 2


def test_noise_below_the_threshold_causes_no_trials():
    threads = UpdateThreads("cpu", usual=2)
    used = []
    for i in range(40):
        n, trial = threads._count()
        used.append(n)
        wobble = 1.0 + 0.3 * ((i * 7) % 5) / 4  # up to 1.3× the best: load noise, not a neighbour
        threads._record(n, trial, {2: 30e-6, 1: 50e-6}[n] * wobble)
    assert used[3:] == [2] * 37


def test_passes_run_on_the_chosen_count_and_restore_torchs_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads = UpdateThreads("cpu")
        inside = []
        for _ in range(3):
            with threads.passes(pass_work(100, 50)):
                inside.append(torch.get_num_threads())
            assert torch.get_num_threads() == 2
        assert inside == [2, 1, 2]
        assert threads.step == 3
    finally:
        torch.set_num_threads(before)


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

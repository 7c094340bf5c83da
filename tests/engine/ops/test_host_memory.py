"""engine/ops/host_memory.py: free heap pages go back to the system, and a CPU decode with a large
vocabulary trims now and then (the demo's never), sampling exactly the same tokens."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from grpo_desktop.engine.ops import host_memory
from grpo_desktop.engine.sampling.sampler import sample_tokens

# A fresh process (no torch): glibc's mmap threshold rises past 4 MiB after one 8 MiB block is
# freed, so 40 blocks of 4 MiB then come from the heap, each followed by a 256 KiB block that
# stays (too large for any free bin of a fresh process, so it is cut from the heap's top right
# after its big block): freed, the big ones leave resident holes the top cannot give back.
FRAGMENT = textwrap.dedent(
    """
    import ctypes, sys
    from grpo_desktop.engine.ops import host_memory
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def rss_mib():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 2**20
    libc.free(libc.malloc(8 << 20))
    big, small = [], []
    for _ in range(40):
        p = libc.malloc(4 << 20)
        ctypes.memset(p, 1, 4 << 20)
        big.append(p)
        small.append(libc.malloc(256 << 10))
    for p in big:
        libc.free(p)
    before = rss_mib()
    ran = host_memory.release_free_heap()
    print(ran, before, rss_mib())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_free_heap_returns_free_pages_inside_the_heap():
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT], capture_output=True, text=True, timeout=60, check=True
    )
    ran, before, after = out.stdout.split()
    assert ran == "True"
    # 160 MiB were freed into holes: resident before the trim, gone after it.
    assert float(before) - float(after) > 120, out.stdout


def _wide_model(vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _sample(model, rows: int, tokens: int) -> torch.Tensor:
    ids = torch.arange(3, 8).expand(rows, -1)  # (rows, 5) one prompt, repeated
    torch.manual_seed(1)
    return sample_tokens(
        model, ids, torch.ones_like(ids), max_new_tokens=tokens, eos_id=2, pad_id=0
    )  # (rows, tokens)


@pytest.fixture(scope="module")
def wide_model():
    return _wide_model(32_768)  # 32 rows × 32,768 × 4 bytes = 4 MiB of logits a step


def test_a_large_vocabulary_decode_trims_and_samples_the_same_tokens(wide_model, monkeypatch):
    start = host_memory.stats["trims"]
    trimmed = _sample(wide_model, 32, 40)
    trims = host_memory.stats["trims"] - start
    if host_memory._malloc_trim() is not None:
        assert trims == 40 // host_memory.TRIM_EVERY + 1  # every 16 tokens and at the end
    monkeypatch.setattr(host_memory, "LARGE_LOGITS_BYTES", 2**62)  # trimming off
    start = host_memory.stats["trims"]
    assert torch.equal(_sample(wide_model, 32, 40), trimmed)
    assert host_memory.stats["trims"] == start


def test_small_logits_never_trim(wide_model):
    start = host_memory.stats["trims"]
    _sample(wide_model, 8, 40)  # 1 MiB of logits a step: below the limit
    _sample(_wide_model(107), 32, 40)  # the demo's vocabulary
    assert host_memory.stats["trims"] == start


def test_collect_cycles_frees_cycles_with_the_collector_the_app_chose():
    """The engine's explicit collections: gc.collect by default (a cycle is freed), or whatever
    the app installed (the desktop app: its GUI thread's, ui/common/gui_gc.py)."""
    import weakref

    class Node:
        pass

    node = Node()
    node.me = node
    freed = weakref.ref(node)
    del node
    calls = []
    previous = host_memory.set_cycle_collector(lambda: calls.append("app"))
    try:
        host_memory.collect_cycles()
        assert calls == ["app"]
    finally:
        host_memory.set_cycle_collector(previous)
    host_memory.collect_cycles()  # the default (or, after a window test here, the GUI's, which
    assert freed() is None  # collects at once on this thread)


# A step's worth of blocks (12 × 8 MiB), written, freed, and asked for again, five times: how
# many pages the kernel had to fault in (and zero) for the last four rounds.
REUSE = textwrap.dedent(
    """
    import ctypes, resource, sys
    from grpo_desktop.engine.ops import host_memory
    pinned = sys.argv[1] == "pinned" and host_memory.keep_freed_heap()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def step():
        blocks = [libc.malloc(8 << 20) for _ in range(12)]
        for p in blocks:
            ctypes.memset(p, 1, 8 << 20)
        for p in blocks:
            libc.free(p)
    step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        step()
    print(pinned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_heap_serves_the_next_steps_blocks_without_faulting_their_pages_in_again():
    def faults(mode: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", REUSE, mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        pinned, count = out.stdout.split()
        return pinned, int(count)

    pinned, kept = faults("pinned")
    _, default = faults("default")
    assert pinned == "True"
    # 4 rounds × 96 MiB = 98,304 pages: glibc's default gives the top back and faults them in
    # again each round; pinned, they stay (a few pages of bookkeeping at most).
    assert default > 50_000, default
    assert kept < 1_000, kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_cpu_run_keeps_its_freed_heap(trained_run):
    trained_run(lora=True)  # a real run on the CPU, in this process
    assert host_memory.stats["kept_heap"] is True

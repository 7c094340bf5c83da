"""The decode's fused CPU kernels (engine/ops/native.py, native_decode.cpp): torch's results up to
float rounding, torch's key/value bits, used by the lean decoder where they are built, and a
clear fallback where they cannot be. The fallback and cache tests run real builds in fresh
processes, each with its own cache folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from grpo_desktop.engine.ops import native
from grpo_desktop.engine.sampling import decode, decode_script, sampler


@pytest.fixture
def ops():
    """The built kernels (built on first use, in the tests' cache folder), or the test skips."""
    built = native.decode_ops()
    if built is None:
        pytest.skip(f"fused kernels not built here: {native.describe()}")
    return built


def _torch_attention(qkv, cos, sin, keys, values, L, H, Hkv, scaling, blocked):
    """decode_script.SOURCE's attention lines, on copies: (out (N, H*D), keys, values)."""
    keys, values, qkv = keys.clone(), values.clone(), qkv.clone()
    N, D = qkv.size(0), qkv.size(2)
    qk = qkv[:, : H + Hkv]
    torch.add(qk * cos, qk.roll(D // 2, dims=-1) * sin, out=qk)
    keys[:, :, :, L - 1] = qkv[:, H : H + Hkv]
    values[:, :, L - 1] = qkv[:, H + Hkv :]
    scores = torch.matmul(qkv[:, :H].reshape(N, Hkv, -1, D), keys[..., :L]).mul_(scaling)
    if blocked is not None:
        scores.masked_fill_(blocked, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), values[:, :, :L])
    return out.reshape(N, -1), keys, values


# Head widths and lengths that take each of the kernel's paths: blocks of 64, 32 and 16 key
# positions (or outputs), a last block overlapping the one before (L 70, D 40), fewer than 16
# (L 11, D 8); 1 to 9 query heads a key/value head (over 8: two groups of heads).
@pytest.mark.parametrize(
    "H,Hkv,D",
    [(4, 4, 16), (8, 4, 32), (9, 3, 64), (14, 2, 64), (6, 2, 40), (4, 2, 8), (9, 1, 32)],
)
@pytest.mark.parametrize("L", [11, 70, 144])
@pytest.mark.parametrize("masked", [False, True])
def test_rope_attend_is_torchs_attention_and_writes_torchs_keys_and_values(
    ops, H, Hkv, D, L, masked
):
    g = torch.Generator().manual_seed(H * D + L)
    N, capacity = 5, L + 5
    qkv = torch.randn(N, H + 2 * Hkv, D, generator=g)
    angles = torch.randn(N, 3, D, generator=g)  # a step's column of (N, T, D) angles, as decoded
    cos, sin = angles[:, 1:2].cos(), angles[:, 1:2].sin()  # (N, 1, D), rows strided
    # Rows 1, 3, 5, ... of wider buffers: strides the kernel must follow, not assume.
    keys = torch.randn(2 * N, Hkv, D, capacity, generator=g)[1::2]
    values = torch.randn(2 * N, Hkv, capacity, D, generator=g)[1::2]
    blocked = None
    if masked:  # left padding: rows 0 and 3 may not see their first positions
        blocked = torch.zeros(N, 1, 1, L, dtype=torch.bool)
        blocked[0, ..., :4] = blocked[3, ..., :9] = True
    scaling = D**-0.5
    expected, expected_keys, expected_values = _torch_attention(
        qkv, cos, sin, keys, values, L, H, Hkv, scaling, blocked
    )
    before = qkv.clone()
    out = ops.rope_attend(qkv, cos, sin, keys, values, L, H, Hkv, scaling, blocked)
    assert out.shape == (N, H * D)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=2e-6)
    assert torch.equal(keys, expected_keys)  # position L - 1 written, bit for bit; others kept
    assert torch.equal(values, expected_values)
    assert torch.equal(qkv, before)  # the input is read, not rotated in place
    if masked:  # the blocked positions take no weight: changing them changes nothing
        keys[0, ..., :4] += 100.0
        values[0, :, :4] -= 100.0
        again = ops.rope_attend(qkv, cos, sin, keys, values, L, H, Hkv, scaling, blocked)
        torch.testing.assert_close(again, out, rtol=1e-5, atol=2e-6)


def test_silu_mul_is_torchs_silu_times_up_on_strided_rows(ops):
    gu = torch.randn(7, 3 * 40)[:, :80] * 6  # (7, 80): gate 40 then up 40, rows 120 apart
    expected = F.silu(gu[:, :40]) * gu[:, 40:]
    torch.testing.assert_close(ops.silu_mul(gu, 40), expected, rtol=1e-5, atol=1e-6)


def test_rms_norm_is_torchs_rms_norm_on_strided_rows(ops):
    x = torch.randn(9, 2 * 96)[:, :96] * 3  # (9, 96), rows 192 apart
    weight = torch.randn(96)
    expected = torch.rms_norm(x, [96], weight, 1e-5)
    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-5), expected, rtol=1e-5, atol=1e-6)
    wide = torch.randn(300, 2048)  # rows shared between threads
    weight = torch.randn(2048)
    expected = torch.rms_norm(wide, [2048], weight, 1e-6)
    torch.testing.assert_close(ops.rms_norm(wide, weight, 1e-6), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "M,K,N",
    [
        (32, 256, 512),
        (40, 88, 29),
        (5, 64, 100),
        (70, 33, 13),
        (1, 16, 7),
        (16, 8, 12),
        (9, 512, 30),
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_is_the_product_up_to_rounding_and_each_rows_bits_stand_alone(
    ops, M, K, N, with_bias
):
    """Row chunks of 32, 16 and 8 (M 70 = 32 + 32 + 6, 40, 9), tiles of weight rows and single
    ones (N 29, 13, 7), strided rows of x; each output one sum in one order, so a row's bits do not
    depend on the rows beside it (a decode drops ended rows and must sample the same tokens)."""
    g = torch.Generator().manual_seed(M * 1000 + N)
    x = torch.randn(M, 2 * K, generator=g)[:, :K]  # (M, K), rows 2K apart
    w = torch.randn(N, K, generator=g)
    bias = torch.randn(N, generator=g) if with_bias else None
    expected = F.linear(x.double(), w.double(), None if bias is None else bias.double())
    out = ops.linear(x, w, bias)
    assert out.shape == (M, N) and out.is_contiguous()
    torch.testing.assert_close(out.double(), expected, rtol=2e-5, atol=2e-5)
    for rows in (slice(0, 1), slice(M // 2, M), slice(M - 1, M)):
        assert torch.equal(ops.linear(x[rows], w, bias), out[rows])
    assert ops.linear(x[:0], w, bias).shape == (0, N)


def test_the_kernels_refuse_what_they_do_not_handle_with_a_message(ops):
    qkv = torch.randn(2, 6, 8, dtype=torch.float64)
    cos = sin = torch.ones(2, 1, 8, dtype=torch.float64)
    keys, values = torch.zeros(2, 1, 8, 4), torch.zeros(2, 1, 4, 8)
    with pytest.raises(RuntimeError, match="float32"):
        ops.rope_attend(qkv, cos, sin, keys, values, 2, 4, 1, 1.0, None)
    with pytest.raises(RuntimeError, match="gu must be"):
        ops.silu_mul(torch.randn(3, 9), 4)
    with pytest.raises(RuntimeError, match="weight must be"):
        ops.linear(torch.randn(3, 8), torch.randn(8, 5).t(), None)  # not contiguous
    with pytest.raises(RuntimeError, match="bias must be"):
        ops.linear(torch.randn(3, 8), torch.randn(5, 8), torch.randn(4))


def _lean(model, ids, mask, capacity: int, use_native: bool, monkeypatch):
    monkeypatch.setattr(decode, "NATIVE", use_native)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    _, cache = sampler._prefill(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, capacity)
    lean.start(mask, positions[:, -1:] + 1)
    return lean


@torch.no_grad()
def test_the_lean_decoder_runs_the_kernels_and_keeps_torchs_greedy_tokens(
    ops, tiny_model_dir, monkeypatch
):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 60, (6, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[:2, :4] = 0  # two left-padded rows
    fused = _lean(model, ids, mask, 9 + 24, True, monkeypatch)
    plain = _lean(model, ids, mask, 9 + 24, False, monkeypatch)
    assert fused.native is not None and plain.native is None
    assert "grpo_desktop::rope_attend" in str(fused.script.graph)  # decode_script.NATIVE_SOURCE
    assert "grpo_desktop::linear" in str(fused.script.graph)
    assert "grpo_desktop" not in str(plain.script.graph)
    python_step = _lean(model, ids, mask, 9 + 24, True, monkeypatch)
    python_step.script = None  # decode.py's Python step calls the same kernels
    tokens = ids[:, -1]
    for _ in range(24):
        logits, expected, stepped = fused.step(tokens), plain.step(tokens), python_step.step(tokens)
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(stepped, logits, rtol=1e-5, atol=1e-5)
        tokens = expected.argmax(-1)
        assert torch.equal(logits.argmax(-1), tokens)


def _in_fresh_process(env: dict, code: str) -> dict:
    """Run `code` (which prints one JSON line last) in a new interpreter with `env` added."""
    full = dict(os.environ, **env)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROBE = """
import json, sys, torch
from grpo_desktop.engine.ops import native
from grpo_desktop.engine.sampling import decode_script
announce = native.will_compile(torch.device("cpu"), torch.float32)
ops = native.decode_ops()
print(json.dumps({
    "announce": announce,
    "built": ops is not None,
    "line": native.describe(),
    "log": native.describe_for(torch.device("cpu"), torch.float32),
    "script": decode_script.layers_step(True) is not None,
    "denormals_kept": (torch.tensor([1e-39]) * 1.0).item() > 0,  # no flush-to-zero switched on
    "setuptools": "setuptools" in sys.modules,  # not in a fresh virtual environment since 3.12
}))
"""


def test_without_a_working_compiler_the_decode_keeps_torchs_operations_and_says_why(tmp_path):
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    broken = _in_fresh_process({**cache, "CXX": "false"}, PROBE)  # a compiler that fails
    assert broken["announce"] and not broken["built"] and not broken["script"]
    assert broken["line"].startswith("unavailable: the build failed")
    assert broken["log"].startswith("Faster CPU sampling kernels unavailable: the build failed")
    assert "sampling runs torch's operations instead" in broken["log"]
    # The next run does not try (and wait) again with the same compiler, and says how to retry.
    again = _in_fresh_process({**cache, "CXX": "false"}, PROBE)
    assert not again["announce"] and not again["built"]
    assert again["line"].startswith("unavailable: the build failed (")
    assert "(earlier; delete " in again["line"] and "to try again)" in again["line"]
    missing = _in_fresh_process({**cache, "CXX": str(tmp_path / "no-such-c++")}, PROBE)
    assert not missing["built"]
    assert "no C++ compiler" in missing["line"] and "install g++" in missing["line"]
    off = _in_fresh_process({**cache, native.ENV: "0"}, PROBE)
    assert not off["built"] and off["line"] == f"unavailable: switched off ({native.ENV}=0)"


def _demo_logs(tmp_path, out: str) -> list[str]:
    """The run log of a one-step demo run through the real CLI, with its own cache folder."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "grpo_desktop", "train", "--demo", "--steps", "1", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path / out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / out / "events.jsonl", encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    return [e["message"] for e in events if e["type"] == "log"]


def test_the_first_run_compiles_and_says_so_later_runs_load_and_a_damaged_cache_rebuilds(
    ops, tmp_path
):
    first = [m for m in _demo_logs(tmp_path, "first") if "CPU sampling" in m]
    assert first[0] == native.COMPILING  # announced before the wait
    assert first[1].startswith("Faster CPU sampling: fused kernels compiled in ")
    assert str(tmp_path / "cache" / "grpo-desktop" / "native") in first[1]
    assert len(first) == 2
    second = [m for m in _demo_logs(tmp_path, "second") if "CPU sampling" in m]
    assert second == [
        m for m in second if m.startswith("Faster CPU sampling: fused kernels loaded")
    ]
    assert len(second) == 1
    # A damaged library in the cache (a disk error, an interrupted copy) is built again.
    (library,) = (tmp_path / "cache" / "grpo-desktop" / "native").glob("*/*.so")
    library.write_bytes(b"not a library")
    again = _in_fresh_process({"XDG_CACHE_HOME": str(tmp_path / "cache")}, PROBE)
    assert again["built"] and again["line"].startswith("fused decode kernels compiled in ")
    assert again["script"] and again["denormals_kept"] and not again["setuptools"]


def test_the_build_is_keyed_by_its_source_and_this_cpu(monkeypatch, tmp_path):
    name, source = native.build_name(), native.SOURCE
    assert name.startswith("grpo_desktop_native_") and name == native.build_name()
    changed = tmp_path / "native_decode.cpp"
    changed.write_text(native.SOURCE.read_text() + "\n// another version\n")
    monkeypatch.setattr(native, "SOURCE", changed)
    assert native.build_name() != name
    monkeypatch.setattr(native, "SOURCE", source)
    monkeypatch.setattr(native, "_cpu_identity", lambda: "another CPU")
    assert native.build_name() != name


def test_gpus_and_bfloat16_weights_get_no_log_line():
    assert native.describe_for(torch.device("cuda"), torch.float32) is None
    assert native.describe_for(torch.device("cpu"), torch.bfloat16) is None


def test_both_sources_compile_from_one_template():
    for source, present, absent in (
        (decode_script.SOURCE, "torch.softmax", "grpo_desktop"),
        (decode_script.NATIVE_SOURCE, "grpo_desktop.rope_attend", "softmax"),
    ):
        assert present in source and absent not in source
        assert "ATTENTION" not in source and "GATED" not in source and "NORM(" not in source
    assert decode_script.SOURCE.count("torch.rms_norm(h, [E], ") == 3
    assert decode_script.NATIVE_SOURCE.count("torch.ops.grpo_desktop.rms_norm(h, ") == 3
    assert decode_script.SOURCE.count("torch.ops.aten.linear(") == 5
    assert decode_script.NATIVE_SOURCE.count("torch.ops.grpo_desktop.linear(") == 5
    assert "aten.linear" not in decode_script.NATIVE_SOURCE


@pytest.mark.parametrize("mode", ["torch.inference_mode()", "torch.no_grad()"])
def test_a_process_whose_first_use_is_a_sampler_under_no_grad_gets_the_checked_kernels(ops, mode):
    # The load-time check runs the passes' attention backward: a process whose first kernel call
    # came from a sampler (grad off) had the check raise, lose the kernels, rebuild them for
    # nothing and leave a failure note for the cache (the Try window, evaluation, a bench).
    where, _ = native._library()
    code = f"""
import json, torch
from grpo_desktop.engine.ops import native
with {mode}:
    ops = native.decode_ops()
print(json.dumps({{"built": ops is not None, "line": native.describe(),
                  "attend": ops is not None and native.has_attend(ops)}}))
"""
    probe = _in_fresh_process({}, code)
    assert probe["built"] and probe["attend"] == native.has_attend(ops), probe["line"]
    assert probe["line"].startswith("fused decode kernels ")  # loaded (or built by a neighbour)
    assert not (where / native.FAILED).exists()


def test_cached_kernels_that_load_but_fail_their_check_are_not_rebuilt_and_the_reason_kept(
    ops, monkeypatch, tmp_path
):
    # The library's ops are registered once loaded: building the same source again could not
    # replace them, so the run goes on with torch's operations at once and later runs read why.
    # (Loading a second copy of the library into this process would abort it: its ops are
    # registered once, so the load and its check are what is replaced here.)
    library = tmp_path / "grpo_desktop_native.so"
    library.write_bytes(b"built before")
    monkeypatch.setattr(native, "_library", lambda: (tmp_path, library))
    wrong = (ops, "its attention differs from torch's")
    monkeypatch.setattr(native, "_load_checked", lambda path: wrong if path == library else None)

    def no_build(*args):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(native.native_build, "compile_library", no_build)
    got, why = native._build()
    assert got is None and why == "its attention differs from torch's on this machine"
    assert native._failed_before(tmp_path) == why

"""bench/kernel_levels.py through its real command line: each portable level and the native build
timed, and `--against` another native_decode.cpp: a column for it and, kernel by kernel, whether
its outputs are the same bits. Against a copy of this source the bits must agree; against a
source whose attention probabilities are nudged they must not.
Slow: run with `python -m pytest -m slow tests/bench/test_kernel_levels.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from grpo_desktop.engine.ops import native_build
from tests.support.paths import BENCH

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX") or "c++") is None, reason="no C++ compiler here"
)


def _run(against) -> str:
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH, "kernel_levels.py"), "--rounds", "1",
         "--threads", "1", "--against", str(against)],
        capture_output=True, text=True, timeout=580, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # about a minute: five or six compiles
@pytest.mark.timeout(1200)
def test_against_a_copy_and_against_nudged_probabilities(tmp_path):
    same = tmp_path / "same.cpp"
    shutil.copy(native_build.SOURCE, same)
    out = _run(same)
    header = next(line for line in out.splitlines() if line.startswith("| kernel |"))
    assert header.endswith("| native | against |")
    for kernel in ("rope_attend", "silu_mul", "rms_norm", "norm + backward", "swiglu + backward"):
        assert f"3M {kernel}: outputs the same bits" in out
        assert f"SmolLM2 {kernel}: outputs the same bits" in out
    assert "| 3M rope + backward: torch's |" in out  # the training layers beside torch's
    # The attention's probabilities nudged by 1e-6: other bits in the attention alone.
    text = native_build.SOURCE.read_text()
    other = tmp_path / "other.cpp"
    other.write_text(
        text.replace(
            "for (int64_t l = 0; l < L; ++l) scores[l] *= inv;",
            "for (int64_t l = 0; l < L; ++l) scores[l] = scores[l] * inv + 1e-6f;",
        )
    )
    assert other.read_text() != text
    out = _run(other)
    assert "3M rope_attend: outputs DIFFER" in out
    assert "3M silu_mul: outputs the same bits" in out

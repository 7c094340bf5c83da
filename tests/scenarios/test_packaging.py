"""The installer bundle: build it with PyInstaller and self-test it from a clean environment.

Slow (minutes) and needs `pip install pyinstaller`, so it only runs when asked:
    python -m pytest -m packaging
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

APP = os.path.join(ROOT, "build", "dist", "grpo-desktop", "grpo-desktop")


def clean_env(home: str) -> dict:
    """No virtualenv on PATH, no PYTHONPATH, a temporary HOME: as on a machine without Python."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "QT_QPA_PLATFORM": "offscreen",
        "LANG": "C.UTF-8",
    }


@pytest.mark.packaging
@pytest.mark.timeout(3600)
def test_bundle_builds_and_passes_its_self_test(tmp_path):
    pytest.importorskip("PyInstaller")
    build = subprocess.run(
        [sys.executable, os.path.join(ROOT, "packaging", "build.py"), "--variant", "cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert os.path.isfile(APP)
    result = subprocess.run(
        [APP, "--self-test"],
        env=clean_env(str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "self-test: all checks passed" in result.stdout
    if sys.platform.startswith("linux") and platform.machine() == "x86_64" and shutil.which("c++"):
        # build.py compiled the portable kernel builds and the app loaded the best for this CPU
        assert "fused decode kernels bundled with the app (x86-64-v" in result.stdout, result.stdout
    shot = tmp_path / "x.png"
    demo = subprocess.run(
        [APP, "--demo", "--autostart", "--quit-after-steps", "2", "--screenshot", str(shot)],
        env=clean_env(str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert shot.stat().st_size > 10_000

"""Build the GRPO Desktop installer for this platform.

    python packaging/build.py [--variant cpu|cuda] [--no-archive]

On Linux x86-64 it first compiles the fused CPU sampling kernels in portable builds (x86-64-v4,
v3 and v2; engine/ops/native_build.py) into build/kernels, which the bundle carries: a packaged
app cannot compile them on the user's machine (no torch headers there). Without a C++ compiler
here the bundle goes without them and the app says so in its run log. Then it runs PyInstaller
on packaging/grpo-desktop.spec (one-folder build into build/dist/grpo-desktop) and packages it:
- Linux: build/grpo-desktop-VERSION-linux-ARCH-VARIANT.tar.gz holding the app folder, a .desktop
  entry, the icon and install.sh (installs for the current user, no root needed).
- Windows: runs Inno Setup's `iscc` on packaging/windows/grpo-desktop.iss when it is on PATH.
- macOS: the spec also makes "GRPO Desktop.app"; a .dmg is made with `hdiutil` when present.

The variant is a property of the environment it builds from: `cuda` needs a CUDA build of torch
installed (see packaging/README.md), `cpu` the CPU build. Prints the build time and sizes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "build")
DIST = os.path.join(BUILD, "dist")
APP_DIR = os.path.join(DIST, "grpo-desktop")
KERNELS = os.path.join(BUILD, "kernels")


def version() -> str:
    sys.path.insert(0, ROOT)
    from grpo_desktop import __version__

    return __version__


def folder_size(path: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(base, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def check_variant(variant: str) -> None:
    import torch

    has_cuda_build = torch.version.cuda is not None
    if variant == "cuda" and not has_cuda_build:
        sys.exit(
            "The cuda variant needs a CUDA build of torch in this environment (this one is "
            f"{torch.__version__}). Install one from pytorch.org, then build again."
        )
    if variant == "cpu" and has_cuda_build:
        print(f"note: torch {torch.__version__} is a CUDA build; the bundle will include CUDA libs")


def build_kernels() -> str | None:
    """The portable kernel builds for the bundle, or None (not Linux x86-64, or no compiler)."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return None
    sys.path.insert(0, ROOT)
    from grpo_desktop.engine.ops import native_build

    t0 = time.time()
    try:
        manifest = native_build.build_bundled(KERNELS)
    except (native_build.BuildError, OSError) as exc:
        print(f"warning: no fused CPU sampling kernels in this bundle ({exc})")
        return None
    levels = ", ".join(manifest["levels"])
    print(f"kernels: {levels} for torch {manifest['torch']} in {time.time() - t0:.0f} s")
    return KERNELS


def run_pyinstaller(variant: str, kernels: str | None) -> None:
    env = dict(os.environ, GRPO_VARIANT=variant, GRPO_KERNELS=kernels or "")
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--distpath",
        DIST,
        "--workpath",
        os.path.join(BUILD, "work"),
        os.path.join(HERE, "grpo-desktop.spec"),
    ]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def package_linux(variant: str) -> str:
    name = f"grpo-desktop-{version()}-linux-{platform.machine()}-{variant}"
    stage = os.path.join(BUILD, name)
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    shutil.copytree(APP_DIR, os.path.join(stage, "grpo-desktop"), symlinks=True)
    shutil.copy(os.path.join(HERE, "linux", "grpo-desktop.desktop"), stage)
    shutil.copy(os.path.join(HERE, "linux", "install.sh"), stage)
    shutil.copy(os.path.join(ROOT, "resources", "icons", "grpo-desktop-256.png"), stage)
    os.chmod(os.path.join(stage, "install.sh"), 0o755)
    archive = stage + ".tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(stage, arcname=name)
    return archive


def package_windows() -> str | None:
    iscc = shutil.which("iscc") or shutil.which("ISCC.exe")
    if iscc is None:
        print(
            "Inno Setup (iscc) not found: install it, then run iscc packaging/windows/grpo-desktop.iss"
        )
        return None
    subprocess.run(
        [iscc, f"/DAppVersion={version()}", os.path.join(HERE, "windows", "grpo-desktop.iss")],
        check=True,
    )
    return os.path.join(BUILD, f"GRPO-Desktop-{version()}-setup.exe")


def package_macos() -> str | None:
    app = os.path.join(DIST, "GRPO Desktop.app")
    if shutil.which("hdiutil") is None:
        return app
    dmg = os.path.join(BUILD, f"GRPO-Desktop-{version()}.dmg")
    subprocess.run(
        [
            "hdiutil",
            "create",
            "-volname",
            "GRPO Desktop",
            "-srcfolder",
            app,
            "-ov",
            "-format",
            "UDZO",
            dmg,
        ],
        check=True,
    )
    return dmg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--variant", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-archive", action="store_true", help="stop after the app folder")
    args = parser.parse_args()
    check_variant(args.variant)
    t0 = time.time()
    run_pyinstaller(args.variant, build_kernels())
    built = time.time() - t0
    print(f"app folder: {APP_DIR} ({folder_size(APP_DIR) / 2**20:.0f} MiB), built in {built:.0f} s")
    if args.no_archive:
        return 0
    if sys.platform.startswith("linux"):
        result = package_linux(args.variant)
    elif sys.platform == "win32":
        result = package_windows()
    else:
        result = package_macos()
    if result and os.path.exists(result):
        size = os.path.getsize(result) if os.path.isfile(result) else folder_size(result)
        print(f"installer: {result} ({size / 2**20:.0f} MiB), total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

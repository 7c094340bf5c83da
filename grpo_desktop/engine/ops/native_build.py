"""Compiling the fused kernels (native_decode.cpp, native_attention.cpp, native_layers.cpp,
native_draw.cpp and their headers native_vec.h and native_products.h) into one library torch can load, for this CPU
or for the installers.

Two callers, one compile:
- ops/native.py compiles for this machine's CPU (`-march=native`) the first time a CPU decode
  wants the fused kernels, into the user's cache folder;
- packaging/build.py compiles the portable builds in LEVELS (`build_bundled`) into a folder the
  installer carries, with a manifest naming the torch and source they were built for, because a
  packaged app has neither torch's C++ headers nor, usually, a compiler.

The compile is the machine's C++ compiler called directly (an object per source, then the
library), with
torch's include and library folders: no build system, no setuptools, no Python
headers (the kernels register through TORCH_LIBRARY, not as a Python module). The link step gets
no -ffast-math: with it GCC would link crtfastmath.o, which switches the whole process to flush
denormals to zero when the library loads, changing torch's arithmetic everywhere.
A library is written under a temporary name and renamed into place, so a process loading it
never sees half a file and two processes building at once both end with a whole one.

Try it: python -c "from grpo_desktop.engine.ops import native_build as b; print(b.build_bundled('/tmp/k'))"
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("native_decode.cpp")  # the decode's kernels
# compiled beside it into the same library; the header is part of what a build is keyed by
OTHER_SOURCES = (
    Path(__file__).with_name("native_attention.cpp"),  # the passes' attention
    Path(__file__).with_name("native_layers.cpp"),  # the passes' norms, rotary, SwiGLU gate
    Path(__file__).with_name("native_draw.cpp"),  # the sampler's draw, small vocabularies
)
HEADERS = (
    Path(__file__).with_name("native_vec.h"),  # shared by the decode's and the passes' attention
    Path(__file__).with_name("native_products.h"),  # the decode's products (native_decode.cpp)
)
# -ffp-contract=off: the keys and values written are torch's bits (no fused multiply-adds);
# -fopenmp: `omp simd` loops and at::parallel_for's OpenMP backend (torch's own libgomp is
# already loaded when the library is, and the library uses it).
COMPILE_FLAGS = ["-O3", "-ffast-math", "-ffp-contract=off", "-fopenmp", "-fPIC", "-std=c++20"]
# Per source, after those: the draw repeats draw.py's float64 arithmetic to the bit and tests
# for non-finite totals, which -ffast-math would let the compiler reorder and assume away.
SOURCE_FLAGS = {"native_draw.cpp": ["-fno-fast-math"]}
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Level:
    """A portable x86-64 build: GCC's -march name and the /proc/cpuinfo flags a CPU needs for it."""

    name: str
    needs: frozenset[str]


_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
# Best first: AVX-512 CPUs (most Xeons, AMD Zen 4 and later) run the x86-64-v4 build as fast as
# a -march=native one; AVX2 CPUs (2013 on) the v3; anything older the v2.
LEVELS = (Level("x86-64-v4", _V4), Level("x86-64-v3", _V3), Level("x86-64-v2", _V2))


class BuildError(RuntimeError):
    """The compiler failed; the message ends with its last line of output."""


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as Linux reports them (empty where /proc/cpuinfo is missing)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def best_level(names: list[str], flags: frozenset[str]) -> Level | None:
    """The fastest of the levels `names` that a CPU with `flags` can run, or None."""
    for level in LEVELS:
        if level.name in names and level.needs <= flags:
            return level
    return None


def source_bytes(source: Path | None = None) -> bytes:
    """Every file a build compiles (SOURCE, or `source` in its place), in order: what a build
    is keyed by."""
    return b"".join(p.read_bytes() for p in (source or SOURCE, *OTHER_SOURCES, *HEADERS))


def source_digest() -> str:
    """A hash of the kernels' source: a library built from another source is not this one."""
    return hashlib.sha256(source_bytes()).hexdigest()[:16]


def compiler() -> str:
    """The C++ compiler to call: $CXX, else c++."""
    return os.environ.get("CXX", "c++")


def _run(*cmds: list[str], timeout: float = 600) -> None:
    """Run the commands at once (a compile per source: the cores share them) and wait for all;
    BuildError with the first failure's last error line."""
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd in cmds
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        raise BuildError(f"the compiler was still running after {timeout:.0f} s") from None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, output in zip(procs, outputs):
        if proc.returncode != 0:
            lines = output.strip().splitlines()
            errors = (
                [ln for ln in lines if "error" in ln] or lines or [f"exit status {proc.returncode}"]
            )
            raise BuildError(errors[-1].strip()[:200])


def compile_library(library: Path, target: list[str], source: Path | None = None) -> None:
    """Compile `source` (SOURCE unless told: a benchmark may build another version beside it)
    and OTHER_SOURCES into `library` with the `target` flags (`-march=...` and the like)."""
    import torch

    # torch's headers and libraries, where torch.utils.cpp_extension finds them (that module
    # itself is not imported: it needs setuptools, which a fresh virtual environment lacks).
    root = Path(torch.__file__).parent
    headers = [root / "include", root / "include" / "torch" / "csrc" / "api" / "include"]
    if not headers[0].is_dir():
        raise BuildError(f"torch's C++ headers are missing ({headers[0]})")
    library.parent.mkdir(parents=True, exist_ok=True)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    includes = [arg for path in headers for arg in ("-isystem", str(path))]
    includes += ["-I", str(SOURCE.parent)]  # the headers
    links = [f"-L{root / 'lib'}"]
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        out = Path(tmp) / library.name
        cxx = compiler()
        flags = [*COMPILE_FLAGS, *target, f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        sources = (source or SOURCE, *OTHER_SOURCES)
        objects = [str(Path(tmp) / f"{i}_{src.stem}.o") for i, src in enumerate(sources)]
        _run(*(
            [cxx, *flags, *SOURCE_FLAGS.get(src.name, []), *includes, "-c", str(src), "-o", obj]
            for src, obj in zip(sources, objects)
        ))  # fmt: skip
        _run([cxx, *objects, "-shared", "-fopenmp", *links, "-lc10", "-ltorch_cpu", "-o", str(out)])
        os.replace(out, library)


def build_bundled(folder: str | os.PathLike, levels_wanted=LEVELS) -> dict:
    """Compile the levels (every one in LEVELS unless told) into `folder` with their manifest,
    what packaging/build.py ships in the installer: {"torch": version, "source": digest,
    "levels": {level name: library file}}. The folder is emptied first."""
    import torch

    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    levels = {}
    for level in levels_wanted:
        name = f"grpo_desktop_native_{level.name.replace('-', '_')}.so"
        compile_library(folder / name, [f"-march={level.name}"])
        levels[level.name] = name
    manifest = {"torch": torch.__version__, "source": source_digest(), "levels": levels}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest

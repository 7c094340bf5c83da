"""The packaged app's fused kernels (engine/ops/native_build.py's portable builds, loaded by
engine/ops/native.py): the best build this CPU runs is loaded and checked, nothing is compiled,
and a bundle that does not fit (another torch, another source, no level this CPU runs, a damaged
file, an unreadable list) is refused with the reason while sampling keeps torch's operations.
The builds are real compiles, loaded in fresh processes as the packaged app loads them."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from grpo_desktop.engine.ops import native, native_build
from tests.engine.ops.test_native import PROBE, _in_fresh_process
from tests.support.paths import ROOT

V2, V3, V4 = native_build.LEVELS[2], native_build.LEVELS[1], native_build.LEVELS[0]


def test_the_best_level_is_the_fastest_this_cpu_runs_among_those_built():
    every = [level.name for level in native_build.LEVELS]
    assert native_build.best_level(every, V4.needs | {"amx_tile"}) == V4
    assert native_build.best_level(every, V3.needs) == V3  # AVX2, no AVX-512
    assert native_build.best_level(["x86-64-v3", "x86-64-v2"], V4.needs) == V3
    assert native_build.best_level(every, V3.needs - {"fma"}) == V2
    assert native_build.best_level(every, frozenset({"sse2"})) is None
    assert native_build.best_level(every, frozenset()) is None  # no /proc/cpuinfo


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle as packaging/build.py makes it, holding only the level this CPU runs best (one
    compile instead of three), or the test skips where nothing can be built."""
    level = native_build.best_level(
        [lv.name for lv in native_build.LEVELS], native_build.cpu_flags()
    )
    if level is None or shutil.which(native_build.compiler()) is None or native._switched_off():
        pytest.skip("no C++ compiler or no x86-64 level for this CPU")
    folder = tmp_path_factory.mktemp("bundle") / "kernels"
    manifest = native_build.build_bundled(folder, [level])
    assert manifest["levels"] == {
        level.name: f"grpo_desktop_native_{level.name.replace('-', '_')}.so"
    }
    assert manifest["torch"] == torch.__version__
    return folder, level


def test_the_app_loads_its_bundled_build_without_compiling(bundle, tmp_path):
    folder, level = bundle
    cache = tmp_path / "cache"
    # CXX=false: a compile would fail and say so; the bundle must not need one.
    env = {native.BUNDLED_ENV: str(folder), "XDG_CACHE_HOME": str(cache), "CXX": "false"}
    probe = _in_fresh_process(env, PROBE)
    assert probe["built"] and probe["script"] and not probe["announce"]
    assert probe["line"] == f"fused decode kernels bundled with the app ({level.name})"
    assert (
        probe["log"] == f"Faster CPU sampling: fused kernels bundled with the app ({level.name})."
    )
    assert probe["denormals_kept"]  # the library switched no flush-to-zero on for the process
    assert not cache.exists()  # nothing compiled, nothing cached


def _refusal(folder, tmp_path) -> str:
    """The run log's line for `folder` as the bundle, in a fresh process; nothing compiled."""
    cache = tmp_path / "cache"
    probe = _in_fresh_process(
        {native.BUNDLED_ENV: str(folder), "XDG_CACHE_HOME": str(cache)}, PROBE
    )
    assert not probe["built"] and not probe["script"] and not probe["announce"]
    assert probe["log"].endswith(
        "; sampling runs torch's operations instead (about a fifth slower on small models)."
    )
    assert not cache.exists()  # a packaged app's bundle is final: no compile in its place
    return probe["line"]


def _copy(bundle, tmp_path, change) -> str:
    folder, _ = bundle
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / native_build.MANIFEST).read_text())
    change(copy, manifest)
    (copy / native_build.MANIFEST).write_text(json.dumps(manifest))
    return str(copy)


def test_a_bundle_for_another_torch_is_refused_with_both_versions(bundle, tmp_path):
    folder = _copy(bundle, tmp_path, lambda _, m: m.update(torch="2.0.0+cpu"))
    line = _refusal(folder, tmp_path)
    assert (
        line
        == f"unavailable: the app's kernels were built for torch 2.0.0+cpu, not {torch.__version__}"
    )


def test_a_bundle_of_another_source_or_for_other_cpus_or_damaged_is_refused(bundle, tmp_path):
    # In this process: a refused bundle loads nothing, so the cases can follow one another.
    _, level = bundle
    other_source = _copy(bundle, tmp_path / "a", lambda _, m: m.update(source="0" * 16))
    ops, why = native._from_bundle(native.Path(other_source))
    assert (
        ops is None and why == "the app's kernels were built from another version of their source"
    )

    def other_cpus(copy, m):
        m["levels"] = {"x86-64-v9": m["levels"].pop(level.name)}

    ops, why = native._from_bundle(native.Path(_copy(bundle, tmp_path / "b", other_cpus)))
    assert (
        ops is None and why == "this CPU runs none of the app's builds (they need SSE4.2 at least)"
    )

    def damaged(copy, m):
        (copy / m["levels"][level.name]).write_bytes(b"not a library")

    ops, why = native._from_bundle(native.Path(_copy(bundle, tmp_path / "c", damaged)))
    assert ops is None and why.startswith(f"the app's {level.name} kernels are unloadable (")

    folder = _copy(bundle, tmp_path / "d", lambda copy, m: None)
    (tmp_path / "d" / "copy" / native_build.MANIFEST).write_text("{ half a list")
    line = _refusal(folder, tmp_path / "d")
    assert line.startswith("unavailable: the app's kernel list (") and line.endswith(
        ") is unreadable"
    )


def test_switched_off_wins_over_the_bundle(bundle, tmp_path):
    folder, _ = bundle
    env = {native.BUNDLED_ENV: str(folder), native.ENV: "0", "XDG_CACHE_HOME": str(tmp_path)}
    probe = _in_fresh_process(env, PROBE)
    assert not probe["built"] and probe["line"] == f"unavailable: switched off ({native.ENV}=0)"


def test_the_bundle_is_found_beside_the_engine_in_the_packaged_app():
    # packaging/grpo-desktop.spec puts build.py's kernels folder there.
    with open(os.path.join(ROOT, "packaging", "grpo-desktop.spec"), encoding="utf-8") as f:
        spec = f.read()
    assert '"grpo_desktop/engine/ops/bundled"' in spec
    assert native.BUNDLED.parts[-4:] == ("grpo_desktop", "engine", "ops", "bundled")


ATTEND_PROBE = """
import json, torch
from grpo_desktop.engine.ops import fused_attention, fused_layers, native
ops = native.decode_ops()
print(json.dumps({"line": native.describe(), "attend": fused_attention._ops() is not None,
                  "layers": fused_layers._ops() is not None}))
"""


@pytest.mark.slow
def test_the_passes_attention_is_in_the_avx2_and_avx512_builds_and_not_in_the_oldest(tmp_path):
    """x86-64-v3 and v4 carry `attend` and pass the load-time check with it; x86-64-v2 (no FMA:
    its loops were 7-12x slower than torch's attention) leaves it out and still loads. Every
    level carries the passes' norm, rotary and gate kernels (plain vector loops: faster than
    torch's operations at every level, bench/kernel_levels.py)."""
    flags = native_build.cpu_flags()
    levels = [lv for lv in native_build.LEVELS if lv.needs <= flags]
    if not levels or shutil.which(native_build.compiler()) is None or native._switched_off():
        pytest.skip("no C++ compiler or no x86-64 level for this CPU")
    for level in levels:
        folder = tmp_path / level.name
        native_build.build_bundled(folder, [level])
        probe = _in_fresh_process(
            {native.BUNDLED_ENV: str(folder), "XDG_CACHE_HOME": str(tmp_path / "cache")},
            ATTEND_PROBE,
        )
        assert probe["line"] == f"fused decode kernels bundled with the app ({level.name})"
        assert probe["attend"] is (level is not V2), level.name
        assert probe["layers"] is True, level.name

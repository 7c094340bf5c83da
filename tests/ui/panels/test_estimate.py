"""The "Will it fit?" estimate in the main window, with the real engine estimate
(engine/estimate/fit.py; only the free memory is given, so the verdicts do not depend on this
machine): the demo's parameters and memory parts, updates after edits in the real forms
(debounced: two quick edits make one estimate), "will not fit" with advice whose Apply button
changes the setting, an error as a one-line note, nothing while no model is chosen, the running
settings' estimate kept during a run. The estimate runs in its child process
(ui/panels/estimate_process.py, engine/estimate/server.py): one real child for the module;
newest wins, a child that dies is restarted once, the GUI process imports no torch and closing
the window ends the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication

from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.session.document import SessionDocument
from grpo_desktop.ui.main_window import MainWindow
from grpo_desktop.ui.panels import estimate_process, estimate_text
from grpo_desktop.ui.panels.estimate_process import EstimateProcess, device_facts
from grpo_desktop.ui.panels.estimate_text import fit_status, format_bytes, format_count
from grpo_desktop.ui.panels.estimate_view import FIRST, EstimateView
from grpo_desktop.ui.run.worker import RUNNING, STOPPED
from grpo_desktop.ui.session.model import SessionModel
from tests.support.fakes import make_fake_train
from tests.support.paths import ROOT

GB = 10**9
# Llama-3.2-1B's sizes (config.json only: the estimate reads nothing else of a model).
LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
}


def answers_of(estimator: EstimateProcess) -> list:
    got: list = []
    estimator.answered.connect(lambda *args: got.append(args))
    return got


def wait_for(qapp, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        qapp.processEvents()
        time.sleep(0.002)


def demo_request(**algorithm) -> dict:
    cfg = demo_config().replace(algorithm=algorithm) if algorithm else demo_config()
    return {"config": cfg.to_dict(), "free_bytes": 8 * GB, "device": None}


@pytest.fixture(scope="module")
def shared_estimator(qapp):
    """One real estimate child for the module's windows: its first estimate imports torch and
    transformers' model code and times the CPU (seconds), done once here."""
    estimator = EstimateProcess()
    got = answers_of(estimator)
    estimator.request(demo_request(), "warm")
    wait_for(qapp, lambda: got, timeout=120)
    assert got[0][1]["model"]["params"] == 1_595_136, got
    yield estimator
    estimator.stop()
    assert not estimator.running()


@pytest.fixture
def make_window(show_window, tmp_path, shared_estimator):
    def make(cfg=None, free_bytes: int = 8 * GB, train_fn=None) -> MainWindow:
        settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        w = MainWindow(
            cfg or demo_config(), train_fn or make_fake_train(), settings=settings,
            probe_device=False,
        )  # fmt: skip
        w.estimate_view.share_estimator(shared_estimator)
        show_window(w)
        w.estimate_view.start(free_bytes=free_bytes)
        return w

    return make


def wait_estimate(qtbot, w: MainWindow) -> dict | None:
    view = w.estimate_view
    qtbot.waitUntil(view.shown_for_current_settings, timeout=30_000)
    return view.result


def legend(w: MainWindow) -> dict[str, str]:
    return {key: label.text() for key, label in w.estimate_view.part_labels.items()}


def editor(w: MainWindow, name: str):
    return w.hyper_panel.forms["algorithm"].editors[("algorithm", name)].widget


def test_the_demo_model_shows_its_parameters_and_memory_parts(qtbot, make_window):
    w = make_window()
    r = wait_estimate(qtbot, w)
    view = w.estimate_view
    # builtin:demo: 1,595,136 parameters, all trained (full fine-tuning), float32 on the CPU:
    # 1,595,136 × 4 bytes = 6,380,544 bytes of weights.
    assert r["model"]["params"] == 1_595_136
    assert "1.6 M parameters, all trainable" in view.summary.text()
    assert r["memory"]["weights"] == 1_595_136 * 4
    assert "Weights 6.4 MB" in legend(w)["weights"]
    for key in ("adapters_optimizer", "activations", "logits", "kv_cache", "overhead"):
        assert format_bytes(r["memory"][key]) in legend(w)[key], key
        assert view.part_labels[key].toolTip(), key  # each part explains itself
    assert "KV cache" in legend(w)["kv_cache"]
    assert "keys and values" in view.part_labels["kv_cache"].toolTip()
    assert "G × completion" in view.part_labels["activations"].toolTip()
    # The bar holds the peak's parts (the sampling phase's are freed before training peaks).
    assert sum(v for _, v in view.bar.parts) == r["memory"]["needed"]
    assert view.bar.status == "fits" and view.bar.isVisible()
    assert f"of {format_bytes(8 * GB)} free RAM" in view.verdict.text()
    assert ">fits<" in view.verdict.text()
    assert "per step (rough)" in view.time_label.text()
    assert not view.advice_box.isVisible() and not view.note.isVisible()


def test_edits_in_the_real_form_update_it_once_after_a_pause_and_not_while_hidden(
    qtbot, make_window
):
    w = make_window()
    before = wait_estimate(qtbot, w)
    shown = []
    w.estimate_view.estimate_shown.connect(lambda: shown.append(w.estimate_view.result))
    w.docks["hyper"].raise_()
    editor(w, "num_generations").setValue(12)  # two quick edits: one estimate, of the last
    editor(w, "num_generations").setValue(16)
    after = wait_estimate(qtbot, w)
    assert len(shown) == 1 and w.model.config.algorithm.num_generations == 16
    # The KV cache holds every row being sampled: B × G = 4 × 8 = 32 rows before, 4 × 16 = 64
    # after; the tokens per row are the same, so it doubles.
    assert after["memory"]["kv_cache"] == 2 * before["memory"]["kv_cache"]
    assert format_bytes(after["memory"]["kv_cache"]) in legend(w)["kv_cache"]

    editor(w, "max_completion_length").setValue(320)
    longer = wait_estimate(qtbot, w)
    assert longer["assumed"]["completion_tokens"] == 320
    assert longer["memory"]["kv_cache"] > after["memory"]["kv_cache"]
    assert longer["seconds_per_step"] > after["seconds_per_step"]

    w.docks["estimate"].close()  # hidden: nothing is estimated ...
    editor(w, "num_generations").setValue(8)
    assert not w.estimate_view.pending()
    w.docks["estimate"].show()  # ... until it is shown again
    assert wait_estimate(qtbot, w)["memory"]["kv_cache"] < longer["memory"]["kv_cache"]


def test_too_little_memory_says_will_not_fit_and_apply_makes_the_change(
    qtbot, make_window, tmp_path
):
    folder = tmp_path / "llama-1b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_1B))
    cfg = demo_config().replace(model={"name_or_path": str(folder)})  # full fine-tuning
    w = make_window(cfg, free_bytes=8 * GB)
    r = wait_estimate(qtbot, w)
    view = w.estimate_view
    assert r["fits"] is False and view.bar.status == "no"
    assert "1.24 B parameters, all trainable" in view.summary.text()
    assert ">will not fit<" in view.verdict.text()
    assert view.advice_box.isVisible() and view.advice_labels
    texts = [label.text() for label in view.advice_labels]
    assert not any("4-bit" in t for t in texts)  # no 4-bit advice on the CPU
    lora = next(i for i, t in enumerate(texts) if "LoRA" in t)
    qtbot.mouseClick(view.advice_buttons[lora], Qt.MouseButton.LeftButton)
    assert w.model.config.lora.enabled is True
    assert w.model_panel.lora_form.editors[("lora", "enabled")].widget.isChecked()
    after = wait_estimate(qtbot, w)
    assert after["memory"]["adapters_optimizer"] < r["memory"]["adapters_optimizer"] / 10
    assert "trainable (" in view.summary.text()  # LoRA: a share of the parameters trains


def test_an_estimate_error_is_a_one_line_note(qtbot, make_window, tmp_path):
    w = make_window()
    box = w.model_panel.model_box
    box.lineEdit().clear()
    qtbot.keyClicks(box.lineEdit(), str(tmp_path / "no-such-model"))
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)
    wait_estimate(qtbot, w)
    view = w.estimate_view
    assert view.note.isVisible() and view.note.text().startswith("No estimate: ")
    assert "\n" not in view.note.text() and "no-such-model" in view.note.text()
    assert not view.bar.isVisible() and not view.legend.isVisible()
    assert QApplication.activeModalWidget() is None


def test_no_model_shows_a_dash_and_estimates_nothing(qtbot, make_window):
    w = make_window()
    view = w.estimate_view
    assert view.pending()  # the demo's estimate is due in 300 ms ...
    w.model.set_value("model", "name_or_path", "")
    assert not view.pending()  # ... and is called off
    assert view.summary.text().startswith("—") and "Choose a model" in view.summary.text()
    assert not view.bar.isVisible() and view.result is None


def test_during_a_run_it_keeps_the_running_settings_estimate(qtbot, make_window):
    w = make_window(train_fn=make_fake_train(delay=0.05))
    w.model.set_value("run", "max_steps", 1000)
    running = wait_estimate(qtbot, w)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: w.model.state == RUNNING, timeout=10_000)
    w.model.set_value("algorithm", "num_generations", 16)
    view = w.estimate_view
    assert not view.pending() and view.result is running
    assert view.run_note.isVisible() and "running settings" in view.run_note.text()
    w.model.stop()
    qtbot.waitUntil(lambda: w.model.state == STOPPED, timeout=10_000)
    after = wait_estimate(qtbot, w)  # the run ended: the edited settings are estimated
    assert after is not running and not view.run_note.isVisible()
    assert after["memory"]["kv_cache"] == 2 * running["memory"]["kv_cache"]


def test_fit_status_and_number_formats():
    # fits with ≥ 10 % of the free memory left, tight below that, no when it does not fit.
    assert fit_status(True, 5 * GB, 10 * GB) == "fits"
    assert fit_status(True, GB - 1, 10 * GB) == "tight"
    assert fit_status(False, -GB, 10 * GB) == "no"
    assert fit_status(None, None, None) == "unknown"
    assert [format_bytes(n) for n in (3.24e9, 412e6, 1.5e6, 96e3)] == [
        "3.2 GB", "412 MB", "1.5 MB", "96 KB"
    ]  # fmt: skip
    assert estimate_text.short_name("/home/me/models/llama-1b/") == "llama-1b"
    assert estimate_text.short_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert estimate_text.one_line(ValueError("No config.json in /x.\nDetails")) == (
        "No config.json in /x."
    )
    assert estimate_text.one_line(KeyError("vocab_size")) == (
        "the estimate failed (KeyError: 'vocab_size')"
    )
    assert [format_count(n) for n in (1_235_814_400, 494_032_768, 1_595_136, 51_000)] == [
        "1.24 B", "494 M", "1.6 M", "51 K"
    ]  # fmt: skip


def test_the_peak_holds_one_phase_and_advice_skips_4bit_on_the_cpu():
    # A run whose peak comes while sampling: the training passes' activations and logits are
    # freed by then, so the bar holds weights, training state, other and the sampling parts:
    # 100 + 20 + 30 + 400 + 50 = 600 MB = memory.needed.
    mem = {"weights": 100e6, "adapters_optimizer": 20e6, "overhead": 30e6, "activations": 300e6,
           "logits": 5e6, "kv_cache": 400e6, "sampling_other": 50e6, "outside_total": 0,
           "needed": 600e6, "peak_phase": "sampling"}  # fmt: skip
    advice = [
        {"text": f"change {i}", "change": {"algorithm": {"num_generations": i}}} for i in (2, 4)
    ]
    four_bit = {"text": "4-bit", "change": {"quantization": {"mode": "4bit"}}}
    r = {"memory": mem, "fits": False, "headroom_bytes": -100e6,
         "device": {"kind": "cpu", "free_bytes": 500e6},
         "advice_detail": [four_bit, *advice, {"text": "more"}, {"text": "and more"}]}  # fmt: skip
    parts = estimate_text.peak_parts(r)
    assert [k for k, _ in parts] == [
        "weights", "adapters_optimizer", "overhead", "outside_total", "kv_cache", "sampling_other"
    ]  # fmt: skip
    assert sum(v for _, v in parts) == mem["needed"]
    at_peak = {key: peak for key, _text, peak, _extra in estimate_text.legend(r)}
    assert not at_peak["activations"] and not at_peak["logits"] and at_peak["kv_cache"]
    assert [a["text"] for a in estimate_text.advice(r)] == ["change 2", "change 4", "more"]
    assert (
        estimate_text.advice({**r, "device": {"kind": "cuda", "free_bytes": 500e6}})[0] == four_bit
    )
    assert estimate_text.advice({**r, "fits": True, "headroom_bytes": 400e6}) == []
    # On a GPU the verdict speaks of GPU memory; 650 - 600 = 50 MB left is under 10 % of the
    # 650 MB free: tight.
    gpu = {**r, "fits": True, "headroom_bytes": 50e6,
           "device": {"kind": "cuda", "name": "RTX 3060", "free_bytes": 650e6}}  # fmt: skip
    text, lines = estimate_text.verdict(gpu)
    assert "Needs ≈ 600 MB of 650 MB free GPU memory" in text and ">tight<" in text
    assert lines[0].startswith("On RTX 3060")


def test_the_newest_request_wins(qapp, shared_estimator):
    est = shared_estimator
    got = answers_of(est)
    for g in (4, 12, 16):  # the child works on the first; 12 is superseded before it is sent
        est.request(demo_request(num_generations=g), g)
    wait_for(qapp, lambda: not est.busy())
    qapp.processEvents()
    assert [tag for tag, _r, _e in got] == [16]  # 4's answer came first, dropped
    est.request(demo_request(num_generations=8), 8)
    wait_for(qapp, lambda: len(got) == 2)
    # The answer shown was 16's: B × G = 4 × 16 rows of KV cache, twice 4 × 8's.
    assert got[0][1]["memory"]["kv_cache"] == 2 * got[1][1]["memory"]["kv_cache"]


# An RTX 4090 as the device probe reports it (ui/run/system_info.py's _PROBE).
PROBED_4090 = {"probed": True, "cuda": True, "gpu_name": "RTX 4090", "gpu_memory": 24 * 2**30,
               "gpu_free": 20 * 2**30, "gpu_props": {"major": 8, "minor": 9,
               "multi_processor_count": 128, "clock_rate": 2_520_000,
               "memory_clock_rate": 10_501_000, "memory_bus_width": 384}}  # fmt: skip


def test_a_probing_view_waits_for_the_probe_and_estimates_for_its_gpu(
    qtbot, tmp_path, shared_estimator
):
    model = SessionModel(SessionDocument(str(tmp_path / "s.grpo"), demo_config()))
    view = EstimateView(model)  # auto: as in a window that probes this computer
    view.share_estimator(shared_estimator)
    qtbot.addWidget(view)
    view.show()
    qtbot.wait(400)  # past the 300 ms pause: nothing is asked before the probe has answered
    assert not view.pending() and view.summary.text() == FIRST
    model.set_device_info(PROBED_4090)
    qtbot.waitUntil(view.shown_for_current_settings, timeout=30_000)
    # Estimated for the probed GPU from its facts alone (this machine may have no CUDA at all:
    # the child asks CUDA nothing), against the free memory the probe saw.
    device = view.result["device"]
    assert device["kind"] == "cuda" and device["name"] == "RTX 4090"
    assert device["free_bytes"] == 20 * 2**30 and device["total_bytes"] == 24 * 2**30
    assert view.result["assumed"]["dtype"] == "bfloat16"  # compute capability 8.9
    assert "free GPU memory" in view.verdict.text()
    view.stop()


def test_device_facts_from_the_probe():
    assert device_facts({}) is None  # not probed yet: the child finds the device itself
    assert device_facts({"probed": True, "error": "ImportError: torch"}) is None
    assert device_facts({"probed": True, "cuda": False}) == {"kind": "cpu"}
    old = {k: v for k, v in PROBED_4090.items() if k != "gpu_props"}  # a probe without them
    assert device_facts(old) is None
    facts = device_facts(PROBED_4090)
    assert facts["kind"] == "cuda" and facts["free_bytes"] == 20 * 2**30
    assert facts["multi_processor_count"] == 128 and facts["total_bytes"] == 24 * 2**30


# A stand-in child (a real process, a few lines of Python): it dies on its first request while
# the marker file is missing (creating it), and answers every request after that.
DIES_ONCE = """
import json, os, sys
marker = sys.argv[1]
for line in sys.stdin:
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    sys.stdout.write(json.dumps({"id": json.loads(line)["id"], "result": {"pid": os.getpid()}}))
    sys.stdout.write("\\n")
    sys.stdout.flush()
"""


def test_a_child_that_dies_is_restarted_once_and_asked_again(qapp, monkeypatch, tmp_path):
    marker = str(tmp_path / "died")
    command = (sys.executable, ["-c", DIES_ONCE, marker])
    monkeypatch.setattr(estimate_process, "server_command", lambda: command)
    est = EstimateProcess()
    got = answers_of(est)
    est.request(demo_request(), "first")
    wait_for(qapp, lambda: got, timeout=30)
    assert os.path.exists(marker)  # the first child died with the request in it ...
    ((tag, result, error),) = got
    assert tag == "first" and error is None  # ... the second answered it
    assert result["pid"] == est._proc.processId()
    est.stop()
    assert not est.running()


def test_a_child_that_keeps_dying_is_a_one_line_note(qapp, monkeypatch):
    # A child program that exits at once (a stand-in for a broken Python environment).
    code = "import sys; sys.stderr.write('ImportError: no torch here\\n'); sys.exit(3)"
    monkeypatch.setattr(estimate_process, "server_command", lambda: (sys.executable, ["-c", code]))
    est = EstimateProcess()
    got = answers_of(est)
    est.request(demo_request(), "x")
    wait_for(qapp, lambda: got, timeout=30)
    ((_tag, result, error),) = got
    assert result is None and "\n" not in error
    assert error.startswith("the estimate process exited with code 3 twice in a row")
    assert "no torch here" in error and "Change a setting to try again" in error
    est.stop()


def test_the_window_imports_no_torch_and_closing_it_ends_the_child():
    """A fresh window process (offscreen) with a real estimate: torch stays out of it (the
    child has it), and closing the window ends the child without Qt's "Destroyed while process
    is still running"."""
    root = Path(ROOT)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    run = subprocess.run(
        [sys.executable, str(root / "bench" / "estimate_stalls.py")],
        capture_output=True, text=True, timeout=180, env=env, cwd=root,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["params"] == 1_595_136 and not out["error"], out
    assert out["torch_in_gui"] is False
    assert out["child_pid"] and out["child_gone_after_close"] is True
    assert "QProcess" not in run.stderr, run.stderr


def test_a_run_shows_its_measured_time_per_step_while_the_settings_are_its_own(qtbot, make_window):
    """The estimate's time is made before Start; under it, what the run's steps really took (the
    median of the last 10): shown during the run (an edit then changes nothing, as for the
    estimate of the running settings), and after it while the settings are the run's."""
    from grpo_desktop.engine.events import StepMetrics

    def timed_train(config, control, run_dir=None, resume=False):
        for event in make_fake_train(delay=0.02)(config, control, run_dir, resume):
            if isinstance(event, StepMetrics):  # 0.6, 0.7, … 1.7 s
                event.metrics["step_time"] = 0.5 + 0.1 * event.step
            yield event

    w = make_window(train_fn=timed_train)
    w.model.set_value("run", "max_steps", 12)
    wait_estimate(qtbot, w)
    view = w.estimate_view
    assert view.measured_label.isHidden()  # nothing measured before a run
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: view.measured_label.isVisible(), timeout=10_000)
    w.model.set_value("algorithm", "num_generations", 16)  # during the run: still shown
    assert view.measured_label.isVisible()
    qtbot.waitUntil(lambda: not w.model.runner.active, timeout=20_000)
    # steps 3 … 12 took 0.8 … 1.7 s: their median is 1.25 s
    assert view.measured_label.text() == (
        "Measured in this run: 1.25 s per step (the median of the last 10)"
    )
    assert view.measured_label.isHidden()  # the run ended; the form holds other settings
    w.model.set_value("algorithm", "num_generations", 8)  # the run's settings again
    assert view.measured_label.isVisible()
    w.model.set_value("run", "max_steps", 50)  # the step count changes no step's time
    assert view.measured_label.isVisible()
    w.model.set_value("algorithm", "num_generations", 4)
    assert view.measured_label.isHidden()

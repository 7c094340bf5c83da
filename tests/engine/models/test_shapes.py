"""Realistic-shape test models (engine/models/shapes.py): they load through the app's own loader and
generate, and their tokenizers behave as the real families' do (vocabulary size, EOS ids, pad,
BOS, chat template with a system prompt)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from grpo_desktop.engine.config import TrainConfig
from grpo_desktop.engine.models.loading import load_policy
from grpo_desktop.engine.sampling.rollout import generate_completions, tokenize_prompts

QWEN, LLAMA = "qwen2.5-0.5b-shaped", "llama-3-shaped"


def test_qwen_shape_loads_through_load_policy_and_generates(shaped_model_dir):
    folder = shaped_model_dir(QWEN)
    policy = load_policy(TrainConfig().replace(model={"name_or_path": folder}))
    config = policy.model.config
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (
        896,
        4864,
        2,
    )
    assert (config.num_attention_heads, config.num_key_value_heads) == (14, 2)
    assert config.tie_word_embeddings and config.rope_parameters["rope_theta"] == 1e6
    assert config.vocab_size == 151_936
    # 151,936 × 896 tied embedding + 2 layers of 14.9M (attention 1.84M with biases, MLP 13.08M)
    total, trainable = policy.num_parameters()
    assert 165e6 < total < 168e6 and 0 < trainable < total
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], tokenize=False, add_generation_prompt=True
    )
    ids, mask = tokenize_prompts(policy.tokenizer, [prompt] * 2, 64, policy.device)
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=3)
    assert comps.completion_ids.shape == (2, 3)
    assert int(comps.completion_ids.max()) < 151_936


def test_qwen_tokenizer_has_the_real_layout(shaped_model_dir):
    folder = shaped_model_dir(QWEN)
    tok = AutoTokenizer.from_pretrained(folder)
    # 151,643 BPE entries + 22 added tokens; the embedding has 271 spare rows, as Qwen2.5's has
    assert len(tok) == 151_665
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
        151643,
        151644,
        151645,
    ]
    assert tok.convert_tokens_to_ids("<|file_sep|>") == 151664
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert (
        tok("hello world")["input_ids"] == tok("hello world", add_special_tokens=False)["input_ids"]
    )  # no BOS
    assert tok.decode(tok("The sum of 12 and 30 is 42.")["input_ids"]) == (
        "The sum of 12 and 30 is 42."
    )
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    own = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
    )
    assert own == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    gen = GenerationConfig.from_pretrained(folder)
    assert gen.eos_token_id == [151645, 151643] and gen.pad_token_id == 151643
    assert (gen.repetition_penalty, gen.top_k, gen.top_p, gen.temperature) == (1.1, 20, 0.8, 0.7)


def test_qwen_variant_without_pad_token(shaped_model_dir):
    tok = AutoTokenizer.from_pretrained(shaped_model_dir("qwen2.5-0.5b-shaped-nopad"))
    assert tok.pad_token is None and tok.eos_token == "<|im_end|>" and len(tok) == 151_665


def test_llama_shape_tokenizer_adds_its_bos_and_lists_three_eos_ids(shaped_model_dir):
    folder = shaped_model_dir(LLAMA)
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == 128_256
    assert (tok.bos_token_id, tok.eos_token, tok.eos_token_id) == (128000, "<|eot_id|>", 128009)
    assert tok.pad_token is None
    assert tok.convert_tokens_to_ids(["<|end_of_text|>", "<|eom_id|>"]) == [128001, 128008]
    ids = tok("2 + 2")["input_ids"]
    assert ids[0] == 128000 and ids[1:] == tok("2 + 2", add_special_tokens=False)["input_ids"]
    text = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    gen = GenerationConfig.from_pretrained(folder)
    assert gen.eos_token_id == [128001, 128008, 128009]
    config = json.loads(Path(folder, "config.json").read_text(encoding="utf-8"))
    assert config["vocab_size"] == 128_256 and config["architectures"] == ["LlamaForCausalLM"]


def test_llama_base_shape_has_no_chat_template(shaped_model_dir):
    folder = shaped_model_dir("llama-3-base-shaped")
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template is None
    assert (tok.eos_token, tok.bos_token) == ("<|end_of_text|>", "<|begin_of_text|>")
    assert GenerationConfig.from_pretrained(folder).eos_token_id == 128001


def test_llama_shape_loads_through_load_policy_and_generates(shaped_model_dir):
    policy = load_policy(TrainConfig().replace(model={"name_or_path": shaped_model_dir(LLAMA)}))
    assert policy.model.config.vocab_size == 128_256
    ids, mask = tokenize_prompts(policy.tokenizer, ["What is 2 + 2?"] * 2, 32, policy.device)
    comps = generate_completions(policy.model, policy.tokenizer, ids, mask, max_new_tokens=4)
    assert comps.completion_ids.shape[0] == 2 and 1 <= comps.completion_ids.shape[1] <= 4


def test_favoured_model_emits_that_token_whatever_the_input(shaped_model_dir):
    folder = shaped_model_dir(LLAMA, favour="<|end_of_text|>")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(["What is 2 + 2?", "Hello there, how are you today"], padding=False)["input_ids"]
    with torch.no_grad():
        for row in ids:
            logits = model(torch.tensor([row])).logits[0]  # (T, V)
            assert (logits.argmax(-1) == 128001).all()


def test_command_line_builds_a_folder(tmp_path):
    out = tmp_path / "llama"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_desktop.engine.models.shapes", str(out), "--shape", LLAMA],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"] == 2
    assert (out / "model.safetensors").stat().st_size < 80e6  # bfloat16: 34M parameters × 2 B


def test_qwen_1_5b_shape_at_full_depth_has_the_real_parameter_count():
    """bench/gpu.py --all builds it at 28 layers. Counted on the meta device (nothing allocated):
    151,936 × 1536 tied embedding = 233,373,696, plus 28 layers of 46,797,824 (attention 5,507,072
    with q/k/v biases, MLP 3 × 1536 × 8960 = 41,287,680, two norms 3,072) = 1,310,339,072, plus
    the final norm 1536: 1,543,714,304, Qwen2.5-1.5B's own count."""
    import pytest
    from transformers.initialization import no_init_weights

    from grpo_desktop.engine.models.shapes import MAX_LAYERS, SHAPES, build_shaped, model_config

    config = model_config(SHAPES["qwen2.5-1.5b-shaped"], layers=28)
    with torch.device("meta"), no_init_weights():  # initialising meta tensors alone takes 4 s
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # as build_shaped does: skipped with the init
    assert sum(p.numel() for p in model.parameters()) == 1_543_714_304
    assert config.tie_word_embeddings and config.hidden_size == 1536
    assert (config.num_attention_heads, config.num_key_value_heads) == (12, 2)
    with pytest.raises(ValueError, match=f"layers must be 1 to {MAX_LAYERS}"):
        build_shaped("/nonexistent", "qwen2.5-1.5b-shaped", layers=MAX_LAYERS + 1)

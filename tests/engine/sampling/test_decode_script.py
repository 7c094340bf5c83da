"""The lean decode step's layers in TorchScript (engine/sampling/decode_script.py, issue 28): the
very bits of the Python step on Llama and Qwen2 (biases) with left padding, so the sampler draws
the same tokens; used only where it runs what the Python step runs (joined F.linear products,
rms_norm, SiLU), and when TorchScript cannot compile the Python step decodes as before."""

from __future__ import annotations

import pytest
import torch

from grpo_desktop.engine.models.tiny import build_tiny_model
from grpo_desktop.engine.ops import kernels, native
from grpo_desktop.engine.sampling import decode, decode_script, sampler
from grpo_desktop.engine.sampling.rollout import tokenize_prompts

PROMPTS = ["<|user|>What is 17 × 24?<|end|><|assistant|>", "<|user|>Hi<|end|><|assistant|>"]


def _model(folder_factory, arch: str, **config):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(str(folder_factory.mktemp(arch)), "tiny", 5, arch)
    cfg = AutoConfig.from_pretrained(folder)
    for key, value in config.items():
        setattr(cfg, key, value)
    model = AutoModelForCausalLM.from_pretrained(folder, config=cfg).eval()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model_and_tokenizer(request, tmp_path_factory):
    return _model(tmp_path_factory, request.param)


def _lean(model, tok, monkeypatch, scripted: bool):
    monkeypatch.setattr(decode, "SCRIPTED", scripted)
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))  # left-padded
    ids, mask = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)  # (6, P)
    assert bool((mask == 0).any())
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    _, cache = sampler._prefill(model, ids, mask, positions)
    lean = decode.lean_decoder(model, cache, ids.size(1) + 12)
    lean.start(mask, positions[:, -1:] + 1)
    return lean


@torch.no_grad()
@pytest.mark.parametrize("fused", [False, True], ids=["torch-ops", "fused-kernels"])
def test_the_scripted_step_gives_the_python_steps_bits(
    model_and_tokenizer, monkeypatch, choose_linear, fused
):
    """Either way the attention runs: torch's operations (decode_script.SOURCE against
    decode.py's _attend) or ops/native.py's kernels (NATIVE_SOURCE against the Python step's
    calls of them), where those are built."""
    if fused and native.decode_ops() is None:
        pytest.skip(f"fused kernels not built here: {native.describe()}")
    monkeypatch.setattr(decode, "NATIVE", fused)
    choose_linear("0")
    model, tok = model_and_tokenizer
    scripted = _lean(model, tok, monkeypatch, True)
    python = _lean(model, tok, monkeypatch, False)
    assert scripted.script is not None and python.script is None
    assert (scripted.native is not None) == fused and (python.native is not None) == fused
    if model.config.model_type == "qwen2":
        assert scripted.script_args[4][0] is not None  # the q/k/v bias goes in
    generator = torch.Generator().manual_seed(0)
    for _ in range(12):
        tokens = torch.randint(0, model.config.vocab_size, (6,), generator=generator)
        assert torch.equal(scripted.step(tokens), python.step(tokens))
    for mine, theirs in zip(scripted.keys + scripted.values, python.keys + python.values):
        assert torch.equal(mine, theirs)  # the same keys and values written into the buffers


@torch.no_grad()
def test_the_sampler_draws_the_same_tokens_scripted_or_not(
    model_and_tokenizer, monkeypatch, choose_linear
):
    choose_linear("0")  # F.linear products: the scripted step is the one compared
    model, tok = model_and_tokenizer
    ids, mask = tokenize_prompts(tok, PROMPTS, 64, torch.device("cpu"))
    ids, mask = ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0)
    runs = []
    for scripted in (True, False):
        monkeypatch.setattr(decode, "SCRIPTED", scripted)
        torch.manual_seed(3)
        runs.append(
            sampler.sample_tokens(
                model, ids, mask, max_new_tokens=20, eos_id=[10**6], pad_id=0, temperature=1.0
            )
        )
        assert sampler.last_decode_path() == "lean"
    assert runs[0].shape == (8, 20) and torch.equal(runs[0], runs[1])


@torch.no_grad()
def test_steps_it_does_not_cover_stay_in_python(model_and_tokenizer, monkeypatch, choose_linear):
    model, tok = model_and_tokenizer
    monkeypatch.setattr(decode, "NATIVE", False)  # torch's products: F.linear or oneDNN's
    choose_linear("0")
    monkeypatch.setattr(decode, "JOIN_LIMIT", 0)  # q, k and v as three products
    assert _lean(model, tok, monkeypatch, True).script is None
    monkeypatch.setattr(decode, "JOIN_LIMIT", 64 * 2**20)
    if kernels._op() is not None:
        choose_linear("1")  # oneDNN's product for every shape
        assert _lean(model, tok, monkeypatch, True).script is None


@torch.no_grad()
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_with_the_fused_kernels_every_product_is_their_linear(
    tmp_path_factory, monkeypatch, choose_linear, arch
):
    """The kernels' `linear` takes every float32 product, whichever product ops/kernels.py
    would choose (oneDNN's here), and the step stays scripted; a product it cannot take (a
    weight that is not contiguous) keeps torch's, and the step then runs in Python."""
    if native.decode_ops() is None:
        pytest.skip(f"fused kernels not built here: {native.describe()}")
    monkeypatch.setattr(decode, "NATIVE", True)
    choose_linear("1")
    model, tok = _model(tmp_path_factory, arch)  # its own: the output layer is changed below
    lean = _lean(model, tok, monkeypatch, True)
    products = [lean.head] + [p for s in lean.steps for p in (s.qkv, s.o, s.gate_up, s.down)]
    assert all(fn is native.decode_ops().linear for p in products for fn in p.fns)
    assert lean.script is not None
    head = model.lm_head.weight.detach()
    model.lm_head.weight = torch.nn.Parameter(head.t().contiguous().t())  # (V, E), not contiguous
    lean = _lean(model, tok, monkeypatch, True)
    assert lean.head.fns[0] is not native.decode_ops().linear and lean.script is None


@torch.no_grad()
def test_another_activation_stays_in_python(tmp_path_factory, monkeypatch):
    model, tok = _model(tmp_path_factory, "llama", hidden_act="gelu")
    lean = _lean(model, tok, monkeypatch, True)
    assert lean is not None and lean.script is None


@torch.no_grad()
def test_when_torchscript_cannot_compile_the_python_step_runs(model_and_tokenizer, monkeypatch):
    def broken(source):
        raise RuntimeError("no TorchScript here")

    monkeypatch.setattr(decode_script, "_compiled", {})
    monkeypatch.setattr(torch.jit, "CompilationUnit", broken)
    assert decode_script.layers_step() is None
    model, tok = model_and_tokenizer
    lean = _lean(model, tok, monkeypatch, True)
    assert lean.script is None
    assert lean.step(torch.zeros(6, dtype=torch.long)).shape == (6, model.config.vocab_size)


@torch.no_grad()
def test_a_scripted_step_that_fails_goes_on_in_python(
    model_and_tokenizer, monkeypatch, choose_linear
):
    """Insurance for what the checks did not foresee: the step is redone in Python (its keys
    and values written again) and the decoder stays in Python."""
    choose_linear("0")  # F.linear products (not oneDNN's, which a timing may pick): scripted
    model, tok = model_and_tokenizer
    scripted = _lean(model, tok, monkeypatch, True)
    python = _lean(model, tok, monkeypatch, False)
    compiled = scripted.script
    assert compiled is not None
    calls = []

    def failing(*args):
        calls.append(1)
        compiled(*args)  # writes into the buffers, then fails
        raise RuntimeError("something the checks missed")

    scripted.script = failing
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        tokens = torch.randint(0, model.config.vocab_size, (6,), generator=generator)
        assert torch.equal(scripted.step(tokens), python.step(tokens))
    assert calls == [1] and scripted.script is None


def test_the_compiled_step_calls_only_torch_operators():
    """A frozen build keeps no .py sources: a Python function called from the script (as
    torch.nn.functional.silu once was) would have to be compiled from its source there, fail,
    and leave the bundle on the slower Python step."""
    graph = str(decode_script.layers_step().graph)
    assert "prim::CallFunction" not in graph and "aten::silu" in graph

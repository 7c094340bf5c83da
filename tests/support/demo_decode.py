"""The shipped demo model decoding its own prompts through `sample_tokens`, the lean decoder's
rows counted: what test_live_rows.py and test_twin_rows.py compare decodes with."""

from __future__ import annotations

import torch

from grpo_desktop.engine.sampling import decode, sampler
from grpo_desktop.engine.sampling.rollout import tokenize_prompts


def demo_prompts(problems: list[str], copies: int):
    """(model, tokenizer, ids, mask): the demo model and its prompts for `problems` ("17 × 24"),
    each repeated `copies` times in a row, as a step's groups are; left-padded."""
    from importlib import resources

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_desktop.engine.config.demo import demo_config
    from grpo_desktop.engine.data.dataset import build_prompt

    folder = str(resources.files("grpo_desktop") / "resources" / "demo_model")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    system = demo_config().data.system_prompt
    texts = [build_prompt(tok, f"What is {p}?", system) for p in problems for _ in range(copies)]
    ids, mask = tokenize_prompts(tok, texts, 256, torch.device("cpu"))  # (N, P)
    return model, tok, ids, mask


def counted_decode(monkeypatch, model, ids, mask, stops, pad, seed: int, **sampling):
    """(tokens, entropies, streamed tokens, decoder rows of each step) of one `sample_tokens`
    call (160 new tokens unless `max_new_tokens` says), seeded; the lean decoder's real step
    runs under a spy that counts its rows."""
    rows = []
    real = decode.LeanDecoder.step

    def counting(self, tokens):  # a spy: the real step runs
        rows.append(tokens.size(0))
        return real(self, tokens)

    monkeypatch.setattr(decode.LeanDecoder, "step", counting)
    streamed, entropy = [], []
    sampling.setdefault("max_new_tokens", 160)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = sampler.sample_tokens(
            model, ids, mask, eos_id=stops, pad_id=pad, entropy=entropy,
            on_token=lambda t, tokens: streamed.append(tokens.clone()), **sampling,
        )  # fmt: skip
    monkeypatch.setattr(decode.LeanDecoder, "step", real)
    assert sampler.last_decode_path() == "lean"
    return out, entropy[0], torch.stack(streamed, dim=1), rows

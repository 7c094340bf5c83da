"""An Ollama `Modelfile` for an exported GGUF file: FROM, TEMPLATE, stop tokens, defaults.

Ollama does not run the model's Jinja chat template; it needs a Go template. The translation is
by behaviour, not by parsing Jinja: the model's template is rendered on probe conversations with
marker texts, matched against the known message layouts (ChatML as in Qwen, Llama 3's headers,
the `<|role|>...<|end|>` layout), and accepted only if it reproduces the model's rendering of
every probe exactly (`chat_form`); it is then written as a Go template over Ollama's `.System`
and `.Messages`. A template that matches no layout gets a plain template and a comment saying so;
the original still travels in the GGUF file, which llama.cpp and LM Studio use directly.

A run trained on one of Ollama's own models (its weights blob as model.name_or_path; see
models/local_models.py) goes back to Ollama under the original's name plus '-grpo'
(`qwen2.5:0.5b` → `qwen2.5-0.5b-grpo`, `grpo_model_name`): `back_to_ollama` rewrites the
Modelfile with the original's Go template, stop words and parameters as Ollama keeps them, and
the run's system prompt as SYSTEM, and the export's summary carries the `ollama create` line.
Every GGUF export's Modelfile ends with what the run trained under (`conversation_lines`): its
system prompt as SYSTEM and its worked example as `MESSAGE user` / `MESSAGE assistant` lines, an
earlier exchange Ollama puts before every chat.

Try it:  python -c "from grpo_desktop.engine.export.modelfile import chat_form; \\
from grpo_desktop.engine.models.tiny import build_tokenizer; print(chat_form(build_tokenizer()))"
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# Layouts: per role, the text before and after a message's content.
LAYOUTS = {
    "ChatML": (lambda role: f"<|im_start|>{role}\n", lambda role: "<|im_end|>\n"),
    "Llama 3": (
        lambda role: f"<|start_header_id|>{role}<|end_header_id|>\n\n",
        lambda role: "<|eot_id|>",
    ),
    "role tags": (lambda role: f"<|{role}|>", lambda role: "<|end|>"),
    "role tags with newlines": (lambda role: f"<|{role}|>\n", lambda role: "<|end|>\n"),
}
_S, _U1, _A1, _U2 = "SYSmark7q", "USRmark3x", "ASTmark5k", "USRmark9w"


@dataclass
class ChatForm:
    """A chat template as a layout plus what the model's template adds to it."""

    layout: str
    lead: str  # text before the first block (a BOS the template writes itself)
    system_prefix: str  # written before a system prompt's text, inside its block
    system_suffix: str
    default_system: str | None  # the system block's content without a system message
    generation: str  # the text that opens the assistant's answer

    def open(self, role: str) -> str:
        return LAYOUTS[self.layout][0](role)

    def close(self, role: str) -> str:
        return LAYOUTS[self.layout][1](role)

    def render(self, messages: list[dict]) -> str:
        """The prompt this form writes (with the generation prompt), as Ollama would."""
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        parts = [self.lead]
        if system is not None:
            content = self.system_prefix + system + self.system_suffix
            parts.append(self.open("system") + content + self.close("system"))
        elif self.default_system is not None:
            parts.append(self.open("system") + self.default_system + self.close("system"))
        for m in messages:
            if m["role"] in ("user", "assistant"):
                parts.append(self.open(m["role"]) + m["content"] + self.close(m["role"]))
        return "".join(parts) + self.generation

    def end_text(self) -> str:
        """The text that ends the assistant's answer (its stop token), stripped."""
        return self.close("assistant").strip()


def _render(tok, messages: list[dict]) -> str | None:
    try:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception:  # a template that refuses a probe (e.g. system messages) fits no layout
        return None


def _probes() -> list[list[dict]]:
    system = {"role": "system", "content": _S}
    turns = [
        {"role": "user", "content": _U1},
        {"role": "assistant", "content": _A1},
        {"role": "user", "content": _U2},
    ]
    return [[system, turns[0]], [turns[0]], turns, [system, *turns]]


def _fit(tok, layout: str, renders: list[str]) -> ChatForm | None:
    """The form of `layout` read off the renders, or None where it cannot be."""
    head, tail = LAYOUTS[layout]
    with_system, without_system = renders[0], renders[1]
    start = with_system.find(head("system"))
    if start < 0 or _S not in with_system:
        return None
    after_head = start + len(head("system"))
    at_marker = with_system.find(_S)
    user_block = tail("system") + head("user") + _U1
    end = with_system.find(user_block, at_marker)
    if at_marker < after_head or end < 0:
        return None
    lead = with_system[:start]
    prefix, suffix = with_system[after_head:at_marker], with_system[at_marker + len(_S) : end]
    generation = with_system[end + len(user_block) + len(tail("user")) :]
    rest = without_system[len(lead) :] if without_system.startswith(lead) else None
    if rest is None:
        return None
    default = None
    if rest.startswith(head("system")):
        closing = rest.find(tail("system") + head("user") + _U1)
        if closing < 0:
            return None
        default = rest[len(head("system")) : closing]
    form = ChatForm(layout, lead, prefix, suffix, default, generation)
    return form if all(form.render(p) == r for p, r in zip(_probes(), renders)) else None


def chat_form(tok) -> ChatForm | None:
    """The layout of `tok`'s chat template that reproduces it on every probe, or None."""
    if not getattr(tok, "chat_template", None):
        return None
    renders = [_render(tok, p) for p in _probes()]
    if any(r is None for r in renders):
        return None
    for layout in LAYOUTS:
        form = _fit(tok, layout, renders)
        if form is not None:
            return form
    return None


def go_template(form: ChatForm, bos_text: str | None, add_bos: bool) -> str:
    """`form` as an Ollama Go template. A BOS the template writes is left out when the
    tokenizer adds it anyway (llama.cpp puts it in front of every prompt)."""
    lead = form.lead
    if add_bos and bos_text and lead.startswith(bos_text):
        lead = lead[len(bos_text) :]
    sys_open, sys_close = form.open("system"), form.close("system")
    with_system = sys_open + form.system_prefix + "{{ .System }}" + form.system_suffix + sys_close
    if form.default_system == form.system_prefix + form.system_suffix:
        system = with_system  # written even without a system prompt (Llama 3's dates)
    else:
        default = "" if form.default_system is None else sys_open + form.default_system + sys_close
        otherwise = "{{ else }}" + default if default else ""
        system = "{{ if .System }}" + with_system + otherwise + "{{ end }}"
    user = form.open("user") + "{{ .Content }}" + form.close("user")
    assistant = (
        form.open("assistant") + "{{ .Content }}{{ if not $last }}" + form.close("assistant")
        + "{{ end }}"
    )  # fmt: skip
    messages = (
        "{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
        '{{ if eq .Role "user" }}' + user + '{{ else if eq .Role "assistant" }}' + assistant
        + '{{ end }}{{ if and $last (ne .Role "assistant") }}' + form.generation
        + "{{ end }}{{ end }}"
    )  # fmt: skip
    return lead + system + messages


PLAIN_TEMPLATE = "{{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def modelfile(
    gguf_name: str,
    tok,
    stops: list[str],
    generation: dict,
    context_length: int,
    add_bos: bool,
    form: ChatForm | None,
) -> str:
    """The Modelfile text for `gguf_name` (a file next to it)."""
    lines = [
        "# Ollama Modelfile written by GRPO Desktop. Use it with:",
        f"#   ollama create my-model -f Modelfile   (in this folder, next to {gguf_name})",
        f"FROM ./{gguf_name}",
        "",
    ]
    if form is not None:
        bos = getattr(tok, "bos_token", None)
        template = go_template(form, bos, add_bos)
        lines.append(f"# Chat template: the model's own, in the {form.layout} layout.")
    else:
        why = (
            "has no chat template"
            if not getattr(tok, "chat_template", None)
            else "has a chat template that could not be translated to Ollama's Go template "
            "(it matches none of the ChatML, Llama 3 or <|role|>...<|end|> layouts)"
        )
        lines += [
            f"# This model {why}: the TEMPLATE below is a plain one (system text, then the",
            "# prompt). Edit it by hand for chat use.",
        ]
        if getattr(tok, "chat_template", None):
            lines.append("# llama.cpp and LM Studio use the original, in tokenizer.chat_template.")
        template = PLAIN_TEMPLATE
    if '"""' in template:
        template = template.replace('"""', '\\"\\"\\"')
    lines += [f'TEMPLATE """{template}"""', ""]
    for stop in stops:
        lines.append(f"PARAMETER stop {_quote(stop)}")
    lines += _defaults(generation, context_length)
    return "\n".join(lines) + "\n"


def _defaults(generation: dict, context_length: int) -> list[str]:
    """Sampling defaults from generation_config.json (Ollama's names), and a context size."""
    lines = [f"PARAMETER num_ctx {min(context_length, 4096)}"]
    if generation.get("do_sample") is False:
        return [*lines, "PARAMETER temperature 0"]
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("repetition_penalty", "repeat_penalty"),
    ):
        if generation.get(ours) is not None:
            lines.append(f"PARAMETER {theirs} {generation[ours]}")
    return lines


# -- Back to Ollama: a run whose base model is one of Ollama's


def grpo_model_name(ollama_name: str) -> str:
    """The name the trained model is created under: 'qwen2.5:0.5b' → 'qwen2.5-0.5b-grpo'; a
    ':latest' tag, a namespace and a registry host are left out ('hf.co/u/x:latest' → 'x-grpo')."""
    base, _, tag = ollama_name.rpartition(":") if ":" in ollama_name else (ollama_name, "", "")
    model = base.rsplit("/", 1)[-1]
    name = model if tag in ("", "latest") else f"{model}-{tag}"
    name = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "model"
    return f"{name}-grpo"


def _generated_template(text: str) -> str:
    """The TEMPLATE of a Modelfile `modelfile()` wrote (its triple quotes are escaped inside)."""
    return text.split('TEMPLATE """', 1)[1].split('"""\n', 1)[0]


def _param_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return _quote(str(value))


def conversation_lines(
    system_prompt: str, example: tuple[str, str] | None = None, prefix: str = ""
) -> list[str]:
    """The run's system prompt as SYSTEM and its worked example as an earlier exchange (MESSAGE
    user, MESSAGE assistant), so Ollama puts before every chat what the model trained with; an
    answer prefix the run wrote for the model, which a Modelfile cannot add, said in comments."""
    lines = []
    if prefix:
        lines += [
            "",
            f"# The run started every answer with {_quote(prefix)}, written for the model at the",
            "# end of its prompt. To answer as in training, add it to the TEMPLATE above right",
            "# after the assistant turn opens (Ollama's replies then leave it out).",
        ]
    if system_prompt.strip() or example:
        what = "system prompt and worked example" if example else "system prompt"
        lines += ["", f"# The {what} the run trained with."]
    if system_prompt.strip():
        lines.append(f'SYSTEM """{_escaped(system_prompt.strip())}"""')
    if example:
        lines.append(f'MESSAGE user """{_escaped(example[0])}"""')
        lines.append(f'MESSAGE assistant """{_escaped(example[1])}"""')
    return lines


def add_conversation(
    path: str, system_prompt: str, example: tuple[str, str] | None, prefix: str = ""
) -> None:
    """Append `conversation_lines` to the Modelfile at `path` (a plain GGUF export's)."""
    lines = conversation_lines(system_prompt, example, prefix)
    if lines:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


def ollama_modelfile(
    gguf_name: str,
    origin,
    model_name: str,
    system_prompt: str,
    generated: str,
    example: tuple[str, str] | None = None,
    prefix: str = "",
) -> str:
    """The Modelfile that takes a run trained on the Ollama model `origin` (a
    models.local_models.LocalModel) back to Ollama as `model_name`: the original's Go template,
    stop words and other parameters as Ollama keeps them, and the run's system prompt (the one
    the model learnt under) and worked example as MESSAGE lines. What the original lacks comes
    from `generated` (the Modelfile `modelfile()` wrote for the same file)."""
    lines = [
        f"# Ollama Modelfile written by GRPO Desktop: {origin.name} fine-tuned with GRPO.",
        f"# Create the model (in this folder, next to {gguf_name}) and run it with:",
        f"#   ollama create {model_name} -f Modelfile",
        f"#   ollama run {model_name}",
        f"FROM ./{gguf_name}",
        "",
    ]
    if origin.template:
        lines.append(f"# Chat template: {origin.name}'s own.")
        template = origin.template
    else:
        lines.append(f"# {origin.name} has no template in Ollama; this is the model's own.")
        template = _generated_template(generated)
    lines += [f'TEMPLATE """{_escaped(template)}"""', ""]
    if origin.stop:
        lines.append(f"# Stop words: {origin.name}'s own.")
        lines += [f"PARAMETER stop {_quote(stop)}" for stop in origin.stop]
    else:  # the stop words the exported model's tokenizer ends an answer with
        lines.append(f"# {origin.name} sets no stop words; these end the model's answers.")
        lines += [line for line in generated.splitlines() if line.startswith("PARAMETER stop ")]
    params = {k: v for k, v in origin.params.items() if k != "stop"}
    if params:
        lines.append(f"# Parameters: {origin.name}'s own.")
    for key, value in params.items():
        for one in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {key} {_param_value(one)}")
    if not params:  # the original sets none: the exported model's own defaults
        lines.append("# Defaults of the exported model (its generation_config.json).")
        lines += [
            line for line in generated.splitlines()
            if line.startswith("PARAMETER ") and not line.startswith("PARAMETER stop ")
        ]  # fmt: skip
    lines += conversation_lines(system_prompt, example, prefix)
    return "\n".join(lines) + "\n"


def _escaped(text: str) -> str:
    return text.replace('"""', '\\"\\"\\"')


def back_to_ollama(
    folder: str,
    origin,
    model_name: str,
    system_prompt: str,
    example: tuple[str, str] | None = None,
    prefix: str = "",
) -> dict:
    """Rewrite the Modelfile in `folder` (next to the exported .gguf) for `origin`'s Ollama as
    `model_name`; returns what the export's summary adds: the names and the create line."""
    gguf_name = next(n for n in sorted(os.listdir(folder)) if n.endswith(".gguf"))
    path = os.path.join(folder, "Modelfile")
    with open(path, encoding="utf-8") as fh:
        generated = fh.read()
    text = ollama_modelfile(
        gguf_name, origin, model_name, system_prompt, generated, example, prefix
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return {
        "ollama_origin": origin.name,
        "ollama_name": model_name,
        "ollama_create": f"ollama create {model_name} -f Modelfile",
    }

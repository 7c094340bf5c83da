"""Settings in the words the screen uses: a field's label, a choice's word ('Last number', not
'last_number'), a number as people write it (1e-6, not 1e-06), on/off for a switch.

Qt-free, so the forms (form.py), the preset note (panels/preset_changes.py) and the estimate's
text (panels/estimate_text.py) say a setting the same way. The values themselves stay as they
are in settings files and on the command line.
Try it: tests/ui/panels/test_plain_words.py.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from grpo_desktop.engine.config import SECTIONS

# The words a choice shows: 'last_number' and 'dr_grpo' are names for code, not for the screen
# (issue 27). Values not listed show capitalised, underscores as spaces.
CHOICE_WORDS = {
    "none": "None",
    "auto": "Automatic",
    "same": "Same as the weights",
    "8bit": "8-bit",
    "4bit": "4-bit",
    "cpu": "CPU",
    "cuda": "CUDA GPU",
    "float32": "float32",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "all": "All or nothing",
    "per_tag": "Per tag",
    "answer_tag": "Answer tag",
    "boxed": "\\boxed{}",
    "last_number": "Last number",
    "grpo": "GRPO",
    "bnpo": "BNPO",
    "dr_grpo": "Dr. GRPO",
    "dapo": "DAPO",
    "token": "Per token",
    "sequence": "Per answer (sequence)",
    "group": "Per group",
    "batch": "Whole batch",
}


def choice_word(value: str) -> str:
    """What a choice's value shows as in a combo box."""
    return CHOICE_WORDS.get(value, value.replace("_", " ").capitalize())


def number_text(value: float) -> str:
    """A number as people write it: a whole number in full, else up to 6 significant digits, a
    tiny one as 1e-6 or 2.5e-5 (Python's 1e-06 pads the exponent, and reads like a code)."""
    if value == int(value) and abs(value) < 1e7:
        return str(int(value))
    text = f"{value:.6g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", text)


def _field(section: str, name: str) -> dataclasses.Field | None:
    cls = SECTIONS.get(section)
    return next((f for f in dataclasses.fields(cls) if f.name == name), None) if cls else None


def label_of(section: str, name: str) -> str:
    """The field's label, as its form row says it."""
    f = _field(section, name)
    label = f.metadata.get("label") if f is not None else None
    return label or name.replace("_", " ").capitalize()


def value_text(section: str, name: str, value: Any) -> str:
    """A value as the form shows it."""
    f = _field(section, name)
    choices = f is not None and "choices" in f.metadata
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return number_text(value)
    if value is None:
        return "not set"
    if isinstance(value, str) and choices:
        return choice_word(value)
    if isinstance(value, str):
        short = value.strip().replace("\n", " ")
        return f"“{short[:40]}…”" if len(short) > 40 else (f"“{short}”" if short else "empty")
    return str(value)

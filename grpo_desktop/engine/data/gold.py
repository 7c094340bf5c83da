"""The reference (gold) answer of a dataset row, as the string the rewards compare against.

Datasets write their answers in many ways: GSM8K ends a worked solution with `#### 1,234`, others
store a number (42, 42.0, NaN for a missing one) or plain text. `parse_answer` reduces each to
one string: the part after the last `####`, thousands separators dropped from a number, an
integral float without its `.0`. Torch-free and dependency-free, so scoring a file of answers
(rewards/score_file.py) never loads the dataset machinery.

Try it:  python -c "from grpo_desktop.engine.data.gold import parse_answer; print(parse_answer('so #### 1,234'))"
"""

from __future__ import annotations

import numbers
import re
from typing import Any

_NUMBER_WITH_COMMAS = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?")


def parse_answer(text: Any) -> str:
    """The reference answer as a string: '... #### 1,234' -> '1234', 42.0 -> '42', else stripped."""
    if text is None:
        return ""
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        return str(int(text))
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        value = float(text)
        if value != value:  # NaN: a missing value
            return ""
        return str(int(value)) if value.is_integer() else str(value)
    s = str(text)
    if "####" in s:
        s = s.rsplit("####", 1)[1]
    s = s.strip()
    return s.replace(",", "") if _NUMBER_WITH_COMMAS.fullmatch(s) else s

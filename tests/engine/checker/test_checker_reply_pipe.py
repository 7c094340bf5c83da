"""The parent caps what a checker's replies carry, whatever the child's own code did (issue 26 §4).

The child cleans its error texts itself (child.clean_reply), but check() runs in that process: code
that writes its own lines to the reply pipe skips that. The parent reads at most MAX_REPLY bytes
of a line (a longer one is dropped and that call is an error saying so) and caps and cleans every
error text again, so no control characters and no huge text reach events.jsonl or the screen.
"""

from __future__ import annotations

from grpo_desktop.engine.checker.child import MAX_ERROR
from grpo_desktop.engine.checker.runner import MAX_REPLY, CheckerProcess

WRITER = """\
import json, os
def check(completion, answer, prompt):
    if completion == "huge":
        line = b'{"value": 1.0, "error": "' + b"A" * (2 * MAX) + b'"}\\n'
    else:
        line = json.dumps({"value": None, "error": "\\x1b[2J\\x1b[31mred\\u202e" + "B" * 50000}).encode() + b"\\n"
    for fd in range(3, 64):  # whichever of these is the reply pipe
        try:
            os.write(fd, line)
        except OSError:
            pass
    return 1.0
""".replace("MAX", str(MAX_REPLY))


def _first(completion: str):
    with CheckerProcess(WRITER, timeout_s=10.0) as proc:
        [result] = proc.check_many([completion], ["1"], [""])
        return result


def test_an_error_written_straight_to_the_reply_pipe_is_capped_and_cleaned():
    result = _first("escape")
    assert result.value is None and result.error
    assert len(result.error) <= MAX_ERROR
    assert "\x1b" not in result.error and "\u202e" not in result.error
    assert "red" in result.error


def test_a_reply_line_over_the_limit_is_dropped_unread():
    result = _first("huge")
    assert result.value is None
    assert f"over {MAX_REPLY:,} bytes" in result.error
    assert "AAAA" not in result.error

"""The Rollouts table's column widths: every column fits the table's width, so nothing needs a
horizontal scroll bar (a 1366 × 768 screen included).

The number columns get what their header and their widest usual value need (measured with the
table's fonts, so a larger system font still fits); Prompt and Completion share what is left:
Prompt what its rows need, up to PROMPT_SHARE of it, and Completion the rest, never less than a
few words each: on a narrow table the number
columns give up to a quarter of their width (their values elided) first. The fit runs again when the table
is resized, when its columns change, and when the user drags a column's edge (Completion then
takes or gives the difference, so the rest still fits). Try it: tests/ui/inspector/
test_rollouts_table.py.
"""

from __future__ import annotations

from PySide6.QtWidgets import QTableView

# The widest text a column usually shows, besides its header.
SAMPLES = {
    "Step": "9999",
    "Group": "99",
    "Answer": "12345",
    "Reward": "no score",
    "Advantage": "no score",
    "Spread": "0 · no signal",
    "Length": "1024",
    "Cut off": "yes",
    "Checker error": "check() raised",
}
PART_SAMPLE = "no score"  # a reward function's own score
FLEX = ("Prompt", "Completion")
PROMPT_SHARE = 0.45  # of the room left: at most; short prompts leave the rest to Completion
FLEX_MIN_CHARS = {"Prompt": 10, "Completion": 14}  # "x" widths: a few words at least
PADDING = 14  # the cell's margins and the sort arrow
MAX_SHRINK = 0.25  # of a number column's width, given up when the table is narrow
DECORATION = 18  # the Group column's colour square


def natural_width(table: QTableView, name: str, sample: str) -> int:
    """What a column needs for its header and `sample` (and the Group colour square)."""
    header = table.horizontalHeader().fontMetrics().horizontalAdvance(name)
    cell = table.fontMetrics().horizontalAdvance(sample)
    if name == "Group":
        cell += DECORATION
    return max(header, cell) + PADDING


def fit_columns(table: QTableView, names: list[str], functions: list[str]) -> dict[str, int]:
    """Set every visible column's width so that together they fill the viewport; return them.

    `names` are the model's column names in order (hidden columns are skipped)."""
    widths: dict[str, int] = {}
    for col, name in enumerate(names):
        if table.isColumnHidden(col) or name in FLEX:
            continue
        sample = PART_SAMPLE if name in functions else SAMPLES.get(name, name)
        widths[name] = natural_width(table, name, sample)
    x = table.fontMetrics().horizontalAdvance("x")
    viewport = table.viewport().width()
    deficit = sum(FLEX_MIN_CHARS.values()) * x - (viewport - sum(widths.values()))
    if deficit > 0 and widths:  # narrow: the number columns shrink, in proportion
        share = min(MAX_SHRINK, deficit / sum(widths.values()))
        widths = {name: int(w * (1 - share)) for name, w in widths.items()}
    room = viewport - sum(widths.values())
    need = table.sizeHintForColumn(names.index("Prompt"))  # the rows shown, in pixels
    least = {name: FLEX_MIN_CHARS[name] * x for name in FLEX}
    prompt = min(need if need > 0 else room // 3, int(room * PROMPT_SHARE))
    widths["Prompt"] = max(least["Prompt"], min(prompt, room - least["Completion"]))
    widths["Completion"] = max(least["Completion"], room - widths["Prompt"])
    # What rounding or the minimums add beyond the room comes off Completion, down to its minimum.
    over = sum(widths.values()) - viewport
    if over > 0:
        widths["Completion"] = max(least["Completion"], widths["Completion"] - over)
    for col, name in enumerate(names):
        if name in widths and table.columnWidth(col) != widths[name]:
            table.setColumnWidth(col, widths[name])
    return widths


def refit_after_drag(table: QTableView, names: list[str], dragged: int) -> None:
    """The user dragged the edge of column `dragged`: Completion (or Prompt, when Completion
    was the one dragged) takes or gives the difference, so the columns still fill the table."""
    taker = names.index("Completion") if names[dragged] != "Completion" else names.index("Prompt")
    used = sum(
        table.columnWidth(c)
        for c in range(len(names))
        if c != taker and not table.isColumnHidden(c)
    )
    x = table.fontMetrics().horizontalAdvance("x")
    table.setColumnWidth(
        taker, max(FLEX_MIN_CHARS[names[taker]] * x, table.viewport().width() - used)
    )

"""The Compare tab's tooltips and notes, in one place (plain text; the view wraps them).

Kept apart so view.py stays about layout and the tests compare against the same strings
(tests/ui/compare/test_compare.py).
"""

from __future__ import annotations

from grpo_desktop.engine.variants.compare_table import BOTH_RIGHT, BOTH_WRONG, BROKEN, FIXED

SIDE_A = "Side A, the 'before': the base model (what you started from) or an earlier checkpoint."
SIDE_B = "Side B, the 'after': a checkpoint of this run (the newest by default)."
SOURCE = (
    "Which problems both sides answer. The held-out problems are the ones the run never trained "
    "on (the same ones `grpo-desktop eval` scores): the honest test. A file (.jsonl, .json, "
    ".csv, .parquet) is read with the run's prompt and answer columns."
)
COUNT = (
    "How many problems to answer (each side answers each one once, greedily). More problems "
    "give a narrower interval: about ±10 points at 100, ±5 at 400."
)
RUN = "Answer the problems with both sides, greedily, and score each answer with the run's check."
CANCEL = "Stop after the current token; the problems both sides have finished stay in the table."
INTERVAL = (
    "The bracket after each accuracy is its 95 % confidence interval (Wilson score): with this "
    "many problems the true accuracy lies in it 19 times out of 20. When the two brackets "
    "overlap a lot, the difference may be luck; the fixed/broken counts tell more, because "
    "they compare the same problems."
)
MCNEMAR = (
    "McNemar's exact test: if A and B were equally good, a fixed/broken split at least this "
    "uneven would happen with probability p."
)
CATEGORIES = {
    "all": "Every problem.",
    FIXED: "A was wrong, B is right: what training fixed.",
    BROKEN: "A was right, B is wrong: what training broke (forgetting, or a new bad habit).",
    BOTH_WRONG: "Neither side is right: what is still to learn.",
    BOTH_RIGHT: "Both sides are right.",
}
EXPORT = (
    "Save every problem of the table (not only the filtered ones) as CSV: problem, gold answer, "
    "each side's answer and verdict (1/0), the category and both full completions."
)
TABLE = "Double-click a problem (or press Enter) to read both full answers."
TRAINING = (
    "Training is running: compare once it stops or finishes (the comparison would compete with "
    "training for memory, and the checkpoints are still changing)."
)
NO_CHECKPOINT = (
    "This session has no checkpoint yet, so there is nothing to compare with the base model. "
    "Train first: a checkpoint is saved every few steps (Hyperparameters ▸ checkpoint every) "
    "and at the end."
)
SAME_SIDES = "Side A and side B are the same model: choose two different ones."
TRL_NO_MODEL = (
    "This TRL run has saved no model yet (a checkpoint-N folder with weights, or the final "
    "model), so there is nothing to compare with the base model. Its checkpoints appear here "
    "once TRL saves them (save_steps), and the final model after trainer.save_model()."
)

"""The Try tab's tooltips and notes, in one place (plain text; the view wraps them).

Kept apart so view.py stays about layout and the tests compare against the same strings
(tests/ui/try_it/test_try.py).
"""

from __future__ import annotations

SOURCE = (
    "Where the problems come from. Held-out problems are the ones the run never trained on (the "
    "held-out accuracy on the plots is measured on them): the honest test. Training problems "
    "are ones it practised on."
)
PROBLEM = (
    "Pick a problem: its text goes into the prompt box and its gold answer is used to score "
    "accuracy. Editing the text makes it your own prompt again, without a gold answer."
)
GOLD = "The reference answer of the picked problem; accuracy compares each answer with it."
PROMPT = (
    "The question to ask. It is wrapped exactly as in training: the run's system prompt and the "
    "model's chat template (or the plain 'Question: … Answer:' form). A typed prompt has no gold "
    "answer, so accuracy is not scored and the total reward is unknown; format and a custom "
    "checker still score."
)
GREEDY = (
    "Always take the most likely next token: one answer, the same every time. This is how the "
    "held-out accuracy is measured."
)
SAMPLED = (
    "Draw each token at random from the model's distribution, as training does when it makes a "
    "group of answers: several different answers show what the model might say."
)
TEMPERATURE = (
    "Sampled only. Below 1 the likely tokens get likelier (safer, more alike answers); above 1 "
    "the distribution flattens (more varied, more mistakes). Training samples at the run's "
    "temperature, shown here first."
)
TOP_P = (
    "Sampled only. Keep only the most likely tokens that together hold this share of the "
    "probability (1: keep all, as training usually does)."
)
SAMPLES = (
    "Sampled only. How many answers each model gives; each is scored on its own. Several "
    "samples show how often a model gets it right, not just whether it can."
)
MAX_TOKENS = (
    "The longest answer, in tokens; an answer that reaches it is cut off (and usually scores "
    "no format). Starts at the run's max completion length."
)
GENERATE = "Answer the prompt with the base model (left) and the chosen checkpoint (right)."
STOP = "Stop decoding after the current token; answers cut short are not scored."
CHECKPOINT = (
    "Which checkpoint of the run answers on the right: the newest by default, or any earlier "
    "one the run kept. A LoRA checkpoint is switched on over the one copy of the base model."
)
BASE_PANE = "The model before training: what the run started from."
TRAINING = (
    "Training is running: the trainer holds the model in memory, so Try is paused. It comes "
    "back when the run finishes or is stopped."
)
BASE_ONLY = (
    "This session has no checkpoint yet, so only the base model answers. Train (Run ▸ Start) to "
    "compare it with the trained model."
)
NO_CHECKPOINT = "No checkpoint yet: the trained model answers here after the run saves one."

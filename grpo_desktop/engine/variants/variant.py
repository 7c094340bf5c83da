"""One model a trained run offers: the base, a checkpoint, or a TRL output's final model.

A plain, torch-free record, so the GUI thread can list a run's models without loading torch:
`run_variants.py` lists an app run's, `trl_models.py` a TRL output_dir's, and `ModelVariants`
(run_variants.py) loads the one asked for.

Try it:  python -c "from grpo_desktop.engine.variants.variant import BASE_VARIANT; print(BASE_VARIANT)"
"""

from __future__ import annotations

from dataclasses import dataclass

BASE = "base"


@dataclass(frozen=True)
class Variant:
    key: str  # "base" or "step-40": stable, used as the peft adapter name
    label: str  # what a user reads: "Base model", "Step 40"
    step: int | None  # None for the base model
    weights: str | None  # the checkpoint's adapter/ or model/ folder; None for the base
    is_adapter: bool  # a LoRA adapter over the base (else full weights, or the base itself)


BASE_VARIANT = Variant(BASE, "Base model", None, None, False)

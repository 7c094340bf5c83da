"""GRPO Desktop: fine-tune a language model with GRPO on your own workstation and watch it learn."""

__version__ = "0.1.0"

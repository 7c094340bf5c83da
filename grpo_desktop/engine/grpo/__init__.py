"""The GRPO algorithm: the training loop, one step, the loss and the held-out evaluation.

See engine/README.md for what lives where.
"""

"""The GRPO Lab's models: one step by hand, and the reward-design lab's scoring.

See engine/README.md for what lives where.
"""

"""Generating the group's completions and scoring their tokens: rollout, sampler, decoders, log-probs.

See engine/README.md for what lives where.
"""

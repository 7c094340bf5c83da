"""Generating a group's completions and scoring their tokens: rollout, sampler, decoders, logps.

See engine/README.md for what lives where.
"""

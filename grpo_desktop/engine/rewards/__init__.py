"""Rewards: reading a final answer, comparing it with the reference, format and checker parts.

See engine/README.md for what lives where.
"""

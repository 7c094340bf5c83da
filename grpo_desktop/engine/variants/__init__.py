"""A trained run's models for Try, Compare and eval: the base and each checkpoint.

See engine/README.md for what lives where.
"""

"""The run folder on disk: file names, the run's config, checkpoints and what may be deleted.

See engine/README.md for what lives where.
"""

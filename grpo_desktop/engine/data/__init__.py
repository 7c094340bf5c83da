"""Problems to train on: dataset files and hub datasets, the built-in arithmetic, prompts.

See engine/README.md for what lives where.
"""

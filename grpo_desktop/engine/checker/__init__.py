"""The user's custom checker, run in a locked-in child process with a time limit.

See engine/README.md for what lives where.
"""

"""Will it fit? Memory and seconds per step before anything loads, advice, micro-batching.

See engine/README.md for what lives where.
"""

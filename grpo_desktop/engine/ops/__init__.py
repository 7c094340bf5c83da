"""Low-level tensor operations: CPU kernel choice, the fused output head, the draw, heap trimming.

See engine/README.md for what lives where.
"""

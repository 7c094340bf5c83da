"""Low-level tensor operations: CPU kernel settings, the fused output head, the sampler's draw.

See engine/README.md for what lives where.
"""

"""Loading the policy (any causal LM, LoRA, 4-bit QLoRA), remote code, tiny and realistic models.

See engine/README.md for what lives where.
"""

"""The plain log-probs the fused and packed passes are held against: the model's own forward over
prompt + completion with all of its logits, and one backward's gradients."""

from __future__ import annotations

import torch


def plain_logps(model, prompt, prompt_mask, completion, completion_mask, temperature):
    """Log-probs and entropies (N, C) from the model's own forward, 0 where the mask is 0."""
    P = prompt.size(1)
    ids = torch.cat([prompt, completion], 1)
    attention = torch.cat([prompt_mask, completion_mask.long()], 1)
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    z = logits[:, P - 1 : -1].float() / temperature  # (N, C, V)
    logp_all = torch.log_softmax(z, -1)
    picked = logp_all.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return picked * completion_mask, entropy * completion_mask


def logps_and_grads(model, fn, weights):
    """fn()'s (log-probs, entropies), and every parameter's gradient of Σ log-probs × weights."""
    model.zero_grad(set_to_none=True)
    logps, entropy = fn()
    (logps * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), entropy, grads

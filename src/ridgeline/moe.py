"""Mixture of experts: routed fraction, experts touched by a batch, bytes a step reads.

MoE cuts traffic, not capacity: a token reads k of E experts, but every expert sits in
memory because the router may send the next token anywhere. A batch of B tokens touches
E·(1 − (1 − k/E)^B) distinct experts in expectation (each token picks k of E; the
chance an expert is missed by all B is (1 − k/E)^B, treating picks as independent).
"""

from __future__ import annotations

from ridgeline.units import require_positive


def routed_fraction(experts_per_token: int, num_experts: int) -> float:
    """k/E: 8 of 256 experts = 0.03125."""
    return experts_per_token / num_experts


def article_tokens_per_expert(batch: float, experts_per_token: int, num_experts: int) -> float:
    """The article's estimate: B × k/E (each expert's share of a batch of B)."""
    return batch * routed_fraction(experts_per_token, num_experts)


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """E·(1 − (1 − k/E)^B): 1 token touches k experts; 200 tokens touch nearly all of E."""
    require_positive(num_experts, "number of experts")
    if tokens <= 0:
        return 0.0
    miss = 1.0 - experts_per_token / num_experts
    return float(num_experts * (1.0 - miss**tokens))

"""DeepSeek Sparse Attention (DeepSeek-V3.2): what a query reads, and what picks it.

A lightning indexer scores every key before a query with its own small keys (index_n_heads
heads of index_head_dim, one cached key a token: kvcache.indexer_key_bytes), and the MLA
attention then reads only the index_topk latents it ranks highest: a query at position p
attends to min(p + 1, k) keys, counted as a sliding window of k counts them (which keys
differ, not how many), while the indexer reads and scores all p + 1. DeepSeek-V3.2's decode
after 65,536 cached tokens reads 2,048 latents and 65,537 indexer keys a layer: 2,048 ×
1,152 + 65,537 × 132 = 11.0 MB in bf16, where dense MLA read 65,537 × 1,152 = 75.5 MB.
A prompt chunk's queries each pick their own k, and together may reach every cached
latent: its reads are dense MLA's (vLLM's sparse prefill gathers the sequence's whole cache
first), its arithmetic capped at k a query.
"""

from __future__ import annotations

from ridgeline.ds_mla_cache import sparse_latent
from ridgeline.model import MLA, ModelSpec

# The indexer's logits: per head a dot product of the query's and the key's index_head_dim
# values (2 FLOP each), then a ReLU and the head's weight summed over the heads (DeepSeek-V3.2-
# Exp inference/model.py Indexer; vLLM's fp8_mqa_logits / fp8_paged_mqa_logits, DeepGEMM):
# the dot products, H_i · d_i multiply-adds a pair, are the FLOPs counted
FLOPS_PER_MULTIPLY_ADD = 2
# … and their output, one float32 a query-key pair summed over the heads (DeepGEMM's
# fp8_mqa_logits at prefill, [queries, keys]; fp8_paged_mqa_logits at decode, [batch,
# max_model_len]), which vLLM writes to HBM for its top-k to read back
# (vllm/model_executor/layers/sparse_attn_indexer.py sparse_attn_indexer, v0.15-v0.32;
# models/deepseek_v2.py before)
INDEXER_LOGIT_BYTES = 4
LOGIT_PASSES = 2  # written by the logits kernel, read by the top-k


def sparse_topk(model: ModelSpec) -> int | None:
    """The latents a query of a DeepSeek Sparse Attention model reads (index_topk: 2,048 for
    DeepSeek-V3.2), None for any other model."""
    latent = sparse_latent(model)
    return latent.index_topk if latent is not None else None


def indexer_flops_per_pair(latent: MLA) -> float:
    """The indexer's FLOPs to score one key for one query: 2 × H_i × d_i, DeepSeek-V3.2's
    2 × 64 × 128 = 16,384 (the absorbed MLA decode's 128 heads spend 2 × 128 × (2 × 512 + 64)
    = 278,528 on each latent it reads). 0 without an indexer."""
    if latent.index_topk is None or not latent.index_n_heads or not latent.index_head_dim:
        return 0.0
    return float(FLOPS_PER_MULTIPLY_ADD * latent.index_n_heads * latent.index_head_dim)


def indexer_logit_bytes_per_pair(latent: MLA) -> float:
    """The HBM bytes of one scored pair's logit: its float32 written and read back by the
    top-k, 2 × 4 = 8 B (0 without an indexer). A DeepSeek-V3.2 decode at 65,536 cached tokens
    moves 65,537 × 8 = 0.52 MB of logits a layer beside its 8.65 MB of indexer keys. vLLM
    writes a decode's row to its context from v0.17 (clean_logits=False; v0.16 unread);
    before, DeepGEMM's default also filled the row out to max_model_len, not modelled."""
    if latent.index_topk is None or not latent.index_n_heads or not latent.index_head_dim:
        return 0.0
    return float(LOGIT_PASSES * INDEXER_LOGIT_BYTES)


def sparse_latents_read(kv_tokens: float, decode_keys: float, capped_decode_keys: float) -> float:
    """The latents a sparse layer reads and writes: what dense MLA moves (``kv_tokens``: every
    key a query sees, the new tokens written) with each one-token query's ``decode_keys`` (its
    c + 1) replaced by the ``capped_decode_keys`` it attends to (min(c + 1, k)). A decode at
    65,536 cached tokens: 65,538 − 65,537 + 2,048 = 2,049, the 2,048 read and the new one
    written."""
    return kv_tokens - decode_keys + capped_decode_keys

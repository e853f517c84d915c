"""Engine-aware memory: what an engine leaves for the KV cache, per GPU.

vLLM reserves gpu_memory_utilization × total memory, profiles one forward pass of
``profile_tokens`` tokens to find the activation peak, keeps non-torch memory (CUDA
context, NCCL) and CUDA graphs, and pages the KV cache into what is left, in blocks of
``block_size`` tokens (vllm/worker/worker.py, determine_num_available_blocks).
TensorRT-LLM gives the KV cache kv_cache_free_gpu_mem_fraction of the memory left after
the engine loads; SGLang mem_fraction_static of the total minus weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.kvcache import kv_footprint
from ridgeline.layouts import DENSE, MOE
from ridgeline.units import GIB

ACTIVATION_BYTES = 2
# What the GPU driver keeps from the nominal capacity: torch reports 23.58 GiB total on a
# 24 GiB RTX 3090 (vLLM issue #10517 log) and 79.15 GiB on an 80 GiB A100/H100.
VISIBLE_MEMORY_FRACTION = 0.985


def engine_defaults(engine: str) -> dict[str, Any]:
    key = "llama.cpp" if engine.startswith("llama.cpp") else engine
    data: dict[str, Any] = load_data("engines.json").get(key, {})
    return data


def activation_bytes_per_token(dep: Deployment) -> float:
    """Peak live activations per token in a forward pass, per TP rank.

    The MLP holds gate and up outputs and their product (3 × intermediate) beside three
    hidden-size tensors (residual, normed input, attention output): Llama-3.1-8B,
    2 B × (3·14336 + 3·4096) = 110.6 KB per token.
    """
    model = dep.model
    widths = [0]
    if model.dense_mlp and any(layer.ffn == DENSE for layer in model.layers):
        widths.append(model.dense_mlp.intermediate_size)
    if model.moe and any(layer.ffn == MOE for layer in model.layers):
        moe = model.moe
        widths.append(moe.experts_per_token * moe.expert_intermediate_size
                      + moe.num_shared_experts * moe.shared_intermediate_size)
    tp = dep.tensor_parallel_size
    return ACTIVATION_BYTES * (3 * max(widths) / tp + 3 * model.hidden_size)


@dataclass(frozen=True)
class KVPool:
    """The KV pool one GPU gets, and what it holds."""

    engine: str
    total_bytes: float  # per GPU, as the driver reports it
    reserved_fraction: float  # gpu_memory_utilization / mem_fraction_static / …
    weight_bytes: float  # per GPU
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    kv_bytes_per_token: float  # per GPU, growing layers
    block_size: int

    @property
    def pool_bytes(self) -> float:
        budget = self.total_bytes * self.reserved_fraction
        return max(0.0, budget - self.weight_bytes - self.activation_bytes
                   - self.non_torch_bytes - self.cuda_graph_bytes)

    @property
    def blocks(self) -> int:
        per_block = self.kv_bytes_per_token * self.block_size
        return int(self.pool_bytes // per_block) if per_block else 0

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def concurrency(self, max_model_len: int) -> float:
        """Full-length sequences that fit: tokens ÷ max_model_len."""
        return self.tokens / max_model_len


def kv_pool(
    dep: Deployment, max_model_len: int, total_bytes: float | None = None,
    utilization: float | None = None, profile_tokens: int | None = None,
    block_size: int | None = None, max_num_seqs: int | None = None,
) -> KVPool:
    """The per-GPU KV pool of ``dep.engine`` (first model: vLLM-style profiling)."""
    d = engine_defaults(dep.engine)
    total = total_bytes or dep.accelerator.memory_bytes * VISIBLE_MEMORY_FRACTION
    per_gpu_weights = dep.weight_bytes / dep.num_gpus
    seqs = max_num_seqs or int(d.get("max_num_seqs", 256))
    tokens = profile_tokens or max(max_model_len, int(d.get("max_num_batched_tokens", 2048)))
    logits = seqs * dep.model.vocab_size * 4 * float(d.get("sampler_logit_copies", 0))
    activations = tokens * activation_bytes_per_token(dep) + logits / dep.tensor_parallel_size
    footprint = kv_footprint(dep.model, 1, dep.kv.bytes_per_element)
    per_token = (footprint.bytes_per_token_growing * dep.kv_replication
                 / dep.num_gpus)
    if dep.engine == "trtllm":
        fraction = utilization or float(d["kv_cache_free_gpu_mem_fraction"])
        free = total - per_gpu_weights - activations - float(d["non_torch_gib"]) * GIB
        return KVPool(dep.engine, free, fraction, 0.0, 0.0, 0.0, 0.0, per_token,
                      int(block_size or d["tokens_per_block"]))
    fraction = utilization or float(d.get("gpu_memory_utilization",
                                          d.get("mem_fraction_static", 0.9)))
    return KVPool(dep.engine, total, fraction, per_gpu_weights, activations,
                  float(d.get("non_torch_gib", 0.4)) * GIB,
                  float(d.get("cuda_graph_gib", 0.0)) * GIB if dep.engine != "vllm" else 0.0,
                  per_token, int(block_size or d.get("block_size", d.get("page_size", 16))))


def max_batch(dep: Deployment, context: int, max_model_len: int | None = None) -> int:
    """Sequences of ``context`` tokens the engine can run at once: pool ÷ per-sequence cache."""
    pool = kv_pool(dep, max_model_len or context)
    per_seq = kv_footprint(dep.model, context, dep.kv.bytes_per_element).bytes_per_sequence
    per_seq_per_gpu = per_seq * dep.kv_replication / dep.num_gpus
    d = engine_defaults(dep.engine)
    cap = int(d.get("max_batch_size", d.get("max_num_seqs", d.get("max_running_requests", 256))))
    return max(0, min(cap, int(pool.pool_bytes // per_seq_per_gpu) if per_seq_per_gpu else cap))

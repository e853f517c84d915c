"""The keys every --json answer names its deployment by, built once: fit's, decode's,
prefill's, kv's, roofline's, moe's and utilization's, so a dashboard reads the model, the card
and the engine from the same keys whatever command answered, never from the prose
``deployment`` line. A key that does not apply to the answer is null, not left out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ridgeline.roofline import first_whole_batch

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import Accelerator

# in the order the answers give them
IDENTITY_KEYS = ("model", "accelerator", "num_gpus", "tensor_parallel_size",
                 "pipeline_parallel_size", "weights", "weights_format", "kv_dtype", "engine",
                 "engine_version")


def identity_json(dep: Deployment, engine_version: str | None = None, *,
                  engine_named: bool = True, pool_sized: bool = True) -> dict[str, Any]:
    """The deployment's keys: Llama-3.1-8B on one H100 under vLLM's defaults gives
    {"model": "llama-3.1-8b", "accelerator": "h100-sxm", "num_gpus": 1, … "weights": "bf16",
    "kv_dtype": "bf16", "engine": "vllm", "engine_version": "0.34"}. ``engine_version``: the
    release given (or the one the pool was sized as); without one, the release a run is priced
    as (engine_versions.sized_version: vLLM's 0.34, none for TensorRT-LLM). ``engine_named``
    false: no --engine was given and the answer reads the checkpoint as stored (roofline's,
    kv's and moe's default), so ``engine`` is null; ``pool_sized`` false: no engine's rules
    sized a pool for the answer, so ``engine_version`` is null."""
    from ridgeline.candidate import weights_format
    from ridgeline.engine_versions import sized_version

    engine = dep.engine if engine_named else None
    return {"model": dep.model.name, "accelerator": dep.accelerator.id,
            "num_gpus": dep.num_gpus, "tensor_parallel_size": dep.tensor_parallel_size,
            "pipeline_parallel_size": dep.pipeline_parallel_size,
            # the --weights choice ("as stored" for a quantized checkpoint) and the format it
            # names, under simulate's and plan's names
            "weights": dep.weights.label,
            "weights_format": weights_format(dep.model, dep.weights.label),
            "kv_dtype": dep.kv.id, "engine": engine,
            "engine_version": sized_version(dep.engine, engine_version)
            if engine is not None and pool_sized else None}


def card_identity_json(acc: Accelerator, num_gpus: int = 1,
                       engine: str | None = None) -> dict[str, Any]:
    """identity_json's keys for an answer about a card with no model (roofline or
    utilization without --model): the card, its count and the engine named, the rest null."""
    return {**dict.fromkeys(IDENTITY_KEYS), "accelerator": acc.id, "num_gpus": num_gpus,
            "tensor_parallel_size": num_gpus, "pipeline_parallel_size": 1, "engine": engine}


def card_price_json(dep: Deployment) -> dict[str, Any]:
    """What decode's and prefill's answers give of the card beside the deployment's keys, in
    their one-card form as in each item of the several-card form (``accelerators``): its
    catalog price per device-hour (null where the catalog has none; an H100's $2.99, Lambda's
    list price), and its dense ridge with the first whole batch that reaches it (Llama-3.1-8B
    bf16 on an H100: 295.3 FLOP/byte, batch 296)."""
    return {"price_per_gpu_hour_usd": dep.accelerator.price_per_hour_usd,  # plan's name
            "ridge_flop_per_byte": dep.dense_ridge_flop_per_byte,
            # the batch the decode table's column gives: ⌈ridge × bytes per weight ÷ 2⌉,
            # under fit's and page's name
            "first_whole_batch_to_ridge": first_whole_batch(dep.dense_ridge_batch)}

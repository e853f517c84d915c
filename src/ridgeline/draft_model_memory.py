"""What a separate drafter adds to vLLM's pool: an EAGLE or EAGLE-3 head, or a draft model,
named by --speculative-config's ``model`` and read offline (a bundled id or a local
config.json; nothing is fetched). Where its config cannot be read the drafter is not counted,
and fit, decode and simulate say so (cli_spec.spec_drafter).

vLLM's V1 model runner loads the drafter beside the target before it profiles
(v1/worker/gpu_model_runner.py load_model: drafter.load_model), so its weights are taken before
the pool; its attention layers are registered with the target's and paged in the same blocks
(get_kv_cache_spec lists every attention layer the engine built), so a token's cache grows by
the drafter's layers (V0's spec-decode worker gave target and drafter the same number of
blocks, spec_decode_worker.py split_num_cache_blocks_evenly: the same bytes a token). A draft
model keeps its own embedding and lm_head and runs split over draft_tensor_parallel_size GPUs,
which V1 requires to be the target's (v1/spec_decode/draft_model.py). An EAGLE head runs at
the target's tensor-parallel size and uses the target's embedding and lm_head where it ships
none (EagleProposer's _maybe_share_embeddings and _maybe_share_lm_head), taken here as shared;
it adds fc, a projection of 2 (EAGLE: model_executor/models/llama_eagle.py) or 3 (EAGLE-3,
from the target's hidden size: llama_eagle3.py) hidden states onto its own, whole on every
GPU (ReplicatedLinear), and an EAGLE-3 head of a reduced vocabulary (config.json's
draft_vocab_size) its own lm_head of those rows. An EAGLE-3 head's first decoder layer also
attends over [embedding; hidden state], so its qkv_proj takes 2 × hidden features, split over
the GPUs as the target's (llama_eagle3.py LlamaDecoderLayer: qkv_input_size = 2 *
hidden_size at layer_idx 0), and each of its layers a hidden_norm of h. Llama-3.2-1B
drafting for Llama-3.1-70B on 4 GPUs: 2.47 GB of weights, 0.62 GB a GPU, and 32 KiB of cache
a token, 8 KiB a GPU.

Counted where target and drafter are full attention alone, as vLLM then keeps one group.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.kvcache import kv_footprint, kv_replication
from ridgeline.layouts import FULL
from ridgeline.params import qkv_out_features
from ridgeline.quantization import ATTENTION, EMBEDDING, LM_HEAD, OTHER

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.model import ModelSpec


@dataclass(frozen=True)
class SeparateDrafter:
    """A drafter read offline: ``model`` from its config; ``eagle`` an EAGLE head (the target's
    embedding and lm_head shared), whose fc takes ``fc_input_size`` features; an EAGLE-3 head's
    own lm_head of ``draft_vocab_size`` rows (0: the target's, shared), and its first layer's
    attention input ``first_layer_input_size`` features wide (0: the hidden size)."""

    name: str
    model: ModelSpec
    eagle: bool = False
    fc_input_size: int = 0
    draft_vocab_size: int = 0
    first_layer_input_size: int = 0


def read_drafter(name: str, method: str) -> SeparateDrafter | None:
    """The drafter ``name`` as --spec-method ``method`` (eagle, draft-model) runs it, from a
    bundled model or a config.json on disk; None where neither is there to read."""
    from ridgeline.catalog import read_config_file, resolve_model

    if not name:
        return None
    try:
        model = resolve_model(name, fetchable=False)
    except InputError:
        return None
    if method != "eagle":
        return SeparateDrafter(name, model)
    path = Path(name).expanduser()
    try:
        raw = dict(read_config_file(path)) if path.exists() else {}
    except InputError:
        raw = {}
    h = model.hidden_size
    eagle3 = "eagle3" in model.architecture.lower() or "draft_vocab_size" in raw
    if not eagle3:
        return SeparateDrafter(name, model, True, 2 * h)
    target_h = int(raw.get("target_hidden_size") or h)
    vocab = int(raw.get("draft_vocab_size") or 0)
    return SeparateDrafter(name, model, True, 3 * target_h, vocab if vocab != model.vocab_size
                           else 0, 2 * h)


def drafter_problem(engine: str, target: ModelSpec, drafter: SeparateDrafter) -> str:
    """Why the pool leaves ``drafter`` out ("" where it is counted): vLLM's, with target and
    drafter of full-attention layers alone."""
    if engine != "vllm":
        return f"{engine}'s separate drafter memory is not modelled"
    for model in (target, drafter.model):
        if model.attention is None or any(layer.mixer != FULL for layer in model.layers):
            return (f"{model.name} has layers other than full attention, whose groups vLLM "
                    "pages apart, not sized here")
    return ""


def drafter_weight_bytes_per_gpu(dep: Deployment, drafter: SeparateDrafter, tp: int) -> float:
    """One GPU's share of the drafter's weights over ``tp`` GPUs, at its checkpoint's formats:
    a draft model whole; an EAGLE head's layers, its fc whole and an EAGLE-3 head's own lm_head,
    the target's embedding and lm_head shared."""
    from ridgeline.deployment import Deployment

    run = Deployment.build(drafter.model, dep.accelerator, num_gpus=tp)
    shared = (EMBEDDING, LM_HEAD) if drafter.eagle else ()
    body = sum(b / run.category_ranks(c) for c, b in run.bytes_by_category.items()
               if b and c not in shared)
    if not drafter.eagle:
        return body
    per_weight = run.weights.format_of(EMBEDDING).bytes_per_weight
    h = drafter.model.hidden_size
    fc = drafter.fc_input_size * h * per_weight  # whole on every GPU
    head = drafter.draft_vocab_size * h * per_weight / tp
    return body + fc + head + eagle3_layer_bytes_per_gpu(run, drafter)


def eagle3_layer_bytes_per_gpu(run: Deployment, drafter: SeparateDrafter) -> float:
    """What an EAGLE-3 head's layers hold past a plain decoder layer's, on one GPU of ``run``:
    the first layer's qkv_proj over its extra input features, (2h − h) × qkv_out_features,
    split as the attention is, and a hidden_norm of h a layer, whole. Llama-3.3-70B's head
    (h 8,192; 64 + 2 × 8 heads of 128) in bf16: 8,192 × 10,240 × 2 B = 168 MB, 42 MB a GPU at
    TP4. Zero for another drafter, or an MLA head (not modelled)."""
    att, h = drafter.model.attention, drafter.model.hidden_size
    if not drafter.first_layer_input_size or att is None or att.mla is not None:
        return 0.0
    extra = drafter.first_layer_input_size - h
    qkv = extra * qkv_out_features(att) * run.weights.format_of(ATTENTION).bytes_per_weight
    norms = drafter.model.num_layers * h * run.weights.format_of(OTHER).bytes_per_weight
    return qkv / run.category_ranks(ATTENTION) + norms


def drafter_kv_bytes_per_token(drafter: SeparateDrafter, kv_bytes_per_element: float,
                               tp: int) -> float:
    """One GPU's cache a token for the drafter's layers, in the target's cache format, its KV
    heads over ``tp`` GPUs."""
    footprint = kv_footprint(drafter.model, 1, kv_bytes_per_element)
    return footprint.bytes_per_token_growing * kv_replication(drafter.model, tp) / tp

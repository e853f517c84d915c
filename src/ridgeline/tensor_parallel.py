"""Which tensor-parallel sizes split a model evenly: engines shard its attention heads, its
linear-attention and Mamba heads, and its MLP widths across the ranks, so the size must
divide each of them."""

from __future__ import annotations

from ridgeline.model import ModelSpec

MAX_TP_HINT = 64  # tensor-parallel sizes named in the hint: a node or a rack, not 71 GPUs


def tensor_parallel_problem(model: ModelSpec, tp: int) -> str:
    """Why ``tp`` ranks cannot split this model's attention evenly (vLLM, SGLang and
    TensorRT-LLM shard query heads, and KV heads or replicas of them, across ranks), or "".

    Gated DeltaNet layers shard too: vLLM gives each rank num_k_heads // tp key heads and
    num_v_heads // tp value heads (qwen3_next.py, qwen3_5.py), so tp must divide both:
    Qwen3.5-397B-A17B's 16 key and 64 value heads split over 1, 2, 4, 8, 16, not 32. So do
    Mamba-2 layers: vLLM's MambaMixer2 asserts heads % tp == 0 and groups % tp == 0 unless
    there is one group (Nemotron-H-56B's 8 groups: TP up to 8)."""
    att, la, mamba = model.attention, model.linear_attention, model.mamba
    if mamba is not None and mamba.version != 2:
        mamba = None  # Mamba-1 (Jamba) splits its d_inner, which the widths below do not cover
    if (att is None and la is None and mamba is None) or tp == 1:
        return ""
    heads = att.num_heads if att else 0
    kv = att.num_kv_heads if att else 0
    # the MLPs' widths are split across the ranks too (vLLM's column-parallel layers divide
    # them exactly): Llama-4 Scout's 8,192 splits over 1, 2, 4, 8, 16, not 40
    widths = [w for w in ((model.dense_mlp.intermediate_size if model.dense_mlp else 0),
                          *((model.moe.expert_intermediate_size,
                             model.moe.shared_intermediate_size * model.moe.num_shared_experts)
                            if model.moe else ())) if w]

    def splits_attention(n: int) -> bool:
        return att is None or (heads % n == 0 and (
            att.mla is not None or (kv % n == 0 if kv >= n else n % kv == 0)))

    def splits_linear(n: int) -> bool:
        return la is None or (la.num_key_heads % n == 0 and la.num_value_heads % n == 0)

    def splits_mamba(n: int) -> bool:
        return mamba is None or (mamba.num_heads % n == 0
                                 and (mamba.n_groups % n == 0 or mamba.n_groups == 1))

    def fits(n: int) -> bool:
        return splits_attention(n) and splits_linear(n) and splits_mamba(n) \
            and all(w % n == 0 for w in widths)

    if fits(tp):
        return ""
    most = min(heads or (la.num_value_heads if la else mamba.num_heads if mamba else 1),
               MAX_TP_HINT)
    sizes = [n for n in range(1, most + 1) if fits(n)]
    ok = ", ".join(map(str, sizes))
    hint = (f"use {ok} GPUs per replica" if len(sizes) > 1 else
            "only 1 GPU per replica splits them: scale out with replicas")
    if not splits_attention(tp):
        what = f"{heads} attention heads ({kv} KV {'head' if kv == 1 else 'heads'})"
    elif la is not None and not splits_linear(tp):
        what = (f"{la.num_key_heads} linear-attention key heads ({la.num_value_heads} value "
                "heads)")
    elif mamba is not None and not splits_mamba(tp):
        what = f"{mamba.num_heads} Mamba heads in {mamba.n_groups} groups"
    else:
        what = (f"MLP width{'s' if len(set(widths)) > 1 else ''} "
                f"({', '.join(f'{w:,}' for w in dict.fromkeys(widths))})")
    return (f"tensor parallel {tp} does not split {model.name}'s {what} evenly; engines shard "
            f"them across GPUs: {hint}")

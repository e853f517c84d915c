"""The weight matmuls a layer launches in a decode step, as the serving engines' model files
write the layer.

At batch 1 a step's bytes are few and its fixed costs are most of it. Under a CUDA graph a
kernel costs no launch, but each still runs its own ramp and tail and waits on the one before
it, so a layer that runs ten matmuls costs more than one that runs four, whatever its bytes
(docs/research/batch1-per-layer-cost.md). The profiles price that as a cost per matmul
(EngineProfile.matmul_overhead_s) beside the cost per layer.

Counts follow vLLM's model files (vllm/model_executor/models/;
docs/research/matmuls-per-layer.md names each class, attribute and commit read): a projection
the engine fuses (Q, K and V; gate and up) is one launch; MoE experts run as one grouped kernel
per projection. SGLang writes these layers alike (it can fold DeepSeek's shared expert into
the routed ones: two fewer).
"""

from __future__ import annotations

from functools import cache

from ridgeline.deployment import Deployment
from ridgeline.ds_mla_cache import sparse_latent
from ridgeline.layouts import ATTENTION_MIXERS, DENSE, LINEAR, MAMBA, MOE
from ridgeline.lora_step import lora_launches
from ridgeline.model import Layer, ModelSpec

# Attention: qkv_proj (QKVParallelLinear, Q, K and V in one) and o_proj.
GQA_MATMULS = 2
# MLA decoding from the latent (DeepseekV2MLAAttention with the MLA backend): the fused
# q_a + kv_a projection (fused_qkv_a_proj) and q_b_proj, the absorbed key up-projection
# (W_UK_T, a batched matmul), the absorbed value up-projection (W_UV) and o_proj. Without a
# q_lora_rank (DeepSeek-V2-Lite) q_proj and kv_a_proj_with_mqa take the first two places.
MLA_MATMULS = 5
# DeepSeek Sparse Attention's lightning indexer (Indexer, vllm/model_executor/models/
# deepseek_v2.py), each layer and decode step: wq_b (the query latent to index_n_heads ×
# index_head_dim) and wk_weights_proj, wk and weights_proj fused in one GEMM since vLLM PR
# #38684 ('[Perf] DSV3.2 Indexer Fused Weights Projection', merged 2026-04-02; three
# ReplicatedLinears before it: ROCm/vllm stored copy 068f8154). Its logits (DeepGEMM's
# fp8_paged_mqa_logits) and top-k multiply no weights, as the attention kernel does not:
# the per-layer cost stands for them
INDEXER_MATMULS = 2
# Gated DeltaNet (Qwen3NextGatedDeltaNet): in_proj_qkvz, in_proj_ba and out_proj; its
# causal conv and the recurrent update are other kernels.
LINEAR_ATTENTION_MATMULS = 3
# Mamba-2 (NemotronH, MambaMixer2): in_proj and out_proj. Mamba-1 (Jamba, MambaMixer) adds
# x_proj and dt_proj.
MAMBA2_MATMULS = 2
MAMBA1_MATMULS = 4
# A dense MLP: gate_up_proj (MergedColumnParallelLinear) and down_proj; ungated, fc1 and fc2.
MLP_MATMULS = 2
# An MoE block: the router (gate) and the experts' two grouped projections (FusedMoE: w13,
# then w2). A shared expert adds its own gate_up_proj and down_proj, and Qwen's sigmoid
# shared_expert_gate one more.
ROUTER_MATMULS = 1
EXPERT_MATMULS = 2
SHARED_EXPERT_MATMULS = 2
SHARED_GATE_MATMULS = 1


def mixer_matmuls(spec: ModelSpec, layer: Layer) -> int:
    """The weight matmuls a layer's token mixer launches."""
    if layer.mixer in ATTENTION_MIXERS:
        if spec.attention is None or not spec.attention.mla:
            return GQA_MATMULS
        return MLA_MATMULS + INDEXER_MATMULS * (sparse_latent(spec) is not None)
    if layer.mixer == LINEAR:
        return LINEAR_ATTENTION_MATMULS
    if layer.mixer == MAMBA:
        return MAMBA2_MATMULS if spec.mamba is not None and spec.mamba.version == 2 \
            else MAMBA1_MATMULS
    return 0


def ffn_matmuls(spec: ModelSpec, layer: Layer, shared_fused: bool = False) -> int:
    """The weight matmuls a layer's feed-forward block launches (shared_fused: the engine runs
    the shared expert inside the routed experts' grouped matmuls)."""
    if layer.ffn == DENSE:
        return MLP_MATMULS
    if layer.ffn == MOE and spec.moe is not None:
        moe = spec.moe
        return (ROUTER_MATMULS + EXPERT_MATMULS
                + SHARED_EXPERT_MATMULS * (moe.num_shared_experts > 0 and not shared_fused)
                + SHARED_GATE_MATMULS * moe.shared_gate)
    return 0


def layer_matmuls(spec: ModelSpec, layer: Layer, shared_fused: bool = False) -> int:
    """A dense GQA layer: 2 + 2 = 4; a DeepSeek-V3 MoE layer: 5 + 5 = 10 (8 in SGLang);
    DeepSeek-V3.2's, its indexer's 2 more: 12."""
    return mixer_matmuls(spec, layer) + ffn_matmuls(spec, layer, shared_fused)


@cache
def step_matmuls(spec: ModelSpec, shared_fused: bool = False) -> int:
    """The weight matmuls one forward pass launches over every layer (the LM head aside:
    every model has one)."""
    return sum(layer_matmuls(spec, layer, shared_fused) for layer in spec.layers)


@cache
def moe_layers(spec: ModelSpec) -> int:
    """The layers whose feed-forward block routes to experts (DeepSeek-V3: 58 of 61)."""
    return sum(1 for layer in spec.layers if layer.ffn == MOE) if spec.moe is not None else 0


# SGLang's determine_num_fused_shared_experts (python/sglang/srt/models/deepseek_v2.py and
# glm4_moe.py): DeepSeek-V3/R1 (256 routed experts) and GLM-4.5/4.6, with one shared expert,
# on an NVIDIA card of compute capability 8.0 or more or an AMD MI300-class (gfx942) or later,
# and (on NVIDIA) without expert parallelism, run the shared expert as one more routed expert.
# Not DeepSeek-V3.2 (deepseek_v32): its DeepseekV32ForCausalLM subclasses DeepseekV2ForCausalLM
# with no override of its own, so the check's architectures[0] != "DeepseekV3ForCausalLM"
# turns the fusion off (GLM-5's GlmMoeDsaForCausalLM needed an override for it, SGLang PR #18804)
_FUSED_SHARED_MODELS = {"deepseek_v3": 256, "glm4_moe": None}  # model_type: routed experts
_FUSED_SHARED_FAMILIES = {"ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"}


# TensorRT-LLM's PyTorch backend runs DeepSeek-V3/R1's shared expert on an auxiliary CUDA
# stream beside the routed experts (tensorrt_llm/_torch/models/modeling_deepseekv3.py,
# Deepseekv3MoE.forward: maybe_execute_in_parallel on AuxStreamType.MoeShared): its launches
# are off the step's critical path, as SGLang's fused ones are (its bytes still stream).
# DeepSeek-V3.2 runs on the same class (@register_auto_model("DeepseekV32ForCausalLM") on
# DeepseekV3ForCausalLM, the same file), so its shared expert overlaps alike
_OVERLAPPED_SHARED_MODELS = ("deepseek_v3", "deepseek_v32")


def fuses_shared_expert(dep: Deployment, engine: str | None = None) -> bool:
    """Whether the deployment's engine (or ``engine``, on the same model and card) keeps the
    model's shared expert's launches off the step's critical path: SGLang folds it into the
    routed experts' grouped matmuls (its default for DeepSeek-V3/R1 and GLM-4.5), TensorRT-LLM
    runs it on a stream of its own (DeepSeek-V3/R1)."""
    engine = engine or dep.engine
    moe = dep.model.moe
    if engine == "trtllm" and moe is not None and moe.num_shared_experts \
            and dep.model.model_type in _OVERLAPPED_SHARED_MODELS:
        return True
    if engine != "sglang" or moe is None or moe.num_shared_experts != 1 \
            or dep.model.model_type not in _FUSED_SHARED_MODELS:
        return False
    experts = _FUSED_SHARED_MODELS[dep.model.model_type]
    if experts is not None and moe.num_experts != experts:  # Kimi-K2's 384: not fused
        return False
    acc = dep.accelerator
    return acc.family in _FUSED_SHARED_FAMILIES and not (
        dep.expert_parallel and acc.vendor == "nvidia")


def engine_matmuls(dep: Deployment, engine: str) -> int:
    """The weight matmuls one forward pass launches where ``engine`` writes ``dep``'s model on
    its card (``fuses_shared_expert``), its LoRA launches aside: DeepSeek-V3 on H200s, 601
    under vLLM and 485 under SGLang, which folds the shared expert in."""
    return step_matmuls(dep.model, fuses_shared_expert(dep, engine))


def deployment_matmuls(dep: Deployment) -> int:
    """The weight matmuls one forward pass launches as this deployment's engine writes it,
    with its LoRA adapters' shrink and expand kernels where it serves them
    (lora_step.lora_launches): Llama-3.1-8B 128, 387 under --enable-lora."""
    return step_matmuls(dep.model, fuses_shared_expert(dep)) + lora_launches(dep)

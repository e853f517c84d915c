"""How vLLM counts memory before the KV cache, version by version.

vLLM sizes its KV pool as total × gpu_memory_utilization minus what one profiling pass
used. What that pass counts has changed: before v0.2.5 only PyTorch's allocations; from
v0.2.5 everything the process holds (CUDA context, NCCL); V1 (v0.8) profiles
max_num_batched_tokens and then a dummy sampler run over max_num_seqs requests, whose
fp32 logits and top-k/top-p buffers are often the peak; v0.17 made that sampler lighter
(a Triton kernel instead of a sort); v0.20 reserves 0.92 of the card by default, not 0.9;
v0.21 also takes an estimate of the CUDA-graph pool. A fixed-size vision tower runs first in
the pass (``encoder_profile``). What it logs and checks moved too: v0.24 logs its token count
as maximum concurrency × max_model_len, and v0.26 sizes a window group's worst case for two
batches in flight; a hybrid's state blocks follow prefix caching (vllm_hybrid.py).
The eras are data (engines.json ``memory_versions``), each with its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator
from ridgeline.layouts import DENSE, LINEAR, MAMBA, MOE
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.quantization import EXPERTS
from ridgeline.stages import Stage
from ridgeline.units import GIB, MIB

ACTIVATION_BYTES = 2  # bf16/fp16 activations

LOGIT_BYTES = 4  # the sampler upcasts logits to fp32


def vllm_data() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["vllm"]
    return data


@lru_cache(maxsize=256)
def parse_version(text: str) -> tuple[int, ...]:
    """'v0.6.4.post1' → (0, 6, 4); '0.10' → (0, 10); '0.10.1.1' (a fourth part, as vLLM's
    v0.10.1.1 has) → (0, 10, 1, 1). InputError when no version is in it."""
    match = re.fullmatch(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?"
                         r"(?:[.+-]?(?:post|rc|dev)[\w.]*)?"
                         r"(?:\+[\w.]+)?(?:\s+V[01])?\s*", text)
    if not match:
        raise InputError(f"not a version: {text!r} (expected e.g. 0.11 or v0.6.4)")
    return tuple(int(part) for part in match.groups() if part is not None)


@dataclass(frozen=True)
class VLLMAccounting:
    """What one vLLM version's profiling pass counts before the KV cache."""

    version: str  # as asked, or the default
    era: str  # the first version of the era that applies
    engine: str  # "V0" or "V1"
    non_torch_gib: float  # CUDA context and the like, as this version's snapshot counts it
    nvlink_tp_non_torch_gib: float  # V1: custom all-reduce buffers at TP > 1 over NVLink
    sampler_logit_copies: float  # fp32 logit-sized buffers of the profiled sampler
    graphs_in_budget: bool
    note: str
    source: str
    tp_caveat: str = ""  # what this version gets wrong at TP > 1 that the model leaves out
    tokens_from_concurrency: bool = False  # logs "GPU KV cache size" as concurrency × length
    in_flight_batches: int = 1  # batches a window group keeps blocks for (async scheduling)
    linear_state_blocks: int = 1  # state blocks a linear-attention group holds per request
    hybrid_allocator: bool = False  # v0.10+: window layers paged apart, holding their window
    gpu_memory_utilization: float = 0.9  # its default (0.92 from v0.20)
    mrv2_default: str = ""  # Model Runner V2 the default: "dense" (v0.25.1+), "all" (v0.29+)
    mrv2_allowlist: tuple[str, ...] = ()  # MoE/hybrid architectures on MRV2 before v0.29
    mrv2_state_counted: bool = False  # v0.27+: MRV2's persistent sampler state in the budget
    mrv2_encoder_profiled: bool = False  # v0.27+: MRV2 profiles a vision tower
    mrv2_graphs_in_budget: bool = False  # v0.29+: MRV2 takes a CUDA-graph estimate


@lru_cache(maxsize=64)
def vllm_accounting(version: str | None = None) -> VLLMAccounting:
    """The accounting of ``version`` (default: the newest modelled). A version string that
    says V0 (``"0.8.5 V0"``, VLLM_USE_V1=0) keeps the V0 engine's profiling rule."""
    data = vllm_data()
    asked = (version or str(data["default_version"])).strip().removeprefix("v")  # as labelled
    wanted = parse_version(asked)
    newest = str(data["memory_versions"][-1]["from"])
    if wanted[0] > parse_version(newest)[0]:
        raise InputError(f"vLLM {asked} is no release ridgeline knows of (the newest modelled "
                         f"is {data['newest_checked']}; later 0.x releases follow its rules)")
    eras = [e for e in data["memory_versions"] if parse_version(e["from"]) <= wanted]
    if not eras:
        raise InputError(f"vLLM {asked} is older than any version ridgeline models")
    era = eras[-1]
    engine = "V0" if re.search(r"\bV0\b", asked) else str(era["engine"])
    return VLLMAccounting(asked, str(era["from"]), engine, float(era["non_torch_gib"]),
                          float(era["non_torch_nvlink_tp_gib"]),
                          float(era["sampler_logit_copies"]), bool(era["graphs_in_budget"]),
                          str(era["note"]), str(era["source"]), str(era.get("tp_caveat", "")),
                          bool(era.get("tokens_from_concurrency", False)),
                          int(era.get("in_flight_batches", 1)),
                          int(era.get("linear_state_blocks", 1)),
                          bool(era.get("hybrid_allocator", False)),
                          float(era.get("gpu_memory_utilization",
                                        data["gpu_memory_utilization"])),
                          str(era.get("mrv2_default", "")),
                          tuple(str(a) for a in era.get("mrv2_allowlist", ())),
                          bool(era.get("mrv2_state_counted", False)),
                          bool(era.get("mrv2_encoder_profiled", False)),
                          bool(era.get("mrv2_graphs_in_budget", False)))


def model_runner(dep: Deployment, acc: VLLMAccounting) -> str:
    """The GPU model runner ``acc``'s release gives this model by default: "MRV2" (Model
    Runner V2: from v0.25.1 a model that is not MoE, unless allow-listed, and has no mamba or
    linear-attention layers; from v0.29 every model), else "V1" (or "V0")."""
    if acc.engine != "V1" or not acc.mrv2_default:
        return acc.engine
    if acc.mrv2_default == "all" or dep.model.architecture in acc.mrv2_allowlist:
        return "MRV2"
    model = dep.model
    recurrent = model.count(mixer=LINEAR) + model.count(mixer=MAMBA) > 0
    return "V1" if model.is_moe or recurrent else "MRV2"


def mrv2_state_bytes(dep: Deployment, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """Model Runner V2's persistent buffers, held from start-up on the last pipeline stage's
    ranks (the others build no sampler; their 13 B a token of inputs is left out): per seat an
    int32 count of each vocabulary token it produced, a prompt bit-mask and the grammar
    bitmask (8 B per 32 tokens), and the logit-bias, bad-words and logprob tables; 13 B of
    inputs per token of the step (Qwen3's 151,936-token vocabulary at 1,024 seats: 0.63 GiB)."""
    c = {k: float(v) for k, v in vllm_data()["mrv2"].items() if not k.startswith("_")}
    vocab = dep.model.vocab_size
    per_seat = (c["state_bytes_per_seat_per_vocab"] * vocab
                + c["state_bytes_per_seat_per_32_vocab"] * -(-vocab // 32)
                + c["state_bytes_per_seat"])
    return max_num_seqs * per_seat + c["input_bytes_per_token"] * max_num_batched_tokens


def mrv2_sampler_bytes(dep: Deployment, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """Model Runner V2's profiled sampler: greedy by default, so bf16 logits of one row per
    dummy request (min(tokens, seats)) beside the step's hidden states, and the Gumbel
    sampler's partials — no fp32 copy (v1/worker/gpu/model_runner.py _dummy_sampler_run)."""
    rows = min(max_num_batched_tokens, max_num_seqs)
    hidden, vocab = dep.model.hidden_size, dep.model.vocab_size
    return (ACTIVATION_BYTES * max_num_batched_tokens * hidden + ACTIVATION_BYTES * rows * hidden
            + ACTIVATION_BYTES * rows * vocab + 12 * rows * -(-vocab // 1024))


def compile_transient_bytes() -> float:
    """What a cold torch.compile adds to Model Runner V2's profiled peak (about 1 GiB in
    both cold start-up logs; none when the compile cache from an earlier start is found)."""
    return float(vllm_data()["mrv2"]["compile_transient_gib"]) * GIB


def past_modelled(acc: VLLMAccounting) -> str:
    """A caution where ``acc`` is a release newer than the newest whose profiling code
    ridgeline's rules were checked against, or ""."""
    data = vllm_data()
    newest = str(data["newest_checked"])
    if parse_version(acc.version)[:2] <= parse_version(newest)[:2]:
        return ""
    return (f"vLLM {acc.version} is newer than {newest}, the newest release whose memory "
            f"accounting ridgeline has checked: it is sized by {newest}'s rules; "
            f"{data['newest_checked_note'].split('; ', 1)[1]}")


def activation_bytes_per_token(dep: Deployment) -> float:
    """Peak live activations per token in a forward pass, per TP rank.

    The MLP holds gate and up outputs and their product (3 × intermediate) beside three
    hidden-size tensors (residual, normed input, attention output): Llama-3.1-8B,
    2 B × (3·14336 + 3·4096) = 110.6 KB per token. A routed MoE layer holds vLLM's
    fused-experts caches for each of its top-k copies of the token: one buffer shared by
    the gate-up output (2 × expert intermediate ÷ TP) and the down output (hidden), beside
    the activated product (intermediate ÷ TP) (fused_moe.py fused_experts_impl:
    intermediate_cache13 of M·topk·max(N, K), intermediate_cache2 of M·topk·N/2), and its
    shared experts an MLP's three: Qwen3-235B-A22B at TP4, 8 × (4096 + 384) + 3 × 4096.
    """
    model = dep.model
    tp = dep.tensor_parallel_size
    widths = [0.0]
    if model.dense_mlp and any(layer.ffn == DENSE for layer in model.layers):
        widths.append(3 * model.dense_mlp.intermediate_size / tp)
    if model.moe and any(layer.ffn == MOE for layer in model.layers):
        moe = model.moe
        i = moe.expert_intermediate_size / tp
        widths.append(moe.experts_per_token * (max(2 * i, model.hidden_size) + i)
                      + 3 * moe.num_shared_experts * moe.shared_intermediate_size / tp)
    return ACTIVATION_BYTES * (max(widths) + 3 * model.hidden_size)


def sampler_peak_bytes(dep: Deployment, max_num_seqs: int, acc: VLLMAccounting) -> float:
    """The profiled sampler's peak: fp32 logits of max_num_seqs requests, times the
    buffers top-k/top-p sampling holds (Llama-3.1-8B at 1,024 requests before v0.17:
    1,024 × 128,256 × 4 B × 9.7 = 4.75 GiB; vLLM logged 4.76)."""
    return acc.sampler_logit_copies * max_num_seqs * dep.model.vocab_size * LOGIT_BYTES


def moe_workspace_bytes(dep: Deployment, tokens: int, version: str) -> float:
    """The fused-MoE workspace vLLM ``version`` keeps from the profile's first MoE layer on,
    through its dummy sampler, for a step of ``tokens`` tokens: two buffers of top-k copies
    of each token, max(I/TP, hidden) and max(2I/TP, hidden) wide, in bf16 (engines.json
    ``moe_workspace``, with its sources). Qwen3-235B-A22B at TP4 and 8,192 tokens: 1 GiB.
    Zero where the experts' kernel frees its buffers per layer (MXFP4, NVFP4, older
    releases), or the model has no routed experts."""
    moe = dep.model.moe
    if moe is None or dep.bytes_by_category.get(EXPERTS, 0) == 0:
        return 0.0
    rule = vllm_data()["moe_workspace"]
    since = rule["from"].get(dep.weights.format_of(EXPERTS).id)
    if since is None or parse_version(version) < parse_version(str(since)):
        return 0.0
    m = tokens
    if parse_version(version) < parse_version(str(rule["chunk_until"])):
        m = min(tokens, int(rule["chunk_tokens"]))
    i = moe.expert_intermediate_size / dep.tensor_parallel_size
    k, hidden = moe.experts_per_token, dep.model.hidden_size

    def rounded(n: float) -> float:
        return float(-(-int(n) // 256) * 256)

    held = rounded(ACTIVATION_BYTES * m * k * max(i, hidden)) \
        + rounded(ACTIVATION_BYTES * m * k * max(2 * i, hidden))
    if m < tokens:  # chunked: the whole step's output apart
        held += rounded(ACTIVATION_BYTES * tokens * hidden)
    return held


def encoder_profile(dep: Deployment, budget_tokens: int) -> tuple[float, float, int]:
    """The vision tower's part of V1's profiling pass: it runs first, on as many dummy images
    as the encoder budget holds (max(max_num_batched_tokens, tokens an image) ÷ tokens an
    image: 32 Gemma-3 images at 8,192), and its outputs stay held through the text pass and
    the sampler (vllm/v1/worker/gpu_model_runner.py profile_run, encoder_cache["tmp"];
    v1/core/encoder_cache_manager.py compute_encoder_budget; read in the v0.13-v0.33 wheels).
    Returns the tower's peak — an image's patches × 2 B × (2 × intermediate ÷ TP + 3 × hidden),
    its MLP's two products beside three hidden-size tensors, attention by a memory-efficient
    kernel with no score matrix (Gemma-3: 0.79 GB at 8 images) — the outputs held (tokens ×
    text hidden × 2 B an image) and the images; zeros for a model without a tower whose
    profiled image is known (``ModelSpec.vision_item``).
    v0.11.0-v0.11.2 padded each held output to the whole budget (about 2.5 GiB for Gemma-3-27B
    at 8,192 tokens); a v0.11.0 Gemma-3-27B log on an MI300X reads as if they did not, so
    that is not modelled."""
    item = dep.model.vision_item
    if item is None:
        return 0.0, 0.0, 0
    images = max(budget_tokens, item.tokens) // item.tokens
    per_patch = ACTIVATION_BYTES * (2 * item.intermediate_size / dep.tensor_parallel_size
                                    + 3 * item.hidden_size)
    held = images * item.tokens * dep.model.hidden_size * ACTIVATION_BYTES
    return images * item.patches * per_patch, held, images


def non_torch_bytes(dep: Deployment, acc: VLLMAccounting) -> float:
    """Memory outside PyTorch that the budget counts: none before v0.2.5; the CUDA context
    in V0 (0.35 GiB logged on an RTX 3090); what grew after V1's start-up snapshot (0.13 GiB
    at TP1) plus, at TP > 1 over NVLink, custom all-reduce buffers (0.55 GiB at TP2 on H100)."""
    gib = acc.non_torch_gib
    if not gib:
        return 0.0
    fabric = (dep.accelerator.link_kind or "").lower().startswith(LOW_LATENCY_FABRICS)
    if dep.tensor_parallel_size > 1 and fabric:
        gib += acc.nvlink_tp_non_torch_gib
    return gib * GIB


def capture_sizes(max_num_seqs: int) -> int:
    """CUDA-graph batch sizes V1 captures up to min(2 × max_num_seqs, 512): 1, 2, 4, every 8
    below 256, then every 16 — 51 sizes at the default cap of 512 (vllm/config/vllm.py
    _set_cudagraph_sizes, v0.11.1 to v0.33; before v0.11.1 every 8: 67)."""
    cap = min(2 * max_num_seqs, 512)
    small = [s for s in (1, 2, 4) if s <= cap]
    return len(small) + len(range(8, min(cap + 1, 256), 8)) + len(range(256, cap + 1, 16))


def cuda_graph_bytes(dep: Deployment, max_num_seqs: int, acc: VLLMAccounting,
                     enforce_eager: bool, stage: Stage | None = None,
                     counted: bool = False) -> float:
    """The CUDA-graph estimate v0.21+ takes from the KV budget: layers on one pipeline
    stage × captured sizes × 0.45 MiB (logged pools: 0.23–0.56 MiB per layer per size);
    ``counted``: the same estimate in any V1 version, for what the graphs hold on the card."""
    if enforce_eager or not (acc.graphs_in_budget or counted):
        return 0.0
    layers = dep.model.num_layers if stage is None else stage.layers
    per = float(vllm_data()["cuda_graph_mib_per_layer_per_size"]) * MIB
    return layers * capture_sizes(max_num_seqs) * per


# vLLM rounds MXFP4 expert dimensions up to what its MoE kernel needs (vllm/model_executor/
# layers/fused_moe/oracle/mxfp4.py, mxfp4_round_up_hidden_size_and_intermediate_size): Marlin,
# the path on GPUs without an FP4 kernel (Ampere, Ada; the SM12x Blackwells from v0.13, whose
# Triton path needs capability below 11), to hidden × 256 and intermediate per rank × 128;
# FlashInfer's TRT-LLM kernels, first choice on data-center Blackwell (SM100), both × 256.
# (hidden, intermediate) multiples:
MXFP4_ROUNDING = {"marlin": (256, 128), "flashinfer": (256, 256)}
SM12X_MARLIN_FROM = (0, 13)
# The Triton kernels Hopper uses round intermediate per rank × 64 and swizzle the weights and
# the e8m0 scales (quantization/utils/mxfp4_utils.py _swizzle_mxfp4, triton_kernels
# HopperMXScaleLayout: the scale copy's rows padded to 256); biases become fp32. Until v0.25
# the loaded scales stayed registered beside the swizzled copy (v0.25 deletes them); v0.17 to
# v0.21's bundled kernels also padded both stored dims of the values to 64.
HOPPER_SCALES_FREED_FROM = (0, 25)
# Hopper took Marlin until vLLM bundled OpenAI's triton_kernels: gpt-oss came in v0.10.1, where
# Triton needed triton_kernels installed by hand (PR #27370: "have to install triton_kernels
# manually"; #27523: as a dependency it "caused SM90 to default to Triton instead of Marlin"),
# and PR #28788 vendored it into vllm/third_party after v0.11.1 was tagged, so v0.12.0 is the
# first release whose wheel and image pick Triton. Logged: v0.10.1 on an H100 PCIe, Marlin,
# "Model loading took 65.9651 GiB" (vLLM #23278); v0.14.1 on an H100, "Using Triton backend",
# 64.38 GiB (#33155). VLLM_MXFP4_USE_MARLIN=1 (or --moe-backend marlin) still forces Marlin.
HOPPER_TRITON_FROM = (0, 12)
HOPPER_VALUE_PAD = ((0, 17), (0, 22))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxfp4_kernel(acc: Accelerator, version: tuple[int, ...]) -> str | None:
    """The MXFP4 MoE path vLLM ``version`` takes on ``acc``: marlin, triton-hopper,
    flashinfer, or None where it is not known (ROCm, SM12x before v0.13); Hopper's is Marlin
    before v0.12 (HOPPER_TRITON_FROM)."""
    if acc.family in ("ampere", "ada"):
        return "marlin"
    if acc.family == "hopper":
        return "triton-hopper" if version >= HOPPER_TRITON_FROM else "marlin"
    if acc.family != "blackwell":
        return None
    sm12x = "RTX" in acc.name or acc.form in ("consumer", "workstation", "soc")
    if not sm12x:
        return "flashinfer"
    return "marlin" if version >= SM12X_MARLIN_FROM else None


def _hopper_expert_bytes(hidden: int, per_rank: int, version: tuple[int, ...]) -> float:
    """One expert's bytes on one rank after the Hopper Triton path loads it (gpt-oss at TP1,
    hidden and intermediate 2,880: 14,060,160 B before v0.25 against 13,236,480 in the
    checkpoint, +6.2 %; the llm-d H100 logs: 13.47 and 64.38 GiB for gpt-oss-20b and -120b)."""
    inter = _round_up(per_rank, 64)
    rows13, rows2, bytes13, bytes2 = 2 * inter, hidden, hidden // 2, inter // 2
    if HOPPER_VALUE_PAD[0] <= version < HOPPER_VALUE_PAD[1]:
        rows13, rows2 = _round_up(rows13, 64), _round_up(rows2, 64)
        bytes13, bytes2 = _round_up(bytes13, 64), _round_up(bytes2, 64)
    values = rows13 * bytes13 + rows2 * bytes2
    swizzled_scales = _round_up(2 * inter, 256) * (hidden // 32) \
        + _round_up(hidden, 256) * _round_up(inter // 32, 2)
    loaded_scales = 0 if version >= HOPPER_SCALES_FREED_FROM else 3 * hidden * inter // 32
    biases = (2 * inter + hidden) * 4
    return values + swizzled_scales + loaded_scales + biases


def mxfp4_padding_bytes(dep: Deployment, stage: Stage | None = None,
                        version: str | None = None) -> float:
    """Extra bytes per GPU vLLM ``version``'s MXFP4 experts take beyond the checkpoint's
    (gpt-oss-20b on an A100: Marlin pads hidden 2,880 → 3,072 and intermediate 2,880 →
    2,944, 9 % more experts, 0.85 GiB; vLLM logged 13.72 GiB of weights against 12.8 in the
    checkpoint). Zero for other formats, or where the kernel a card gets is not known. Of a
    pipeline ``stage``: its MoE layers' share."""
    moe = dep.model.moe
    if moe is None or dep.bytes_by_category.get(EXPERTS, 0) == 0:
        return 0.0
    if dep.weights.format_of(EXPERTS).id != "mxfp4":
        return 0.0
    wanted = parse_version(version or str(vllm_data()["default_version"]))
    kernel = mxfp4_kernel(dep.accelerator, wanted)
    if kernel is None:
        return 0.0
    hidden = dep.model.hidden_size
    slices = 1 if dep.expert_parallel else dep.tensor_parallel_size  # EP keeps experts whole
    per_rank = moe.expert_intermediate_size / slices
    if kernel == "triton-hopper":
        # the checkpoint's: values 4 bits, a 1-byte scale per 32, bf16 biases
        stored = 3 * hidden * per_rank * (0.5 + 1 / 32) + (2 * per_rank + hidden) * 2
        growth = _hopper_expert_bytes(hidden, int(per_rank), wanted) / stored - 1
    else:
        hidden_multiple, inter_multiple = MXFP4_ROUNDING[kernel]
        padded = _round_up(hidden, hidden_multiple) * _round_up(int(per_rank), inter_multiple)
        growth = padded / (hidden * per_rank) - 1
    share = 1.0 if stage is None else stage.expert_share
    return dep.bytes_by_category[EXPERTS] * growth / dep.num_gpus * share


# vLLM's KV block for an MLA model (DeepSeek-V3/R1, Kimi-K2), read from every release's source
# on PyPI: 0.8.0–0.17.x vllm/platforms/cuda.py check_and_update_config overwrites the block for
# the MLA kernel it will pick (FlashMLA on Hopper: 64; CUTLASS MLA on B200/GB200, PRs #21626,
# #22738: 128; FlashInfer MLA from 0.15, PR #32339: 64); from 0.18.0 (PR #35122,
# platforms/interface.py update_block_size_for_backend) the backend is picked first and the
# block is the smallest it takes — FlashAttention MLA on Hopper 16 (FlashMLA, fp8 KV: 64),
# FlashInfer MLA on B200 32 — and a --block-size given is never overwritten.
MLA_FORCED_FROM = (0, 8)
CUTLASS_MLA_FROM = (0, 10, 1)
MLA_MULTIPLES_FROM = (0, 11, 1)  # a block that is a multiple of the kernel's is kept
CAPABILITY_FAMILY_FROM = (0, 13)  # B300 (10.3) takes B200's rule (is_device_capability_family)
FLASHINFER_MLA_FROM = (0, 15)
MLA_BACKEND_PICKS_FROM = (0, 18)
SM103 = ("b300",)  # compute capability 10.3 (NVIDIA's CUDA GPUs table); B200, GB200: 10.0


def mla_block_size(dep: Deployment, version: str, asked: int | None) -> tuple[int, str]:
    """The tokens per KV block vLLM ``version`` runs ``dep``'s MLA cache in, and why (empty
    where it is simply the one asked, or vLLM's default 16). Triton MLA (Ampere, Ada, GeForce
    Blackwell, ROCm without AITER) takes any block."""
    v, acc, default = parse_version(version), dep.accelerator, 16
    mla = dep.model.attention.mla if dep.model.attention is not None else None
    fp8 = dep.kv.bytes_per_element < 2
    hopper = acc.vendor == "nvidia" and acc.family == "hopper"
    b200 = acc.vendor == "nvidia" and acc.family == "blackwell" and acc.form == "datacenter" \
        and (acc.id not in SM103 or v >= CAPABILITY_FAMILY_FROM)
    if v < MLA_FORCED_FROM or not (hopper or b200):
        return asked or default, ""
    if v >= MLA_BACKEND_PICKS_FROM:
        if asked:
            return asked, ""
        if hopper:
            return (64, f"vLLM {version} runs an fp8 MLA cache on FlashMLA, whose blocks are "
                    "64 tokens") if fp8 else (default, "")
        if mla is not None and mla.qk_nope_head_dim != 128:
            return 128, f"vLLM {version} runs this MLA cache on CUTLASS MLA, in blocks of 128"
        return 32, (f"vLLM {version} runs MLA on {acc.id} on FlashInfer MLA, whose smallest "
                    "block is 32 tokens")
    kernel, name = 64, "FlashMLA"
    if b200:
        if v < CUTLASS_MLA_FROM:
            return asked or default, ""
        kernel, name = 128, "CUTLASS MLA"
        if v >= FLASHINFER_MLA_FROM and mla is not None and mla.qk_nope_head_dim == 128:
            kernel, name = 64, "FlashInfer MLA"
            if asked == 32:
                return asked, ""
    if asked and (asked == kernel or (v >= MLA_MULTIPLES_FROM and asked % kernel == 0)):
        return asked, ""
    return kernel, (f"vLLM {version} runs MLA on {acc.id} on {name} and sets its blocks to "
                    f"{kernel} tokens" + (f", not the {asked} asked" if asked else ""))

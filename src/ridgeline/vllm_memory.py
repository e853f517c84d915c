"""How vLLM counts memory before the KV cache, version by version.

vLLM sizes its KV pool as total × gpu_memory_utilization minus what one profiling pass
used. What that pass counts has changed: before v0.2.5 only PyTorch's allocations; from
v0.2.5 everything the process holds (CUDA context, NCCL); V1 (v0.8) profiles
max_num_batched_tokens and then a dummy sampler run over max_num_seqs requests, whose
fp32 logits and top-k/top-p buffers are often the peak; v0.17 made that sampler lighter
(a Triton kernel instead of a sort); v0.20 reserves 0.92 of the card by default, not 0.9;
v0.21 also takes an estimate of the CUDA-graph pool, whose captured sizes a drafter rounds to
multiples of 1 + its drafts (v0.11.1+): vllm_graphs.py's. A fixed-size vision tower runs first in
the pass (``encoder_profile``). What it logs and checks moved too: v0.24 logs its token count
as maximum concurrency × max_model_len, and v0.26 sizes a window group's worst case for two
batches in flight; a hybrid's state blocks follow prefix caching (vllm_hybrid.py).
The eras are data (engines.json ``memory_versions``), each with its source. What vLLM's
kernels add to the weights is vllm_mxfp4.py's; the KV block an MLA cache runs in,
vllm_mla_block.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.ds_mla_cache import sparse_latent
from ridgeline.errors import InputError
from ridgeline.layouts import DENSE, LINEAR, MAMBA, MOE
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.quantization import EXPERTS
from ridgeline.sparse_attention import INDEXER_LOGIT_BYTES, sparse_topk
from ridgeline.units import GIB, MIB

ACTIVATION_BYTES = 2  # bf16/fp16 activations
# vLLM 0.11.0 has no V0 engine: vllm/engine/llm_engine.py is `LLMEngine = V1LLMEngine` and the
# V0 worker is gone (0.10.1's source tarball still has vllm/worker/worker.py); with
# VLLM_USE_V1=0 the V1 engine raises
V0_REMOVED_IN = (0, 11)

LOGIT_BYTES = 4  # the sampler upcasts logits to fp32


def vllm_data() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["vllm"]
    return data


@lru_cache(maxsize=256)
def parse_version(text: str) -> tuple[int, ...]:
    """'v0.6.4.post1' → (0, 6, 4); '0.10' → (0, 10, 0), the part left out read as 0 so that
    '0.12' has reached a rule from 0.12.0; '0.10.1.1' (a fourth part, as vLLM's v0.10.1.1
    has) → (0, 10, 1, 1). InputError when no version is in it."""
    match = re.fullmatch(r"\s*v?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?"
                         r"(?:[.+-]?(?:post|rc|dev)[\w.]*)?"
                         r"(?:\+[\w.]+)?(?:\s+V[01])?\s*", text,
                         re.ASCII)  # \d alone takes '０.１１' (fullwidth) as 0.11
    if not match:
        raise InputError(f"not a version: {text!r} (expected e.g. 0.11 or v0.6.4)")
    parts = tuple(int(part) for part in match.groups() if part is not None)
    return parts + (0,) * (3 - len(parts))


def engine_named(version: str) -> str:
    """The engine a version string names ("0.9.2 V0": "V0"; "V1"), "" where it names none."""
    word = re.search(r"\bV[01]\b", version)
    return word[0] if word else ""


def in_releases(version: str, record: dict[str, Any]) -> bool:
    """Whether ``version`` is one of the releases an engines.json ``record`` spans: from its
    ``from``, before its ``until``."""
    return parse_version(record["from"]) <= parse_version(version) \
        < parse_version(record["until"])


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
    hybrid_allocator: bool = False  # V1 v0.9.1+: window layers paged apart, holding their window
    gpu_memory_utilization: float = 0.9  # its default (0.92 from v0.20)
    mrv2_default: str = ""  # Model Runner V2 the default: "dense" (v0.25.1+), "all" (v0.29+)
    mrv2_allowlist: tuple[str, ...] = ()  # MoE/hybrid architectures on MRV2 before v0.29
    mrv2_state_counted: bool = False  # v0.27+: MRV2's persistent sampler state in the budget
    mrv2_encoder_profiled: bool = False  # v0.27+: MRV2 profiles a vision tower
    mrv2_graphs_in_budget: bool = False  # v0.29+: MRV2 takes a CUDA-graph estimate
    mrv2_sampler_warmup: bool = False  # v0.33+: MRV2 profiles a fp32 warm-up sampler pass
    block_size: int = 16  # tokens per KV block where --block-size is not given (64 from v0.34)
    extensible_kv_cache: bool = False  # v0.34+: the pool measured after warm-up on CUDA/ROCm


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
        raise InputError(f"vLLM {asked} is older than any version ridgeline models (its "
                         f"memory accounting is read from {data['memory_versions'][0]['from']} "
                         "on)")
    era = eras[-1]
    engine = "V0" if re.search(r"\bV0\b", asked) else str(era["engine"])
    if engine == "V0" and wanted >= V0_REMOVED_IN:
        raise InputError(f"vLLM {asked}: the V0 engine was removed in v0.11.0 (its LLMEngine "
                         "is V1's, which VLLM_USE_V1=0 stops); V0 is 0.10 or earlier")
    first_v1 = next(str(e["from"]) for e in data["memory_versions"] if e["engine"] == "V1")
    if re.search(r"\bV1\b", asked) and wanted < parse_version(first_v1):
        raise InputError(f"vLLM {asked}: V1 became the default engine in v{first_v1}, where "
                         "ridgeline's V1 rules start; before it V1 was an opt-in preview "
                         "(VLLM_USE_V1=1, from 0.6.4) whose memory ridgeline does not model")
    return VLLMAccounting(asked, str(era["from"]), engine, float(era["non_torch_gib"]),
                          float(era["non_torch_nvlink_tp_gib"]),
                          float(era["sampler_logit_copies"]), bool(era["graphs_in_budget"]),
                          str(era["note"]), str(era["source"]), str(era.get("tp_caveat", "")),
                          bool(era.get("tokens_from_concurrency", False)),
                          int(era.get("in_flight_batches", 1)),
                          int(era.get("linear_state_blocks", 1)),
                          bool(era.get("hybrid_allocator", False)) and engine == "V1",
                          float(era.get("gpu_memory_utilization",
                                        data["gpu_memory_utilization"])),
                          str(era.get("mrv2_default", "")),
                          tuple(str(a) for a in era.get("mrv2_allowlist", ())),
                          bool(era.get("mrv2_state_counted", False)),
                          bool(era.get("mrv2_encoder_profiled", False)),
                          bool(era.get("mrv2_graphs_in_budget", False)),
                          bool(era.get("mrv2_sampler_warmup", False)),
                          int(era.get("block_size", data["block_size"])),
                          bool(era.get("extensible_kv_cache", False)))


def default_block_size(acc: VLLMAccounting, vendor: str, family: str = "",
                       max_model_len: int = 0, max_num_seqs: int = 0) -> int:
    """The tokens per KV block vLLM ``acc.version`` takes where --block-size is not given, on
    a card of ``vendor``: 16, then 64 from v0.34 (CacheConfig.DEFAULT_BLOCK_SIZE), which every
    NVIDIA attention backend takes; on ROCm ("amd") its first backend, ROCM_ATTN, keeps 16 for
    its native kernel (engines.json vllm.rocm_default_block_size): 0.34 on an H100 64, on an
    MI300X 16. On a Gaudi (``family`` "gaudi") vllm-gaudi's 128 (hpu_default_block_size); on a
    TPU ("google") the page tpu-inference picks for ``max_model_len`` and ``max_num_seqs``
    (``tpu_page_size``: 256 at 8,192 tokens). An MLA cache's is vllm_mla_block.py's. The pool
    and prefix matching share it."""
    if vendor == "amd":
        return min(acc.block_size, int(vllm_data()["rocm_default_block_size"]["block_size"]))
    if family == "gaudi":
        return int(vllm_data()["hpu_default_block_size"]["block_size"])
    if vendor == "google" and max_model_len > 0:
        return tpu_page_size(max_model_len, max_num_seqs)
    return acc.block_size


def tpu_page_size(max_model_len: int, max_num_seqs: int) -> int:
    """The KV block tpu-inference's Pallas backend takes where --block-size is not given
    (engines.json vllm.tpu_page_size): 16 past 8,192 tokens of context, else the context's
    next power of two over 16 pages, within [16, 256]; raised to the smallest power of two
    whose block tables for ``max_num_seqs`` requests fit half of the 1 MiB SMEM. Llama at
    8,192 tokens and 256 seats: 256; at 32,768: 64 (the SMEM floor, 32,768 / 512 pages)."""
    rule = vllm_data()["tpu_page_size"]
    if max_model_len > rule["long_context_tokens"]:
        page = int(rule["long_context_block"])
    else:
        power = 1 << max(max_model_len - 1, 0).bit_length()
        page = min(max(power // rule["pages_per_context"], rule["min_block"]), rule["max_block"])
    if max_num_seqs > 0:
        pages_per_request = rule["smem_table_bytes"] // max_num_seqs \
            // rule["block_table_entry_bytes"]
        least = -(-max_model_len // max(pages_per_request, 1))
        page = max(page, 1 << max(least - 1, 0).bit_length())
    return page


def one_pool(engine: str, version: str | None = None) -> bool:
    """Whether a pipeline-parallel replica of ``engine`` schedules its micro-batches from one
    scheduler and pool, as vLLM V1 does (any version whose engine is V1; the default), so a
    prompt's next chunk enters the pipeline while its last is in it; V0, SGLang and
    TensorRT-LLM are simulated as lanes (sim/pipeline.py), a request's chunks in turn."""
    if engine != "vllm":
        return False
    return not version or vllm_accounting(version).engine != "V0"


def model_runner(dep: Deployment, acc: VLLMAccounting, draft_method: str = "",
                 draft_algorithm: str = "", stock_compile: bool = False) -> str:
    """The GPU model runner ``acc``'s release gives this model by default: "MRV2" (Model
    Runner V2: from v0.25.1 a model that is not MoE, unless allow-listed, and has no mamba or
    linear-attention layers; from v0.29 every model), else "V1" (or "V0"). A drafter the
    release's MRV2 does not run yet (``draft_method``, --spec-method's words: a draft model
    before v0.31, ngram before v0.32; mrv2_spec_fallback) keeps the V1 runner, which vLLM
    falls back to with a warning; so does --speculative-config's method eagle3
    (``draft_algorithm``) under pipeline parallelism in 0.27 to 0.29
    (vllm.mrv2_eagle3_pipeline_fallback): Llama-3.1-8B at PP2 on 0.27.1 with an EAGLE-3 head
    runs on V1; and so does -cc.mode=STOCK_TORCH_COMPILE (``stock_compile``) before v0.32
    (vllm.mrv2_stock_compile_fallback): Llama-3.1-8B on 0.29 with it runs on V1."""
    if acc.engine != "V1" or not acc.mrv2_default \
            or mrv2_spec_fallback(acc.version, draft_method) \
            or eagle3_pipeline_fallback(dep, acc, draft_algorithm) \
            or (stock_compile and parse_version(acc.version) < parse_version(
                str(vllm_data()["mrv2_stock_compile_fallback"]["until"]))):
        return acc.engine
    if acc.mrv2_default == "all" or dep.model.architecture in acc.mrv2_allowlist:
        return "MRV2"
    model = dep.model
    recurrent = model.count(mixer=LINEAR) + model.count(mixer=MAMBA) > 0
    return "V1" if model.is_moe or recurrent else "MRV2"


def mrv2_spec_fallback(version: str, draft_method: str) -> bool:
    """Whether vLLM ``version`` sends a drafter of ``draft_method`` (--spec-method's words) to
    the V1 runner where Model Runner V2 would run the model: its
    _get_v2_model_runner_unsupported_features lists a draft model until v0.31 and ngram until
    v0.32 (engines.json vllm.mrv2_spec_fallback, read in the 0.29.0 to 0.33.0 wheels): a
    draft model on 0.30 runs on V1, on 0.31 on MRV2; ngram on 0.31 on V1, on 0.32 on MRV2."""
    until = vllm_data()["mrv2_spec_fallback"]["until"].get(draft_method)
    return until is not None and parse_version(version) < parse_version(str(until))


def eagle3_pipeline_fallback(dep: Deployment, acc: VLLMAccounting, draft_algorithm: str) -> bool:
    """Whether ``acc``'s release sends an EAGLE-3 drafter (--speculative-config's method
    eagle3, ``draft_algorithm``) under pipeline parallelism to the V1 runner: its
    _get_v2_model_runner_unsupported_features lists "EAGLE3 with pipeline parallelism" (read
    in 0.27.1 and the 0.29.0 wheel, gone from 0.30.0's; 0.25.1 and 0.26 unread; engines.json
    vllm.mrv2_eagle3_pipeline_fallback)."""
    return draft_algorithm == "eagle3" and dep.pipeline_parallel_size > 1 \
        and in_releases(acc.version, vllm_data()["mrv2_eagle3_pipeline_fallback"])


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


def mrv2_sampler_bytes(dep: Deployment, max_num_seqs: int, max_num_batched_tokens: int,
                       warmup: bool = False, forward_tokens: int | None = None) -> float:
    """Model Runner V2's profiled sampler: bf16 logits of one row per dummy request
    (min(tokens, seats)) beside the step's hidden states (of ``forward_tokens``, where a
    drafter cut the forward's: vllm_mrv2_drafter.profile_forward_tokens), then its greedy
    pass's Gumbel partials — no fp32 copy (v1/worker/gpu/model_runner.py _dummy_sampler_run) —
    or, where the release runs it after (``warmup``: v0.33+), the larger peak of its warm-up
    pass (mrv2_warmup_sampler_bytes)."""
    rows = min(max_num_batched_tokens, max_num_seqs)
    held = max_num_batched_tokens if forward_tokens is None else forward_tokens
    hidden, vocab = dep.model.hidden_size, dep.model.vocab_size
    greedy = 12 * rows * -(-vocab // 1024)
    passes = max(greedy, mrv2_warmup_sampler_bytes(dep, rows)) if warmup else greedy
    return (ACTIVATION_BYTES * held * hidden + ACTIVATION_BYTES * rows * hidden
            + ACTIVATION_BYTES * rows * vocab + passes)


def mrv2_warmup_sampler_bytes(dep: Deployment, rows: int) -> float:
    """What Model Runner V2's 'warmup-param' sampler pass (v0.33+) holds beside the bf16
    logits of its ``rows`` dummy requests: every sampling feature on, so a fp32 copy of the
    logits, then FlashInfer's top-k-masked logits and their softmax while it is held —
    3 fp32 copies of rows × vocab (engines.json vllm.mrv2.warmup_logit_copies). Llama-3.1-8B
    at 1,024 rows: 3 × 1,024 × 128,256 × 4 B = 1.47 GiB."""
    return mrv2_warmup_copies() * rows * dep.model.vocab_size * LOGIT_BYTES


def mrv2_warmup_copies() -> float:
    """The fp32 logit copies Model Runner V2's warm-up sampler pass holds at its peak (3)."""
    return float(vllm_data()["mrv2"]["warmup_logit_copies"])


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


def indexer_logits_bytes(dep: Deployment, version: str) -> float:
    """The fp32 logits vLLM ``version``'s profile sets aside in a DeepSeek Sparse Attention
    layer's indexer: from v0.19 a dummy of VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, 512 MiB, the cap
    its prefill chunks keep a [queries, keys] logits tensor under, let go as the layer
    returns, so one layer's at a time (engines.json vllm.sparse_indexer_logits). 0 for a
    model without an indexer, and before v0.19, whose profile reserves none."""
    rule = vllm_data()["sparse_indexer_logits"]
    if sparse_topk(dep.model) is None or parse_version(version) < parse_version(rule["from"]):
        return 0.0
    return float(rule["max_logits_mib"]) * MIB


def indexer_query_bytes(dep: Deployment, tokens: int) -> float:
    """The indexer's own queries a step of ``tokens`` holds while its logits are made: fp8
    values of every indexer head and a float32 weight a head (engines.json
    vllm.sparse_indexer_logits.profile_queries_source). DeepSeek-V3.2 at 8,192 tokens: 8,192 ×
    64 × (128 + 4) B = 66 MiB. Every TP rank runs all the heads (the indexer is replicated).
    0 for a model without an indexer."""
    latent = sparse_latent(dep.model)
    if latent is None or not latent.index_n_heads or not latent.index_head_dim:
        return 0.0
    scale = int(vllm_data()["sparse_indexer_logits"]["query_scale_bytes"])
    return float(tokens * latent.index_n_heads * (latent.index_head_dim + scale))


def indexer_pass_bytes(dep: Deployment, tokens: int, version: str) -> float:
    """The profile's peak inside a sparse layer's indexer, past any workspace held: the step's
    three hidden-size tensors (residual, normed input, attention output) and the indexer's
    own fp8 queries and weights (indexer_query_bytes) beside indexer_logits_bytes.
    DeepSeek-V3.2 at 8,192 tokens on v0.32: 8,192 × 3 × 7,168 × 2 B + 66 MiB + 512 MiB =
    0.89 GiB (the queries' bf16 source, 0.125 GiB, dead under torch.compile, and the MLA
    query tensors beside them, left out). 0 where no logits are reserved."""
    logits = indexer_logits_bytes(dep, version)
    if not logits:
        return 0.0
    return tokens * 3 * dep.model.hidden_size * ACTIVATION_BYTES \
        + indexer_query_bytes(dep, tokens) + logits


def indexer_decode_logits_bytes(dep: Deployment, decode_tokens: int, max_model_len: int
                                ) -> float:
    """One sparse layer's decode logits as vLLM allocates them: a float32 row of max_model_len
    for each decode token, whatever the sequences' lengths (fp8_paged_mqa_logits; engines.json
    vllm.sparse_indexer_decode_logits). DeepSeek-V3.2 at 1,024 seats and 163,840 tokens:
    1,024 × 163,840 × 4 B = 0.625 GiB on every rank. 0 without an indexer."""
    if sparse_topk(dep.model) is None:
        return 0.0
    return float(decode_tokens * max_model_len * INDEXER_LOGIT_BYTES)


def indexer_decode_pass_bytes(dep: Deployment, decode_tokens: int, max_model_len: int
                              ) -> float:
    """A decode step's peak inside one sparse layer's indexer, past any workspace held, as
    indexer_pass_bytes counts the profile's: three hidden-size tensors, the indexer's queries
    and its decode logits (indexer_decode_logits_bytes). DeepSeek-V3.2 at 1,024 seats and
    163,840 tokens: 1,024 × (3 × 7,168 × 2 + 64 × 132 + 163,840 × 4) B = 0.68 GiB. 0 without
    an indexer."""
    logits = indexer_decode_logits_bytes(dep, decode_tokens, max_model_len)
    if not logits:
        return 0.0
    return decode_tokens * 3 * dep.model.hidden_size * ACTIVATION_BYTES \
        + indexer_query_bytes(dep, decode_tokens) + logits


def encoder_profile(dep: Deployment, budget_tokens: int, max_num_seqs: int = 0,
                    images_per_prompt: int = 0) -> tuple[float, float, int]:
    """The vision tower's part of V1's profiling pass: it runs first, on as many dummy images
    as the encoder budget holds (max(max_num_batched_tokens, tokens an image) ÷ tokens an
    image: 32 Gemma-3 images at 8,192) — no more than ``max_num_seqs`` × ``images_per_prompt``
    (vllm_mm_limits.images_per_prompt) where seats are given, at least one — and its outputs
    stay held through the text pass and the sampler (vllm/v1/worker/gpu_model_runner.py
    profile_run, encoder_cache["tmp"]; v1/core/encoder_cache_manager.py
    compute_encoder_budget; MultiModalBudget.get_max_items; read in the v0.13-v0.33 wheels).
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
    if max_num_seqs > 0:  # the decoder's cap: every seat a prompt of its most images
        images = max(1, min(images, max_num_seqs * max(1, images_per_prompt)))
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

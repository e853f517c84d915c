"""How SGLang sizes its static KV pool, release by release.

SGLang gives the pool ``mem_fraction_static`` of the memory free after its distributed
start-up (the CUDA context and the tensor-parallel communicators), less the weights; the rest,
1 − mem_fraction_static, holds activations and CUDA graphs. With the flag unset, the fraction
came from a table by tensor-parallel size (to v0.4.7), then from a reserve by card tier and
parallel size (PR #7054, v0.4.7.post1 to v0.5.2), then from a reserve summed from the prefill
chunk, the CUDA-graph batch and the ranks (v0.5.3 on), each with a term more under
data-parallel attention; from v0.5.10 that sum holds the prefill CUDA graphs too
(sglang_prefill_graph_mib), from v0.5.20 a card below 35 GiB gets a longer chunk and more
graph batches. The rules read the card's memory as nvidia-smi shows it (MiB), not as
the runtime does. A model SGLang counts as multimodal gets the fraction cut for its vision
tower (sglang_vision_cut). The rules are data (engines.json ``sglang``), each with its source.
sglang_pool.py builds the KVPool from these defaults, a recurrent hybrid's state pool carved
out of it first (sglang_hybrid.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.deployment import Deployment
from ridgeline.ds_mla_cache import sparse_latent
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, smi_total_bytes
from ridgeline.model import ModelSpec
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.units import GIB
from ridgeline.vllm_memory import parse_version

TP_TABLE, TIER_RESERVE, RESERVED_MIB = "tp-table", "tier-reserve", "reserved-mib"
ERA_LABELS = {TP_TABLE: "v0.3-v0.4.7, a fraction by TP size",  # .post1 is the next era
              TIER_RESERVE: "v0.4.7.post1-v0.5.2, a reserve by card tier and TP × PP",
              RESERVED_MIB: "v0.5.3+, a reserve for the prefill chunk, graphs and ranks"}


def sglang_data() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["sglang"]
    return data


def sglang_release(version: str) -> tuple[int, ...]:
    """A release's order, a .post release after its base and the one before it (0.4.7 <
    0.4.7.post1 < 0.4.8; 0.5.3.post2 < 0.5.3.post3)."""
    post = re.search(r"post(\d+)", version)
    return (*parse_version(version), int(post.group(1)) if post else 0)


def sglang_era(version: str | None) -> str:
    """Which default rule SGLang ``version`` follows (default: the newest)."""
    if version is None:
        return RESERVED_MIB
    d, wanted = sglang_data(), sglang_release(version)
    newest = str(d["newest_checked"])
    if wanted[0] > parse_version(newest)[0]:
        raise InputError(f"SGLang {version} is no release ridgeline knows of (the newest "
                         f"modelled is {newest}; later 0.x releases follow its rules)")
    if wanted[0] == parse_version(newest)[0] and wanted[1] > parse_version(newest)[1] + 1:
        raise InputError(f"SGLang {version} is no release SGLang has had: ridgeline models "
                         f"{d['legacy_fraction']['from']} to {newest}, and takes the next "
                         f"minor ({_next_minor(newest)}) at {newest}'s rules"
                         + _version_hint(wanted, newest, d))
    if wanted < sglang_release(d["legacy_fraction"]["from"]):
        raise InputError(f"SGLang {version} is older than any version ridgeline models (its "
                         f"memory defaults are read from {d['legacy_fraction']['from']} on)")
    if wanted < sglang_release(d["legacy_fraction"]["before"]):
        return TP_TABLE
    if wanted < sglang_release(d["tier_reserve"]["before"]):
        return TIER_RESERVE
    return RESERVED_MIB


def _next_minor(newest: str) -> str:
    """The minor release after ``newest``'s: '0.5.23' → '0.6', which sglang_era still takes,
    priced by the newest's rules."""
    major, minor = parse_version(newest)[:2]
    return f"{major}.{minor + 1}"


def _version_hint(wanted: tuple[int, ...], newest: str, d: dict[str, Any]) -> str:
    """What a two-digit minor SGLang never had most likely meant: '0.34' → 0.3.4, its digits
    split, where that is a release modelled; and vLLM's own 0.34, where vLLM has had it
    (vLLM's minors run past 10, SGLang's stop at 0.5). "" where neither."""
    major, minor = wanted[:2]
    split = f"{major}.{minor // 10}.{minor % 10}"
    said = []
    if minor >= 10 and wanted[2] == 0 and sglang_release(str(d["legacy_fraction"]["from"])) \
            <= sglang_release(split) <= sglang_release(newest):
        said.append(f"did you mean {split}?")
    vllm_newest = str(engine_defaults("vllm")["default_version"])
    if parse_version(f"{major}.{minor}") <= parse_version(vllm_newest):
        said.append(f"{major}.{minor} is a vLLM release: --engine vllm")
    return f" ({'; '.join(said)})" if said else ""


@dataclass(frozen=True)
class SGLangMemoryDefaults:
    """What SGLang derives from the card's memory when the flags are unset."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_mib: float  # activations, CUDA graphs and buffers kept out of the static pool
    mem_fraction_static: float  # before any cut for a vision tower (sglang_vision_cut)
    era: str = RESERVED_MIB
    dp_attention_mib: float = 0.0  # the part of reserved_mib data-parallel attention adds
    drafter_mib: float = 0.0  # … and the part a drafter adds (sglang_speculative_reserve_mib)
    prefill_graph_mib: float = 0.0  # … and the prefill CUDA graphs (sglang_prefill_graph_mib)
    prefill_graph_off: str = ""  # why v0.5.10+ reserves no prefill graphs here, or ""


@dataclass(frozen=True)
class SGLangPrefillCase:
    """What SGLang's prefill CUDA graphs (v0.5.10+) depend on beyond the card: the model, the
    platform and the switches that turn them off (engines.json sglang.prefill_graph_reserve)."""

    architecture: str = ""
    mla: bool = False  # SGLang's MLA backend: a flat 1.5 GiB instead of 8 MiB a size
    dsa: bool = False  # DeepSeek Sparse Attention (NSA) over that latent
    multimodal: bool = False  # a model SGLang counts as multimodal (sglang_counts_multimodal)
    lora: bool = False
    drafter: bool = False
    cuda: bool = True  # False: ROCm and every other non-CUDA platform
    graphs_off: bool = False  # --disable-cuda-graph
    token_cap: int | None = None  # --max-total-tokens, which caps the largest prefill graph


def _below(rows: list[list[Any]], gib: float) -> list[Any]:
    """The first tier row whose bound (GiB; None: no bound) the card is below."""
    return next(row for row in rows if row[0] is None or gib < row[0])


def sglang_memory_defaults(total_bytes: float, tp: int = 1, pp: int = 1,
                           chunked_prefill_size: int | None = None,
                           version: str | None = None,
                           dp_size: int = 1,
                           cuda_graph_max_bs: int | None = None,
                           draft_method: str = "",
                           prefill: SGLangPrefillCase | None = None,
                           max_running_requests: int | None = None) -> SGLangMemoryDefaults:
    """SGLang ``version``'s defaults for a card of ``total_bytes`` (nvidia-smi's, where
    known: sglang_gpu_mem_bytes): the prefill chunk and CUDA-graph batch by memory tier (each
    as given where given: --cuda-graph-max-bs, 2 MiB a batch of the v0.5.3+ reserve), then
    the memory it reserves for them and ``mem_fraction_static`` = (memory − reserved) ÷ memory
    (before v0.4.7.post1: a table by tensor-parallel size). ``tp`` is its --tp-size, every GPU
    of a stage; ``dp_size`` > 1 is --dp-size with --enable-dp-attention, which reserves
    graph batch × dp_size × 3 MiB more from v0.5.3 (× 4.5 above a batch of 300; 4 GiB in
    v0.4.7.post1–v0.5.2): an H200 at TP8, DP8 holds 33,280 MiB, 0.769 of 143,771. A drafter
    (``draft_method``, --spec-method's words) reserves more (sglang_speculative_reserve_mib).
    From v0.5.10 the prefill CUDA graphs of ``prefill`` (None: a plain model on CUDA) join the
    sum before the floor (sglang_prefill_graph_mib): an H100 (81,559 MiB) at TP1 holds 512 +
    12,288 + 512 + 128 + 464 = 13,904 MiB, 0.830 (0.835 in v0.5.9). From v0.5.15
    --disable-cuda-graph (``prefill.graphs_off``) drops the 2 MiB a graph batch, from v0.5.22
    a given --max-running-requests (``max_running_requests``) caps the tier's graph batch."""
    d = sglang_data()
    gpu_mib = total_bytes / 2**20
    era = sglang_era(version)
    if era == TP_TABLE:
        rows = d["legacy_fraction"]["rows"]
        fraction = float(next(f for least, f in rows if tp >= least))
        small = gpu_mib < 25_000  # below it: shorter chunks and fewer graph batches
        chunk = chunked_prefill_size or (2048 if small else 8192)
        graphs = cuda_graph_max_bs or ((8 if tp < 4 else 80) if small else 160)
        return SGLangMemoryDefaults(chunk, graphs, gpu_mib * (1 - fraction), fraction, era)
    if era == TIER_RESERVE:
        t = d["tier_reserve"]
        gib = gpu_mib / 1024
        _, base, per_rank = _below(t["rows"], gib)
        dp_mib = float(t["dp_attention_gib"]) * 1024 if dp_size > 1 else 0.0
        drafter = sglang_speculative_reserve_mib(draft_method, version)
        reserved = (base + per_rank * tp * pp) * 1024 + dp_mib + drafter
        chunk = chunked_prefill_size or int(_below(t["chunked_prefill_size"], gib)[1])
        graphs = cuda_graph_max_bs or (int(t["cuda_graph_max_bs_below_35_gib"][tp >= 4])
                                       if gib < 35 else int(t["cuda_graph_max_bs"]))
        return SGLangMemoryDefaults(chunk, graphs, reserved,
                                    round((gpu_mib - reserved) / gpu_mib, 3), era, dp_mib,
                                    drafter)
    _, tier_chunk, graphs_small_tp, graphs_large_tp = sglang_memory_tier(gpu_mib / 1024, version)
    chunk = chunked_prefill_size or int(tier_chunk)
    graphs = cuda_graph_max_bs or _capped_graphs(
        int(graphs_small_tp if tp < 4 else graphs_large_tp), max_running_requests, version)
    r = d["reserved_mib"]
    case = prefill or SGLangPrefillCase()
    if draft_method and not case.drafter:  # 0.5.10 captured no prefill graphs with one
        case = replace(case, drafter=True)
    dp_mib = _dp_attention_mib(graphs, dp_size)
    decode_graphs = not (case.graphs_off and _reached(version, r["decode_graphs_off_from"]))
    off = sglang_prefill_graph_off(case, version, dp_size, pp)
    prefill_mib = 0.0 if off else sglang_prefill_graph_mib(chunk, version, case)
    reserved = (r["base"] + r["per_prefill_token"] * max(chunk, r["min_prefill_tokens"])
                + r["per_graph_batch"] * graphs * decode_graphs + r["per_8_ranks"] * tp * pp / 8
                + dp_mib + prefill_mib)
    if gpu_mib > r["floor_above_gib"] * 1024:  # the floor holds after the DP term
        reserved = max(reserved, r["floor_mib"])
    drafter = sglang_speculative_reserve_mib(draft_method, version)
    reserved += drafter  # after the floor
    return SGLangMemoryDefaults(chunk, graphs, reserved, round((gpu_mib - reserved) / gpu_mib, 3),
                                era, dp_mib, drafter, prefill_mib, off)


def _reached(version: str | None, release: str) -> bool:
    """Whether SGLang ``version`` (None: the newest modelled) is ``release`` or later."""
    return version is None or sglang_release(version) >= sglang_release(release)


def sglang_memory_tier(gib: float, version: str | None = None) -> list[Any]:
    """The v0.5.3+ memory tier of a card of ``gib`` (nvidia-smi's, in GiB) under SGLang
    ``version``: [bound, chunked_prefill_size, cuda_graph_max_bs below TP4, from TP4]. From
    v0.5.20 a card below 35 GiB (an RTX 5090's 32,607 MiB) gets 4,096 / 48 / 160, not
    2,048 / 24 / 80 (engines.json sglang.memory_tiers.rows_from)."""
    t = sglang_data()["memory_tiers"]
    row = _below(t["rows"], gib)
    for later in t.get("rows_from", []):
        if later["row"][0] == row[0] and _reached(version, later["from"]):
            row = later["row"]
    return list(row)


def _capped_graphs(tier_graphs: int, max_running_requests: int | None,
                   version: str | None) -> int:
    """The tier's cuda_graph_max_bs, cut to a given --max-running-requests from v0.5.22
    (256 with 64 requests: 64)."""
    since = sglang_data()["memory_tiers"]["capped_by_max_running_requests_from"]
    if max_running_requests is None or not _reached(version, since):
        return tier_graphs
    return min(tier_graphs, max_running_requests)


def sglang_prefill_capture_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang v0.5.10+ captures prefill CUDA graphs at, up to ``max_tokens``
    (its chunked_prefill_size): 4–32 by 4, 48–256 by 16, 288–512 by 32, 576–1,024 by 64,
    1,280–4,096 by 256, then by 512: 58 sizes to 8,192 tokens, 42 to 2,048."""
    sizes: list[int] = []
    for start, stop, step in sglang_data()["prefill_graph_reserve"]["capture_sizes"]:
        sizes += range(start, (max_tokens if stop is None else min(stop, max_tokens)) + 1, step)
    return sizes


def sglang_prefill_graph_mib(chunk: int, version: str | None = None,
                             case: SGLangPrefillCase | None = None) -> float:
    """What SGLang ``version``'s default reserve holds for its prefill CUDA graphs (v0.5.10+;
    0 before): 8 MiB a capture size up to the prefill chunk ``chunk`` (cut to --max-total-tokens
    where given), a flat 1.5 GiB for an MLA model: 58 × 8 = 464 MiB at 8,192 tokens. Whether
    the graphs are on at all is sglang_prefill_graph_off's."""
    d = sglang_data()["prefill_graph_reserve"]
    case = case or SGLangPrefillCase()
    if version is not None and sglang_release(version) < sglang_release(d["from"]):
        return 0.0
    if case.mla:
        return float(d["mla_mib"])
    tokens = min(chunk, case.token_cap) if case.token_cap else chunk
    return float(d["per_capture_size_mib"] * len(sglang_prefill_capture_sizes(tokens)))


_OFF_WORDS = {"non_cuda": "a platform other than CUDA", "multimodal": "a multimodal model",
              "drafter": "a drafter", "dp_attention": "data-parallel attention",
              "lora": "LoRA", "pipeline": "pipeline parallelism", "mla": "an MLA model",
              "mla_without_dsa": "an MLA model without DSA",
              "graphs_off": "--disable-cuda-graph"}


def sglang_prefill_graph_off(case: SGLangPrefillCase, version: str | None = None,
                             dp_size: int = 1, pp: int = 1) -> str:
    """Why SGLang ``version`` captures no prefill CUDA graphs for ``case`` (and reserves none
    for them), or "" where it does: before v0.5.10 never by default; after, the rules of
    engines.json sglang.prefill_graph_reserve.off, each in the releases that had it (data-
    parallel attention to v0.5.16, pipeline parallelism to v0.5.14 and from v0.5.19, a
    multimodal model, a platform other than CUDA, …), and --disable-cuda-graph from v0.5.14."""
    d = sglang_data()["prefill_graph_reserve"]
    if version is not None and sglang_release(version) < sglang_release(d["from"]):
        return "not on by default before v0.5.10"
    holds = {"non_cuda": not case.cuda, "multimodal": case.multimodal, "drafter": case.drafter,
             "dp_attention": dp_size > 1, "lora": case.lora, "pipeline": pp > 1,
             "mla": case.mla, "mla_without_dsa": case.mla and not case.dsa}
    for rule in d["off"]:
        if not _reached(version, rule["from"]) or (
                "before" in rule and _reached(version, rule["before"])):
            continue
        if rule["when"] == "architecture":
            if case.architecture in rule["architectures"]:
                return f"off for {case.architecture}"
        elif holds[rule["when"]]:
            return f"off under {_OFF_WORDS[rule['when']]}"
    if case.graphs_off and _reached(version, d["graphs_off_from"]):
        return f"off under {_OFF_WORDS['graphs_off']}"
    return ""


def sglang_prefill_case(model: ModelSpec, accelerator: Accelerator, version: str | None = None,
                        enable_multimodal: bool = False, lora: bool = False,
                        drafter: bool = False, graphs_off: bool = False,
                        token_cap: int | None = None) -> SGLangPrefillCase:
    """The facts SGLang's prefill CUDA graphs depend on for ``model`` on ``accelerator``:
    its architecture, an MLA latent (DSA over it), whether SGLang counts it multimodal, the
    platform (CUDA: an NVIDIA card), and the switches given."""
    mla = model.attention is not None and model.attention.mla is not None
    return SGLangPrefillCase(model.architecture, mla,
                             sparse_latent(model) is not None,
                             sglang_counts_multimodal(model, version, enable_multimodal), lora,
                             drafter, accelerator.vendor == "nvidia", graphs_off, token_cap)


def sglang_prefill_graphs_default(version: str | None = None) -> bool:
    """Whether SGLang ``version`` (None: the newest modelled) captures prefill CUDA graphs by
    default, where no rule turns them off: from v0.5.10 (engines.json
    sglang.prefill_graph_reserve.from)."""
    return _reached(version, sglang_data()["prefill_graph_reserve"]["from"])


def sglang_eager_drops_graphs(version: str | None = None) -> bool:
    """Whether SGLang ``version`` (None: the newest modelled) reserves less under
    --disable-cuda-graph: from v0.5.14, which turns the prefill graphs off with the decode
    graphs (and from v0.5.15 drops the decode graphs' 2 MiB a batch too); before, the reserve
    counted the graphs on or off. A version that is none of SGLang's: as no version."""
    since = sglang_data()["prefill_graph_reserve"]["graphs_off_from"]
    try:
        return _reached(version, since)
    except InputError:
        return _reached(None, since)


def sglang_counts_multimodal(model: ModelSpec, version: str | None = None,
                             enable_multimodal: bool = False) -> bool:
    """Whether SGLang ``version`` counts ``model`` as multimodal: its architecture one SGLang
    serves with a vision tower (engines.json sglang.vision_fraction), and not one it serves
    text-only without --enable-multimodal (Llama-4 from that rule's release)."""
    d = sglang_data()["vision_fraction"]
    if model.architecture not in d["architectures"]:
        return False
    off = d["off_unless_enable_multimodal"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    return enable_multimodal or model.architecture not in off["architectures"] \
        or release < sglang_release(off["from"])


def sglang_speculative_reserve_mib(draft_method: str, version: str | None = None) -> float:
    """What SGLang ``version``'s default mem_fraction_static holds back more for a drafter
    (``draft_method``: --spec-method's words; "" none): from v0.4.7.post1 2 GiB for a model
    drafter (EAGLE, EAGLE3, NEXTN: the draft model and its larger CUDA graphs), 4 GiB from
    v0.5.10, from v0.5.2 6 GiB for STANDALONE's draft model, nothing for n-gram lookup; the
    drafter's weights and its own cache are loaded into that held-back memory after the pool
    is sized. From v0.5.14 (and with no version, the newest) nothing: the draft weights load
    before the KV budget is measured, so they come out of the pool instead."""
    d = sglang_data()["speculative_reserve_mib"]
    if not draft_method or draft_method == "ngram" or sglang_era(version) == TP_TABLE \
            or _reached(version, d["before"]):
        return 0.0
    standalone = draft_method == "draft-model" and _reached(version, d["standalone_from"])
    if standalone:
        return float(d["standalone"])
    doubled = _reached(version, d["model_drafter_doubled_from"])
    return float(d["model_drafter_doubled"] if doubled else d["model_drafter"])


def sglang_speculative_requests(draft_method: str, version: str | None = None) -> int | None:
    """The max_running_requests SGLang ``version`` (default: the newest) sets with a drafter
    (``draft_method``: --spec-method's words; "" none) when --max-running-requests is unset,
    and then takes as given: 32 for EAGLE and NEXTN (run as EAGLE) from 0.4.3.post3, 48 from
    0.4.4.post4, STANDALONE (draft-model) and NGRAM from the releases that brought them
    (0.5.2, 0.5.3: sglang_algorithm_from); None before, or without a drafter (engines.json
    sglang.speculative_max_running_requests)."""
    if not draft_method:
        return None
    d = sglang_data()["speculative_max_running_requests"]
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    since = sglang_algorithm_from(draft_method)
    if since is not None and release < sglang_release(since):
        return None
    rows = [row for row in d["rows"] if release >= sglang_release(row["from"])]
    return int(rows[-1]["requests"]) if rows else None


def sglang_drafter_headroom_tokens(draft_method: str, drafts: int, seats: int | None,
                                   version: str | None = None) -> int:
    """The tokens SGLang ``version`` allocates its KV pool past what its profile sized, for a
    drafter (``draft_method``, --spec-method's words) whose draft and verify tokens share the
    target's pool: max_running_requests (``seats``, the server's) × (``drafts`` × topk + the
    verify's drafts + 1) + 100, topk 1 (a chain) — 48 seats drafting 3: 48 × (3 + 4) + 100 =
    436 tokens — from 0.4.3.post3 until 0.5.7 removed it, for every drafter but NGRAM; 0
    elsewhere, and for no version (the newest modelled) (engines.json
    sglang.drafter_headroom)."""
    d = sglang_data()["drafter_headroom"]
    if version is None or not draft_method or draft_method == "ngram" or drafts < 1 \
            or not seats:
        return 0
    if not sglang_release(d["from"]) <= sglang_release(version) < sglang_release(d["before"]):
        return 0
    drafted = drafts * int(d["topk"])  # draft: steps x topk
    verified = drafts + 1  # verify: speculative_num_draft_tokens, a chain's steps + 1
    return seats * (drafted + verified) + int(d["buffer_tokens"])


def sglang_algorithm_key(draft_method: str, algorithm: str = "") -> str:
    """The engines.json sglang.speculative_algorithms record of a drafter: SGLang's own
    ``algorithm`` name where it has one there (EAGLE3, which --spec-method prices as eagle),
    else ``draft_method`` (--spec-method's words), every MTP spelling as mtp (NEXTN)."""
    algorithms = sglang_data()["speculative_algorithms"]
    if algorithm.lower() in algorithms:
        return algorithm.lower()
    return "mtp" if draft_method.endswith("mtp") else draft_method


def sglang_algorithm_from(draft_method: str, algorithm: str = "") -> str | None:
    """The first SGLang release with ``draft_method``'s --speculative-algorithm (--spec-method's
    words; ``algorithm`` SGLang's name where the flags gave it): EAGLE 0.4.1.post1 (0.4.1 has
    none, 0.4.2 has it), NEXTN (mtp) 0.4.3.post1, EAGLE3 0.4.4.post2, STANDALONE (draft-model)
    0.5.2, NGRAM 0.5.3 (engines.json sglang.speculative_algorithms); None for a drafter with
    no record."""
    record = sglang_data()["speculative_algorithms"].get(
        sglang_algorithm_key(draft_method, algorithm))
    return None if record is None else str(record["from"])


def _dp_attention_mib(graphs: int, dp_size: int) -> float:
    """v0.5.3+'s reserve for data-parallel attention's padding: 3 MiB per CUDA-graph batch per
    rank, 1.5 more above a graph batch of 300 (512 × 8 ranks: 12,288 + 6,144 MiB)."""
    if dp_size <= 1:
        return 0.0
    d = sglang_data()["reserved_mib"]["dp_attention"]
    per = d["per_graph_batch_per_rank"] + (d["per_graph_batch_per_rank_large"]
                                           if graphs > d["large_graph_batch_above"] else 0)
    return float(per * graphs * dp_size)


def sglang_gpu_mem_bytes(acc: Accelerator, runtime_total_bytes: float) -> tuple[float, bool]:
    """The card memory SGLang's default rule reads, and whether it is nvidia-smi's: the
    smallest memory.total nvidia-smi shows (get_nvgpu_memory_capacity, MiB) where the catalog
    pins it (hardware.smi_total_bytes), else ``runtime_total_bytes``, the runtime's total the
    pool is sized from (an H100: 81,559 MiB, not 81,080)."""
    smi = smi_total_bytes(acc)
    return (smi, True) if smi else (runtime_total_bytes, False)


@dataclass(frozen=True)
class SGLangVisionCut:
    """What SGLang multiplies mem_fraction_static by for a model's vision tower."""

    factor: float = 1.0  # 1: no cut
    given_too: bool = False  # before 0.4.9 the model runner cut a fraction the flag gave too
    note: str = ""  # the rule or the reason there is none, for --explain


def sglang_vision_cut(model: ModelSpec, version: str | None = None,
                      enable_multimodal: bool = False) -> SGLangVisionCut:
    """SGLang ``version``'s cut to mem_fraction_static for a model it counts as multimodal
    (its architecture in engines.json sglang.vision_fraction, and not one it leaves text-only
    without --enable-multimodal): from 0.4.9.post3, on its default only, 0.95 × clamp(1 − 0.1
    × (L × H² ÷ (24 × 1024²) − 1), 0.8, 1.05), L and H the vision_config's num_hidden_layers
    and hidden_size (24 and 1,024 where unnamed), no cut without a vision_config; before it a
    flat 0.95, then 0.90 (from 0.4.4.post4). Gemma-3's SigLIP, 27 × 1,152: × 0.910; Qwen3.5's
    tower names depth, not num_hidden_layers, so 24 × 1,152: × 0.925."""
    d = sglang_data()["vision_fraction"]
    if model.architecture not in d["architectures"]:
        return SGLangVisionCut()
    release = sglang_release(version or str(sglang_data()["newest_checked"]))
    off = d["off_unless_enable_multimodal"]
    if not enable_multimodal and model.architecture in off["architectures"] \
            and release >= sglang_release(off["from"]):
        would = sglang_vision_cut(model, version, enable_multimodal=True)
        return SGLangVisionCut(note=f"SGLang serves {model.architecture} text-only unless "
                               "--enable-multimodal, so no cut for the vision tower"
                               + (f" (with it, × {would.factor:.4f})" if would.factor != 1
                                  else ""))
    if release < sglang_release(d["from"]):
        flat = next(row for row in d["flat_by_release"]
                    if release < sglang_release(row["before"]))
        given_too = release < sglang_release(d["given_too_before"])
        return SGLangVisionCut(float(flat["factor"]), given_too,
                               f"× {flat['factor']} for a multimodal model, before v0.4.9.post3"
                               + (", a fraction the flag gives too" if given_too else ""))
    vision = model.vision_config
    if vision is None:
        return SGLangVisionCut(note=f"{model.architecture} is multimodal to SGLang, but its "
                               "config has no vision_config, so no cut")
    layers = vision.num_hidden_layers or int(d["baseline_layers"])
    hidden = vision.hidden_size or int(d["baseline_hidden_size"])
    ratio = layers * hidden**2 / (d["baseline_layers"] * d["baseline_hidden_size"] ** 2)
    factor = d["base"] * min(max(1 - d["per_complexity"] * (ratio - 1), d["least"]), d["most"])
    return SGLangVisionCut(factor, False, (
        f"× {factor:.4f} for the vision tower (adjust_mem_fraction_for_vlm): {d['base']} × "
        f"clamp(1 − {d['per_complexity']} × ({layers} × {hidden:,}² ÷ "
        f"({d['baseline_layers']} × {d['baseline_hidden_size']:,}²) − 1), {d['least']}, "
        f"{d['most']})" + ("" if vision.num_hidden_layers else
                           f"; its vision_config names no num_hidden_layers, so SGLang's "
                           f"{d['baseline_layers']}")))


def sglang_loads_tower(model: ModelSpec, enable_multimodal: bool = False) -> bool:
    """Whether SGLang loads ``model``'s vision tower: not Llama-4's when it is served
    text-only (without --enable-multimodal, models/mllama4.py builds no vision_model and
    skips its weights); every other tower it does."""
    off = sglang_data()["vision_fraction"]["off_unless_enable_multimodal"]
    return enable_multimodal or \
        model.architecture not in off["tower_left_unloaded"]["architectures"]


def sglang_fraction(rule: SGLangMemoryDefaults, cut: SGLangVisionCut,
                    given: float | None = None) -> float:
    """The mem_fraction_static SGLang sizes its pool at: ``given`` (--mem-fraction-static;
    cut for a vision tower too before v0.4.9), else its rule's default × the vision cut."""
    if given is not None:
        return given * cut.factor if cut.given_too else given
    return rule.mem_fraction_static * cut.factor


def check_sglang_fraction(rule: SGLangMemoryDefaults, fraction: float,
                          memory_bytes: float) -> None:
    """Refuse a deployment whose mem_fraction_static (``fraction``, the default of ``rule``
    on a card of ``memory_bytes`` as its rule reads it) is at or below 0: the default has no
    floor, and SGLang then stops at start-up before it allocates a pool (engines.json
    sglang.fraction_not_positive). A 0.5 GiB card's 3,728 MiB reserve gives −6.392."""
    if fraction > 0:
        return
    d = sglang_data()["fraction_not_positive"]
    drafter = f" ({rule.drafter_mib:,.0f} for the drafter)" if rule.drafter_mib else ""
    raise InputError(
        f"SGLang's default mem_fraction_static here is {fraction:g}, not above 0: it holds "
        f"back {rule.reserved_mib:,.0f} MiB{drafter} of the card's "
        f"{memory_bytes / 2**20:,.0f} MiB, so SGLang stops at start-up (\"{d['refusal']}\"); "
        f"give --mem-fraction-static or a card with more memory")


def sglang_flag_fraction(rule: SGLangMemoryDefaults, cut: SGLangVisionCut) -> float:
    """The --mem-fraction-static that gives the pool SGLang's default does (a plan writes it
    out): the default after the vision cut, or before it where the release cuts a given
    fraction too; to four places."""
    return round(rule.mem_fraction_static if cut.given_too else sglang_fraction(rule, cut), 4)


def sglang_startup_bytes(dep: Deployment) -> float:
    """What SGLang's distributed start-up holds before it measures the memory its fraction
    applies to: the CUDA context, and at TP > 1 the communicators (NCCL and custom all-reduce
    buffers: 1.25 GiB on eight NVLink H100s, 0.13 on four PCIe cards, logged as "mem
    usage=… GB", SGLang's GB being GiB)."""
    s = sglang_data()["startup"]
    gib = float(s["context_gib"])
    if dep.expert_ranks > 1:  # its --tp-size, data-parallel attention's ranks included
        nvlink = (dep.accelerator.link_kind or "").lower().startswith(LOW_LATENCY_FABRICS)
        gib += float(s["communicators_gib_nvlink" if nvlink else "communicators_gib_pcie"])
    return gib * GIB


def sglang_requests_asked(capacity_tokens: int, context_len: int, given: int | None = None,
                          version: str | None = None) -> int:
    """The requests SGLang sizes its request pool for (max_num_reqs), before it halves the
    token capacity: 512 per context_len of its token capacity, clamped to 2,048–4,096, or
    the value given. Before v0.5 one more (the request pool's spare slot)."""
    rule = sglang_data()["max_running_requests"]
    seats = given or min(max(int(capacity_tokens / context_len * rule["per_context"]),
                             rule["least"]), rule["most"])
    if given is None and version is not None and parse_version(version) < (0, 5):
        seats += 1
    return int(seats)


def sglang_max_running_requests(capacity_tokens: int, context_len: int,
                                given: int | None = None, version: str | None = None) -> int:
    """SGLang's max_running_requests: a value given as given, or set with a drafter
    (sglang_speculative_requests; tp_worker caps it only by the request pool, which is sized
    to it), else the requests it asks (sglang_requests_asked) at
    most half the capacity, and at least one: 3,000 tokens run 1,500 by default, 2,000 given."""
    if given is not None:
        return given
    return max(1, min(sglang_requests_asked(capacity_tokens, context_len, None, version),
                      capacity_tokens // 2))


def past_checked(version: str | None) -> str:
    """A caution where SGLang ``version`` is newer than the newest whose rules were read, or
    ""."""
    d = sglang_data()
    if version is None or parse_version(version) <= parse_version(d["newest_checked"]):
        return ""
    return (f"SGLang {version} is newer than {d['newest_checked']}, the newest whose memory "
            f"defaults ridgeline has read: {d['newest_checked_note']}")

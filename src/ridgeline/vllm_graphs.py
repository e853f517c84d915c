"""Which batch sizes vLLM captures CUDA graphs at, and the memory those graphs take.

V1 captures graphs at 1, 2, 4 and then every 8 (every 16 from 256) up to a cap: by default
twice max_num_seqs, at most 512 (1,024 on an SM 10.x card from v0.28: a B200) and at most
the step's token budget. From v0.13 a drafter's tokens scale that cap (1 + num_speculative_
tokens), and from v0.11.1 a drafter rounds each size up to a multiple of them. Off the
stride, the token budget is captured too from v0.21, max_num_seqs from v0.31, and a
drafter's whole decode batches from v0.29. v0.34 on an SM 10.x card captures two grids of
its own instead, prefill tokens and decode requests (``split_grids``). From v0.21 vLLM takes
an estimate of the graphs' pool from the KV budget (``cuda_graph_bytes``). The rules are
data (engines.json ``max_cudagraph_capture_size``, ``spec_decode_capture_rounding``), each
with its source; how the rest of the profiling pass is counted is vllm_memory.py's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, blackwell_generation
from ridgeline.stages import Stage
from ridgeline.units import MIB
from ridgeline.vllm_memory import (
    VLLMAccounting,
    indexer_decode_logits_bytes,
    parse_version,
    vllm_data,
)

# the largest CUDA-graph batch a flag or a compilation config may name (vLLM's tokens, SGLang's
# sequences): past any engine's step, as cli_types.MAX_BATCH bounds a batch. The size list up
# to it holds 62,500 sizes; up to 2**31 it held 134 million and took minutes to build
MAX_CAPTURE_SIZE = 10**6


def capture_query_len(spec_tokens: int = 0, version: str | None = None) -> int:
    """The tokens a request's decode step runs that vLLM ``version`` (default: the newest
    modelled) scales its default capture cap by: 1 + num_speculative_tokens from v0.13.0,
    where _set_cudagraph_sizes counts the drafts (engines.json
    vllm.max_cudagraph_capture_size), else 1. Three drafts on v0.13: 4; on v0.12: 1."""
    rule = vllm_data()["max_cudagraph_capture_size"]
    asked = version or str(vllm_data()["default_version"])
    if not spec_tokens or parse_version(asked) < parse_version(rule["drafts_multiply_from"]):
        return 1
    return 1 + spec_tokens


def sm100_card(acc: Accelerator) -> bool:
    """Whether ``acc`` is a compute-capability 10.x card, which vLLM's
    ``is_device_capability_family(100)`` names: NVIDIA's data-centre Blackwells (B200 and
    GB200 are SM 10.0, B300 SM 10.3), not the SM 12.x ones (an RTX card, workstation,
    consumer or SoC: RTX PRO 6000, RTX 5090, DGX Spark's GB10), as vllm_mxfp4 tells them."""
    return blackwell_generation(acc) == "sm100"


def capture_ceiling(version: str | None = None, sm100: bool = False) -> int:
    """The most tokens vLLM ``version``'s default capture cap reaches (engines.json
    vllm.max_cudagraph_capture_size): 512, and 1,024 on an SM 10.x card (``sm100``) from
    v0.28 (``default_max_graph_size``): a B200 on 0.34, 1,024; an H100, or a B200 on 0.27,
    512."""
    rule = vllm_data()["max_cudagraph_capture_size"]
    asked = version or str(vllm_data()["default_version"])
    if sm100 and parse_version(asked) >= parse_version(rule["sm100_ceiling_from"]):
        return int(rule["sm100_ceiling"])
    return int(rule["ceiling"])


def capture_cap(max_num_seqs: int, max_capture_size: int | None = None,
                max_num_batched_tokens: int | None = None, query_len: int = 1,
                ceiling: int = 512) -> int:
    """The largest batch V1 captures: --max-cudagraph-capture-size, by default
    min(2 × max_num_seqs × ``query_len``, ``ceiling``) (capture_query_len: 1 + the drafts
    from v0.13; capture_ceiling: 512, a B200's 1,024 from v0.28), then at most
    max_num_batched_tokens, since no step runs more tokens (vllm/config/vllm.py
    _set_cudagraph_sizes, v0.11.1 on: ``min(max_num_tokens, max_cudagraph_capture_size)``):
    256 seats under a budget of 128 tokens capture to 128; 32 seats drafting 3 to 256; 1,024
    seats on a B200 to 1,024."""
    cap = max_capture_size or min(2 * max_num_seqs * query_len, ceiling)
    return min(cap, max_num_batched_tokens) if max_num_batched_tokens else cap


def request_grid(max_requests: int, ceiling: int) -> list[int]:
    """The request counts whose whole decode batches vLLM v0.29+ captures under a drafter: 1,
    2, 4, every 8 below 256, every 16 from 256, to min(``max_requests``, ``ceiling``), and
    that limit itself (``request_counts`` in _set_cudagraph_sizes): 100 seats, … 88, 96,
    100."""
    top = min(max_requests, ceiling)
    counts = [n for n in (1, 2, 4) if n <= top]
    counts += [*range(8, min(top + 1, 256), 8), *range(256, top + 1, 16)]
    return sorted({*counts, top})


def appended_sizes(sizes: list[int], cap: int, max_num_seqs: int,
                   max_num_batched_tokens: int | None, query_len: int, version: str | None,
                   default_cap: int | None, ceiling: int = 512) -> list[int]:
    """``sizes`` with the ones vLLM ``version`` captures off the 8/16 stride (engines.json
    vllm.max_cudagraph_capture_size): the token budget where it is the cap (v0.21+), and,
    with the cap left to its default (``default_cap``, before the budget; None: a cap
    given), max_num_seqs (v0.31+, no drafts) or a drafter's whole decode batches, n ×
    ``query_len`` (v0.29+, request_grid to ``ceiling``), each within that default and the
    budget. 100 seats
    on 0.31: … 96, 100, 104, … 200; on 0.30 no 100."""
    v = parse_version(version or str(vllm_data()["default_version"]))
    rule = vllm_data()["max_cudagraph_capture_size"]
    extra: set[int] = set()
    budget = max_num_batched_tokens or cap
    if max_num_batched_tokens and budget <= cap \
            and v >= parse_version(rule["budget_appended_from"]):
        extra.add(budget)
    if default_cap is not None and query_len > 1 \
            and v >= parse_version(rule["decode_sizes_appended_from"]):
        extra.update(n * query_len for n in request_grid(max_num_seqs, ceiling)
                     if n * query_len <= min(default_cap, budget))
    elif default_cap is not None and max_num_seqs <= min(default_cap, budget) \
            and v >= parse_version(rule["seats_appended_from"]):
        extra.add(max_num_seqs)
    return sorted({*sizes, *extra})


def _walk_grid(limit: int, step: Callable[[int], float]) -> list[int]:
    """1 to ``limit``: each next size the next multiple of the largest power of two not above
    ``step`` of the last (vllm/config/compilation.py _walk_grid, v0.34), and ``limit``."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_grid(max_tokens: int) -> list[int]:
    """The token counts vLLM v0.34 captures PIECEWISE graphs at on an SM 10.x card: 1, 2,
    4, every 8 to 64, four a doubling to 1,024, then every 256, every 512 once 7 % of the
    size passes 512 (prefill_cudagraph_capture_grid): 54 sizes at 8,192."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))


def decode_grid(max_requests: int) -> list[int]:
    """The request counts vLLM v0.34 captures FULL decode graphs at on an SM 10.x card:
    each count to 6, then a step of the largest power of two not above 0.65 × n^(2/3)
    (decode_cudagraph_capture_grid): 64 sizes at 1,024."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def splits(version: str | None, sm100: bool, max_capture_size: int | None,
           asked: tuple[int, ...] | None, mode: str | None, query_len: int,
           multiple: int) -> bool:
    """Whether vLLM ``version`` captures the split grids (split_grids) rather than one
    list: v0.34+ on an SM 10.x card with neither --max-cudagraph-capture-size nor listed
    sizes (vLLM's wide_defaults), under the default cudagraph_mode and without a drafter
    (whose split is not modelled: the one list is counted there)."""
    rule = vllm_data()["max_cudagraph_capture_size"]
    v = parse_version(version or str(vllm_data()["default_version"]))
    return sm100 and v >= parse_version(rule["sm100_split_from"]) and not max_capture_size \
        and not asked and mode in (None, "FULL_AND_PIECEWISE") and query_len == 1 \
        and multiple == 1


def split_grids(max_num_seqs: int, max_num_batched_tokens: int | None
                ) -> tuple[list[int], list[int]]:
    """(the prefill token sizes, the decode sizes in tokens) vLLM v0.34 captures on an SM
    10.x card (engines.json vllm.max_cudagraph_capture_size sm100_split): prefill_grid to
    min(8,192, the budget), decode_grid to max_num_seqs, each decode size within min(the
    budget, 8,192) tokens (a larger one captured at that limit). 1,024 seats and a 16,384
    budget: 54 and 64."""
    rule = vllm_data()["max_cudagraph_capture_size"]
    budget = max_num_batched_tokens or int(rule["sm100_prefill_tokens"])
    prefill = prefill_grid(min(int(rule["sm100_prefill_tokens"]), budget))
    limit = min(max_num_seqs, budget, int(rule["sm100_decode_tokens"]))
    grid = decode_grid(max_num_seqs)
    decode = sorted({min(n, limit) for n in grid[:_first_at_or_past(grid, limit) + 1]})
    return prefill, decode


def _first_at_or_past(sizes: list[int], limit: int) -> int:
    """The index of the first of ascending ``sizes`` at or past ``limit`` (len where none)."""
    return next((i for i, size in enumerate(sizes) if size >= limit), len(sizes))


def capture_size_list(cap: int) -> list[int]:
    """The CUDA-graph batch sizes V1 captures up to ``cap``: 1, 2, 4, every 8 below 256, then
    every 16 (vllm/config/vllm.py _set_cudagraph_sizes, v0.11.1 to v0.33; before v0.11.1
    every 8)."""
    small = [s for s in (1, 2, 4) if s <= cap]
    return small + list(range(8, min(cap + 1, 256), 8)) + list(range(256, cap + 1, 16))


def spec_capture_multiple(spec_tokens: int, version: str | None = None, runner: str = "V1",
                          tensor_parallel_size: int = 1, mode: str | None = None) -> int:
    """The multiple vLLM ``version`` rounds each captured size up to under speculative
    decoding (engines.json vllm.spec_decode_capture_rounding): 1 + num_speculative_tokens from
    v0.11.1 on the V1 runner (Model Runner V2 from v0.25 does not round); v0.11.1 alone takes
    the tensor-parallel size where larger and refuses a pair where the larger is no
    multiple of the smaller (two drafts at TP2: 3 and 2). 1 (no rounding) without drafts,
    before v0.11.1, or under cudagraph_mode (``mode``) NONE or PIECEWISE: vLLM rounds only
    where its decode graphs are FULL (engines.json, the rule's source)."""
    rule = vllm_data()["spec_decode_capture_rounding"]
    asked = version or str(vllm_data()["default_version"])
    v = parse_version(asked)
    if not spec_tokens or v < parse_version(rule["from"]) or mode in ("NONE", "PIECEWISE") \
            or (runner == "MRV2" and v >= parse_version(rule["mrv2_rounds_until"])):
        return 1
    query = 1 + spec_tokens
    tp = tensor_parallel_size
    if tp > 1 and v < parse_version(rule["tp_multiple_until"]):
        multiple = max(query, tp)
        if multiple % query or multiple % tp:
            raise InputError(f"vLLM {asked}: the larger of {query} (1 + "
                             f"num_speculative_tokens) and {tp} (the tensor-parallel size) "
                             "must be a multiple of the other for its CUDA-graph sizes, and "
                             "v0.11.1 refuses to start (fixed in v0.11.2); change the drafts "
                             "or the release")
        return multiple
    return query


def spec_rounded_sizes(sizes: list[int], cap: int, multiple: int,
                       version: str | None = None) -> list[int]:
    """``sizes`` as vLLM keeps them under speculative decoding: each rounded up to a multiple
    of ``multiple`` (spec_capture_multiple), those past ``cap`` dropped, each kept once —
    three drafts turn 1, 2, 4, 8, … 512 into 4, 8, … 512 (49 sizes, not 51); two drafts, 3, 6,
    9, 18, 24, … 498 (49). InputError where none is left: from v0.12 vLLM refuses to start
    (v0.11 keeps ``sizes``)."""
    if multiple <= 1:
        return sizes
    rounded = sorted({-(-size // multiple) * multiple for size in sizes
                      if -(-size // multiple) * multiple <= cap})
    if rounded:
        return rounded
    rule = vllm_data()["spec_decode_capture_rounding"]
    asked = version or str(vllm_data()["default_version"])
    if parse_version(asked) < parse_version(rule["refuse_empty_from"]):
        return sizes
    raise InputError(f"vLLM {asked} captures CUDA graphs at multiples of {multiple} (1 + "
                     f"num_speculative_tokens) up to {cap}, of which there are none, and refuses "
                     "to start; raise --max-cudagraph-capture-size or draft fewer tokens")


def listed_sizes(asked: tuple[int, ...], max_num_batched_tokens: int | None = None
                 ) -> list[int]:
    """The sizes a compilation config lists (cudagraph_capture_sizes), as vLLM keeps them:
    once each, none past max_num_batched_tokens, sorted (vllm/config/vllm.py
    _set_cudagraph_sizes; engines.json vllm.compilation_config.sizes_source); InputError
    where none is left."""
    kept = sorted({size for size in asked
                   if not max_num_batched_tokens or size <= max_num_batched_tokens})
    if not kept:
        raise InputError(f"every listed CUDA-graph size ({', '.join(map(str, asked))}) is past "
                         f"max_num_batched_tokens {max_num_batched_tokens:,}, so vLLM captures "
                         "no graph: list a smaller size, or run --enforce-eager")
    return kept


def captured_sizes(max_num_seqs: int, max_capture_size: int | None = None,
                   max_num_batched_tokens: int | None = None, query_len: int = 1,
                   multiple: int = 1, version: str | None = None,
                   asked: tuple[int, ...] | None = None, mode: str | None = None,
                   sm100: bool = False) -> list[int]:
    """The CUDA-graph batch sizes V1 captures, ascending: capture_size_list to
    ``capture_cap`` (51 sizes at the default cap of 512, 19 at a cap of 128; 67 every 8
    before v0.11.1; 83 at a B200's 1,024 on v0.28-0.33: ``sm100``, capture_ceiling) with
    the sizes off its stride (appended_sizes), or the sizes the compilation config lists
    (``asked``, listed_sizes); then, drafting, rounded to ``multiple`` (spec_rounded_sizes;
    ``version`` for its refusal). Under cudagraph_mode FULL_DECODE_ONLY (``mode``) only the
    decode sizes, from one request's decode tokens to max_num_seqs of them
    (cudagraph_dispatcher.py). Where vLLM splits its grids (v0.34 on a B200: ``splits``),
    the decode sizes in tokens (split_grids: 64 at 1,024 seats). A decode step pads to this
    list (graph_batches.vllm_capture), and the graph memory counts it (graph_sizes): three
    drafts at 256 seats keep 4, 8, 16, … 512."""
    if splits(version, sm100, max_capture_size, asked, mode, query_len, multiple):
        return split_grids(max_num_seqs, max_num_batched_tokens)[1]
    if asked:
        sizes = listed_sizes(asked, max_num_batched_tokens)
        cap = sizes[-1]
    else:
        ceiling = capture_ceiling(version, sm100)
        cap = capture_cap(max_num_seqs, max_capture_size, max_num_batched_tokens, query_len,
                          ceiling)
        default_cap = None if max_capture_size else min(2 * max_num_seqs * query_len, ceiling)
        sizes = appended_sizes(capture_size_list(cap), cap, max_num_seqs,
                               max_num_batched_tokens, query_len, version, default_cap,
                               ceiling)
    kept = spec_rounded_sizes(sizes, cap, multiple, version)
    if mode == "FULL_DECODE_ONLY":
        decode = max(query_len, multiple)  # a decode step's tokens a request
        kept = [size for size in kept if decode <= size <= decode * max_num_seqs]
    return kept


def capture_sizes(max_num_seqs: int, max_capture_size: int | None = None,
                  max_num_batched_tokens: int | None = None, query_len: int = 1,
                  multiple: int = 1, version: str | None = None,
                  asked: tuple[int, ...] | None = None, mode: str | None = None,
                  sm100: bool = False) -> float:
    """How many CUDA-graph batch sizes V1 captures, as the graph memory counts them: the
    length of captured_sizes — 51 at the default cap of 512, 19 at a cap of 128, 4 for a
    listed [1, 2, 4, 8], 35 of the 51 under FULL_DECODE_ONLY at 256 seats, 83 on a B200 on
    0.33 — or, where vLLM splits its grids (v0.34 on a B200), half the graphs it captures,
    (prefill sizes + decode sizes) / 2, since a size of the one list held a FULL and a
    PIECEWISE graph: (54 + 64) / 2 = 59 at 1,024 seats and a 16,384-token budget."""
    if splits(version, sm100, max_capture_size, asked, mode, query_len, multiple):
        prefill, decode = split_grids(max_num_seqs, max_num_batched_tokens)
        return (len(prefill) + len(decode)) / 2
    return len(captured_sizes(max_num_seqs, max_capture_size, max_num_batched_tokens,
                              query_len, multiple, version, asked, mode, sm100))


def cuda_graph_bytes(dep: Deployment, max_num_seqs: int, acc: VLLMAccounting,
                     enforce_eager: bool, stage: Stage | None = None,
                     counted: bool = False, max_capture_size: int | None = None,
                     max_num_batched_tokens: int | None = None, query_len: int = 1,
                     multiple: int = 1, asked: tuple[int, ...] | None = None,
                     mode: str | None = None, max_model_len: int = 0) -> float:
    """The CUDA-graph estimate v0.21+ takes from the KV budget: layers on one pipeline
    stage × captured sizes (capture_sizes, to --max-cudagraph-capture-size where given, at
    most the token budget, the default cap scaled by ``query_len``: capture_query_len, and
    drafting rounded to ``multiple``: spec_capture_multiple) × 0.45 MiB (logged pools:
    0.23–0.56 MiB per layer per size); ``counted``: the same estimate in any V1 version, for
    what the graphs hold on the card. On V1's runner a drafter's own graphs (EAGLE's, a draft
    model's: piecewise only) are captured inside the target's, from _dummy_run's
    drafter.dummy_run, in the same pool, so vLLM's measured estimate holds them
    (gpu_model_runner.py profile_cudagraph_memory, v0.24); no per-layer figure for them was
    logged, and this estimate counts the target's layers alone. A compilation config's listed
    sizes (``asked``) and CUDA-graph ``mode`` count as capture_sizes counts them; the per-size
    figure was logged under the default FULL_AND_PIECEWISE, so PIECEWISE, FULL and
    FULL_DECODE_ONLY, which hold fewer graphs a size, are counted at most at it
    (engines.json vllm.compilation_config.captured_graphs_source). A DeepSeek Sparse
    Attention model's pool also holds its largest FULL decode graph's indexer logits, sized
    by ``max_model_len`` (indexer_graph_logits_bytes)."""
    if enforce_eager or mode == "NONE" or not (acc.graphs_in_budget or counted):
        return 0.0
    layers = dep.model.num_layers if stage is None else stage.layers
    per = float(vllm_data()["cuda_graph_mib_per_layer_per_size"]) * MIB
    sm100 = sm100_card(dep.accelerator)
    sizes = captured_sizes(max_num_seqs, max_capture_size, max_num_batched_tokens, query_len,
                           multiple, acc.version, asked, mode, sm100)
    count = capture_sizes(max_num_seqs, max_capture_size, max_num_batched_tokens, query_len,
                          multiple, acc.version, asked, mode, sm100)
    logits = indexer_graph_logits_bytes(dep, max_num_seqs, max_model_len, sizes,
                                        max(query_len, multiple), mode)
    return layers * count * per + logits


def largest_full_decode(max_num_seqs: int, sizes: list[int], decode_tokens: int = 1,
                        mode: str | None = None) -> int:
    """The largest of the captured ``sizes`` vLLM runs a decode step in as a FULL CUDA graph:
    the largest no more than ``decode_tokens`` (1 + drafts) × max_num_seqs, where the decode
    mode is FULL (the default FULL_AND_PIECEWISE, FULL_DECODE_ONLY, FULL; engines.json
    vllm.sparse_indexer_decode_logits.full_decode_modes); 0 under PIECEWISE or NONE. 1,024
    seats at the default cap of 512: 512; 8 seats (cap 16): 8."""
    rule = vllm_data()["sparse_indexer_decode_logits"]
    if mode is not None and mode not in rule["full_decode_modes"]:
        return 0
    return max((size for size in sizes if size <= decode_tokens * max_num_seqs), default=0)


def indexer_graph_logits_bytes(dep: Deployment, max_num_seqs: int, max_model_len: int,
                               sizes: list[int], decode_tokens: int = 1,
                               mode: str | None = None) -> float:
    """The indexer logits a DeepSeek Sparse Attention model's CUDA-graph pool holds: its
    largest FULL decode graph (largest_full_decode) allocates one layer's decode logits,
    that many rows of max_model_len float32s, inside the pool at capture, and the smaller
    graphs reuse them; vLLM's graph estimate (v0.21+) measures that capture first
    (vllm_memory.indexer_decode_logits_bytes; engines.json
    vllm.sparse_indexer_decode_logits). DeepSeek-V3.2 at 1,024 seats and 163,840 tokens:
    512 × 163,840 × 4 B = 320 MiB on every rank. 0 for a model without an indexer."""
    rows = largest_full_decode(max_num_seqs, sizes, decode_tokens, mode)
    return indexer_decode_logits_bytes(dep, rows, max_model_len)

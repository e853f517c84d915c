"""Which decode steps a serving engine replays from a captured CUDA graph, and at what batch.

The engines capture decode graphs at a list of batch sizes up to a largest. A decode step
whose batch falls between two sizes runs as the next one up: its padding rows go through
every weight matmul and elementwise pass, while attention reads only the real rows' caches.
A step above the largest size runs with no graph, launching its kernels one by one as a
prompt step does, so it pays the profile's ungraphed (prefill) cost per layer.

- vLLM V1 (vllm/v1/cudagraph_dispatcher.py ``dispatch``, commit ae2e8e62cea0): a step of
  more than max_cudagraph_capture_size tokens gets ``CUDAGraphMode.NONE`` and an unpadded
  ``BatchDescriptor(num_tokens)``, so it gets no piecewise graphs either. At or below the
  cap, ``_bs_to_padded_graph_size`` rounds the step up to the next captured size, and the
  runner feeds the model ``input_ids[:num_input_tokens]``, marked "# Padded"
  (v1/worker/gpu_model_runner.py ``_preprocess``, commit 000fc94b754f). vLLM dispatches on
  a step's tokens. The sizes are vllm_graphs.captured_sizes, the list its graph memory
  counts: under a drafter rounded to multiples of 1 + the drafts (from v0.11.1, V1 runner).
- SGLang (srt/model_executor/cuda_graph_runner.py ``can_run``): a decode batch runs its
  graph when ``batch_size <= max_bs`` (only an exact captured size under
  --disable-cuda-graph-padding). Otherwise ModelRunner runs the decode without a graph.
  ``replay_prepare`` pads the batch with ``bisect`` to the next captured size. The default
  sizes are server_args ``_generate_cuda_graph_batch_sizes``: [1, 2, 4, 8, 12], every 8 to
  256, every 16 to 496, then every 32 to --cuda-graph-max-bs, which by default is the
  memory tier's value (sglang_memory_defaults), and after 0.5.9 that cap itself
  (sglang_capture_sizes). --cuda-graph-bs lists the sizes instead, and
  from 0.5.3 server_args makes its largest cuda_graph_max_bs (engines.json
  sglang.cuda_graph_bs_flag). SGLang dispatches on the batch's sequences.

A speculative verify step pads as a decode does, by the same rule (graph_tokens):
- vLLM V1 counts its tokens, batch × (1 + drafts): execute_model hands
  ``scheduler_output.total_num_scheduled_tokens`` (the drafts included) to
  ``_determine_batch_execution_and_padding``, whose dispatcher returns the padded
  ``batch_desc.num_tokens`` that ``_preprocess`` feeds the model (v1/worker/gpu_model_runner.py,
  commit 000fc94b754f); Model Runner V2 maps the step's tokens to the next captured size the
  same way (v1/worker/gpu/cudagraph_utils.py CudaGraphManager.get_cudagraph_runtime_mode and
  get_cudagraph_sizes, commit 00383f8c782b). 13 requests drafting 3 verify 52 tokens and run
  as 56.
- SGLang counts sequences: under EAGLE the runner captures TARGET_VERIFY graphs of
  ``bs × speculative_num_draft_tokens`` tokens (CudaGraphRunner.__init__ num_tokens_per_bs,
  capture_one_batch_size), and ``replay_prepare`` pads ``raw_bs`` with ``bisect_left`` to the
  next captured batch (srt/model_executor/cuda_graph_runner.py, commit 0021673cd18b). With a
  drafter its default sizes are another list (sglang_capture_sizes ``drafting``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.engine_spec import EngineSpec

TOKENS, SEQUENCES = "tokens", "sequences"  # what an engine's graph sizes count


@dataclass(frozen=True)
class GraphCapture:
    """The decode batch sizes an engine captured (ascending; () for no graphs at all: vLLM's
    --enforce-eager, SGLang's --disable-cuda-graph), whether it pads a batch up to the next
    size (False: only an exact size replays a graph), and what those sizes count."""

    sizes: tuple[int, ...]
    pads: bool = True
    unit: str = TOKENS

    def run_as(self, n: int) -> int | None:
        """The captured size a step of ``n`` runs as, or None where it runs with no graph:
        n above the largest size, or between two sizes when the engine does not pad. With
        vLLM's default sizes (8, 16, … 248, 256, 272, … 512), 33 runs as 40 and 513 as None."""
        i = bisect_left(self.sizes, n)
        if i == len(self.sizes) or (self.sizes[i] != n and not self.pads):
            return None
        return self.sizes[i]


NO_GRAPHS = GraphCapture(())


def sglang_capture_sizes(max_bs: int, drafting: bool = False,
                         version: str | None = None) -> tuple[int, ...]:
    """SGLang's default decode graph sizes up to --cuda-graph-max-bs (server_args
    _generate_cuda_graph_batch_sizes, padding on): 1, 2, 4, 8, 12, every 8 from 16 to 256,
    every 16 from 272 to 496, every 32 from 512; ``drafting`` (any --speculative-algorithm,
    "less padding for smaller batch sizes"): 1 to 8, every 2 from 10 to 32, every 4 from 40
    to 64, every 8 from 72 to 256, every 16 from 272. All of them at most ``max_bs``. At 256
    that gives 36 sizes, or 51 drafting (the older runner's get_batch_sizes_to_capture,
    cuda_graph_runner.py commit 0021673cd18b, had its own drafting list too).

    After 0.5.9 ``max_bs`` itself is captured too where the list skips it (at 300: … 272,
    288, 300, where batches 289 to 300 had run with no graph): PR #21005 (Fix
    cuda graph max bs capture upper bound, commit 9191b02eda0e, merged 2026-03-31, after 0.5.9
    and six days before v0.5.10's tag; whether that tag holds it was not read) appends it,
    "if max_bs not in capture_bs", as arg_groups/cuda_graph_hook.py
    generate_decode_cuda_graph_batch_sizes still does on main (commit 019667ad6ff5).
    ``version`` (SGLang's, from --engine-version): 0.5.9 and before keep the bare list; None
    follows the newest releases."""
    if drafting:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, max_bs + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
                 *range(512, max_bs + 1, 32)]
    kept = {s for s in sizes if s <= max_bs}
    if version is None or captures_max_bs(version):
        kept.add(max_bs)
    return tuple(sorted(kept)) if kept else (max_bs,)


def captures_max_bs(version: str) -> bool:
    """Whether SGLang ``version`` adds --cuda-graph-max-bs to its own default sizes: the
    releases after 0.5.9 (sglang_capture_sizes, PR #21005)."""
    from ridgeline.engine_versions import release_before

    return not release_before("sglang", version, "0.5.10")  # a 0.5.9.post: the 0.5.9 line


def vllm_capture(max_num_seqs: int | None = None, max_capture_size: int | None = None,
                 max_num_batched_tokens: int | None = None,
                 asked: tuple[int, ...] | None = None, query_len: int = 1,
                 multiple: int = 1, version: str | None = None,
                 mode: str | None = None, sm100: bool = False) -> GraphCapture:
    """vLLM V1's decode graphs: vllm_graphs.captured_sizes, the one list its graph memory
    counts too. That is the sizes a compilation config lists (``asked``), or else
    capture_size_list up to capture_cap: --max-cudagraph-capture-size, or min(2 ×
    max_num_seqs × ``query_len``, 512) with max_num_seqs defaulting to 256 and query_len
    1 + the drafts from v0.13 (capture_query_len), never more than max_num_batched_tokens.
    Drafting, each size is rounded up to ``multiple`` (spec_capture_multiple: 1 + the drafts
    from v0.11.1 on the V1 runner), as vLLM's adjust_cudagraph_sizes_for_spec_decode does;
    ``mode`` FULL_DECODE_ONLY keeps only the decode sizes. Every default of max_num_seqs and
    of the token budget gives a cap of 512, or 1,024 on an SM 10.x card (``sm100``: a B200)
    from v0.28, whose v0.34 decodes pad to its own decode grid (vllm_graphs.split_grids)."""
    from ridgeline.datafiles import engine_defaults
    from ridgeline.vllm_graphs import captured_sizes

    seqs = max_num_seqs or int(engine_defaults("vllm")["max_num_seqs"])
    return GraphCapture(tuple(captured_sizes(seqs, max_capture_size, max_num_batched_tokens,
                                             query_len, multiple, version, asked, mode,
                                             sm100)))


def sglang_capture(dep: Deployment, cuda_graph_max_bs: int | None = None,
                   drafting: bool = False, version: str | None = None) -> GraphCapture:
    """SGLang's decode graphs on ``dep``: sglang_capture_sizes up to --cuda-graph-max-bs, or
    else up to the memory tier's value for the card and the TP size (256 on an 80 GiB card
    below TP 4, 512 from TP 4 up); ``drafting``: the list SGLang captures under a drafter."""
    from ridgeline.hardware import device_memory_bytes
    from ridgeline.sglang_memory import sglang_gpu_mem_bytes, sglang_memory_defaults

    if cuda_graph_max_bs is None:
        memory, _ = sglang_gpu_mem_bytes(dep.accelerator, device_memory_bytes(dep.accelerator))
        cuda_graph_max_bs = sglang_memory_defaults(memory, dep.expert_ranks,
                                                   dep.pipeline_parallel_size,
                                                   version=version).cuda_graph_max_bs
    return GraphCapture(sglang_capture_sizes(cuda_graph_max_bs, drafting, version),
                        unit=SEQUENCES)


def settings_capture(dep: Deployment, settings: Any, drafter: EngineSpec | None = None
                     ) -> GraphCapture | None:
    """The decode graphs that engine settings (memory.EngineSettings, or anything with its
    field names) give ``dep``'s engine: NO_GRAPHS under enforce_eager, vLLM's and SGLang's
    sizes as set (cudagraph_capture_sizes: vLLM's list in tokens, SGLang's --cuda-graph-bs
    in sequences), and None for an engine whose sizes ridgeline does not model (there every
    decode step is priced as graphed and unpadded, as before). ``drafter``: the drafter where
    the settings do not carry it yet (None: their drafter, or spec_tokens and spec_method)."""
    if getattr(settings, "enforce_eager", False):
        return NO_GRAPHS
    cap = getattr(settings, "max_cudagraph_capture_size", None)
    drafter = drafter or getattr(settings, "drafter", None)
    drafts = drafter.tokens if drafter else getattr(settings, "spec_tokens", 0) or 0
    if dep.engine == "vllm":
        from ridgeline.vllm_graphs import capture_query_len, sm100_card, spec_capture_multiple
        from ridgeline.vllm_memory import model_runner, vllm_accounting

        # a drafter's verify step runs 1 + its drafts a request, which vLLM's cap counts and,
        # on the V1 runner, each captured size is rounded up to a multiple of
        version = getattr(settings, "engine_version", None)
        mode = getattr(settings, "cudagraph_mode", None)
        multiple = 1
        if drafts:
            acc = vllm_accounting(version)
            method = drafter.method if drafter else getattr(settings, "spec_method", None)
            runner = model_runner(dep, acc, method or "", drafter.algorithm if drafter else "",
                                  bool(getattr(settings, "stock_torch_compile", False)))
            multiple = spec_capture_multiple(drafts, acc.version, runner,
                                             dep.tensor_parallel_size, mode)
        return vllm_capture(getattr(settings, "max_num_seqs", None), cap,
                            getattr(settings, "max_num_batched_tokens", None)
                            or vllm_default_budget(dep, settings, version),
                            getattr(settings, "cudagraph_capture_sizes", None),
                            capture_query_len(drafts, version), multiple, version, mode,
                            sm100_card(dep.accelerator))
    if dep.engine == "sglang":
        listed = getattr(settings, "cudagraph_capture_sizes", None)
        if listed:  # --cuda-graph-bs: the sizes themselves, its largest the cap (0.5.3+)
            return GraphCapture(tuple(sorted(set(listed))), unit=SEQUENCES)
        # a drafter SGLang's own flags name (--speculative-algorithm) counts before
        # cli_spec.spec_args has read it into --spec-tokens (simulate builds first)
        drafting = bool(drafts) or getattr(settings, "speculative_algorithm", None) is not None
        return sglang_capture(dep, cap, drafting=drafting,
                              version=getattr(settings, "engine_version", None))
    return None


def vllm_default_budget(dep: Deployment, settings: Any, version: str | None) -> int | None:
    """The max_num_batched_tokens vLLM ``version`` defaults to on ``dep``'s card where
    --max-num-batched-tokens is not given (vllm_pool.vllm_scheduler_budget over the settings'
    seats, length, usage and --no-enable-chunked-prefill): it caps the captured sizes as a
    budget given does, since vLLM takes min(max_num_batched_tokens,
    max_cudagraph_capture_size) and drops listed sizes past the budget whichever way it was
    set (vllm/config/vllm.py _set_cudagraph_sizes, read in the 0.29.0 and 0.31.0-0.34.0
    release sources). An L40S under vllm serve: 2,048, so --max-cudagraph-capture-size 4096
    captures to 2,048. None for V0, or where vLLM refuses the budget (the pool says so)."""
    from ridgeline.errors import InputError
    from ridgeline.memory import EngineSettings
    from ridgeline.vllm_memory import vllm_accounting
    from ridgeline.vllm_pool import vllm_scheduler_budget

    try:  # a release no rule covers (a row's "vLLM 1.2.0") is priced at the newest's rules
        acc = vllm_accounting(version)
    except InputError:
        return None
    if acc.engine == "V0":
        return None
    s = settings if isinstance(settings, EngineSettings) else EngineSettings(
        max_model_len=getattr(settings, "max_model_len", None),
        max_num_seqs=getattr(settings, "max_num_seqs", None),
        usage=getattr(settings, "usage", None) or "serve", engine_version=version,
        no_chunked_prefill=bool(getattr(settings, "no_chunked_prefill", False)
                                or getattr(settings, "no_enable_chunked_prefill", False)))
    try:
        return vllm_scheduler_budget(dep, s, acc)[1]
    except InputError:
        return None


@lru_cache(maxsize=256)
def default_capture(dep: Deployment) -> GraphCapture | None:
    """The graphs ``dep``'s engine captures when no settings are given: vLLM's (a cap of
    512), SGLang's (its memory tier's), or None for the other engines."""
    return settings_capture(dep, None)


def with_cuda_graphs(dep: Deployment, settings: Any, drafter: EngineSpec | None = None
                     ) -> Deployment:
    """``dep`` with the decode graphs its engine captures under ``settings``
    (settings_capture: --enforce-eager, vLLM's capture sizes and seats, SGLang's
    --cuda-graph-max-bs), so the step cost prices a decode above the largest size without
    graphs and pads one between sizes. Settings that give only the engine's defaults return
    ``dep`` itself, so it keeps its identity and its step-cost cache entries. ``drafter``:
    as settings_capture takes it."""
    capture = settings_capture(dep, settings, drafter)
    if capture is None or capture == default_capture(dep):
        return dep
    return replace(dep, cuda_graphs=capture)


def captured(dep: Deployment) -> GraphCapture | None:
    """The decode graphs ``dep``'s engine captured: Deployment.cuda_graphs where the settings
    set them (with_cuda_graphs), else the engine's defaults (default_capture); None for an
    engine whose sizes ridgeline does not model."""
    return dep.cuda_graphs if dep.cuda_graphs is not None else default_capture(dep)


def graph_tokens(dep: Deployment, tokens: int, sequences: int) -> int | None:
    """The tokens a decode (or speculative verify) step's weight matmuls run under
    ``dep``'s captured graphs (Deployment.cuda_graphs, or else default_capture). That is the
    padded batch times each row's tokens, or None where the step runs with no graph. On
    vLLM's defaults, 33 decodes run as 40 tokens and 600 run ungraphed. Where no capture is
    modelled the step keeps its ``tokens``."""
    capture = captured(dep)
    if capture is None:
        return tokens
    if capture.unit == TOKENS:
        return capture.run_as(tokens)
    size = capture.run_as(sequences)
    return None if size is None else size * (tokens // sequences)

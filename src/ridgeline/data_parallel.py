"""Data-parallel attention: N ranks, each with its own requests, KV pool and copy of the
attention weights, sharing one MoE's experts spread over every rank's GPUs.

vLLM (docs, serving/data_parallel_deployment.md and expert_parallel_deployment.md):
``--data-parallel-size N`` runs N engine cores, one scheduler each (so ``--max-num-seqs`` and
``--max-num-batched-tokens`` are a rank's), each of ``--tensor-parallel-size`` GPUs; "the
expert layers form a (DP x TP) sized tensor parallel group", or with
``--enable-expert-parallel`` an expert-parallel group of that size (EP_SIZE = TP × DP). The
attention weights are replicated across the ranks (sharded by TP inside one), and so are the
dense MLPs, the shared experts, the router, the embedding and the LM head (deepseek_v2.py: the
shared experts are a DeepseekV2MLP over the attention's TP group, the gate a replicated
linear). "This will work with both dense and MoE models": a dense model's ranks are
independent replicas. A MoE's ranks step together, an idle one running a dummy pass; its
default all-to-all backend, allgather_reducescatter, gathers every rank's tokens before the
experts and reduce-scatters their outputs.

SGLang (server_args.py _handle_data_parallelism; layers/dp_attention.py): ``--tp-size T
--dp-size N --enable-dp-attention`` runs on T GPUs, attention over T ÷ N of them (tp_size %
dp_size == 0 is asserted); each attention-DP rank keeps its own requests' cache; the MLP and
MoE layers run over all T GPUs on the tokens gathered from every rank (dense MLPs, shared
experts and the LM head tensor-parallel over T unless --moe-dense-tp-size 1 or
--enable-dp-lm-head; the experts TP over T, or EP with --ep-size T); the embedding is kept whole
on every GPU (VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())).
--max-running-requests and --chunked-prefill-size are the server's, divided by dp_size per
rank (model_runner: dp_size is server_args.dp_size with DP attention, else 1; max_num_reqs =
max_running_requests // dp_size). Its help text: DP attention is for DeepSeek-style MoE models.

SGLang's ``--dp-size N`` (or ``--data-parallel-size``) WITHOUT ``--enable-dp-attention`` is
not this: its DataParallelController (launch_dp_schedulers) starts N whole replicas behind
one endpoint, each a scheduler over its own ``--tp-size`` × ``--pp-size`` GPUs (N × TP GPUs
in all), each its own model, experts included, its own pool and its whole
--max-running-requests (dp_size is 1 inside a replica). ridgeline sizes one replica; a MoE's
replicas share no experts, so reading them as vLLM's ranks would be wrong
(sglang_replicas_problem).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ridgeline.errors import InputError
from ridgeline.parallel import INTER_NODE_BYTES_PER_S, node_size
from ridgeline.quantization import (
    EMBEDDING,
    EXPERT_BIAS,
    EXPERTS,
    LM_HEAD,
    MLP,
    ROUTER,
    SHARED_EXPERTS,
)

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.memory import EngineSettings
    from ridgeline.model import ModelSpec

DATA_PARALLEL_ENGINES = ("vllm", "sglang")

# TensorRT-LLM's attention DP (llm_args.py enable_attention_dp, only in trtllm-serve's YAML:
# each of its tp_size ranks runs attention on its own requests, the MoE spread over all) is
# not modelled; ridgeline's DP flags with --engine trtllm and the YAML's switch
# (cli_config_file) all get this one answer
TRTLLM_ATTENTION_DP = ("TensorRT-LLM's attention data parallelism (enable_attention_dp) is "
                       "not modelled: price TensorRT-LLM with tensor parallelism alone "
                       "(--tp_size N, --ep_size N for a MoE's experts), or data-parallel "
                       "attention on vLLM (--engine vllm --data-parallel-size N "
                       "--enable-expert-parallel) or SGLang (--engine sglang --tp-size N "
                       "--dp-size N --enable-dp-attention)")

def trtllm_problem(model: ModelSpec, ranks: int) -> str:
    """Why data parallelism on TensorRT-LLM is refused (``TRTLLM_ATTENTION_DP``); for a dense
    model, whose ranks vLLM's data-parallel attention (a MoE's, --enable-expert-parallel)
    does not take, the levers a dense model has: one replica, or vLLM's ranks, each its own
    engine (sim/independent_ranks.py)."""
    if model.moe is not None:
        return TRTLLM_ATTENTION_DP
    n = ranks if ranks > 1 else "N"
    return (f"TensorRT-LLM's attention data parallelism (enable_attention_dp) is not "
            f"modelled, and {model.name} is dense: price one TensorRT-LLM replica with "
            f"--num-gpus and no data parallelism, its throughput × {n} for {n} replicas, or "
            f"the ranks as vLLM runs them, each its own engine (--engine vllm "
            f"--data-parallel-size {n})")


# the weight categories that run on every rank's tokens, gathered, split over all the GPUs
_GATHERED = {"vllm": (EXPERTS, EXPERT_BIAS),
             "sglang": (EXPERTS, EXPERT_BIAS, MLP, SHARED_EXPERTS, ROUTER, LM_HEAD)}


def gathered_categories(engine: str) -> tuple[str, ...]:
    """The weight categories ``engine`` runs over every data-parallel rank's tokens, split
    across all the ranks' GPUs; the rest each rank runs on its own tokens over its own GPUs."""
    return _GATHERED.get(engine, _GATHERED["vllm"])


def data_parallel_problem(dep: Deployment, ranks: int, named: bool) -> str:
    """Why ``ranks`` data-parallel ranks of ``dep`` are not modelled or not run, or ""
    (``named``: the engine was named; without one, as vLLM)."""
    engine = dep.engine if named else "vllm"
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        return f"data_parallel_size must be a whole number ≥ 1, got {ranks!r}"
    if engine.startswith("llama.cpp"):
        return (f"{engine} has no data parallelism: run one llama-server per replica and size "
                "one with --num-gpus")
    if engine == "trtllm":
        return trtllm_problem(dep.model, ranks)
    if engine not in DATA_PARALLEL_ENGINES:
        return (f"data-parallel attention is modelled for vLLM (--data-parallel-size) and "
                f"SGLang (--dp-size with --enable-dp-attention), not {engine}'s")
    if dep.pipeline_parallel_size > 1:
        return ("data-parallel attention over pipeline stages is not modelled: give "
                "--pipeline-parallel-size 1")
    if engine == "sglang" and dep.model.moe is None:
        return (f"SGLang's --enable-dp-attention splits attention from a MoE's expert layers "
                f"(DeepSeek, Qwen MoE, …); {dep.model.name} is dense: --dp-size without it "
                "runs independent replicas, each sized by `ridgeline fit` with its own "
                "--tp-size")
    return ""


def sglang_replicas_problem(ranks: int, gpus: int) -> str:
    """Why SGLang's --dp-size without --enable-dp-attention is refused: whole replicas,
    which ridgeline sizes one at a time."""
    return (f"SGLang's --dp-size {ranks} without --enable-dp-attention starts {ranks} whole "
            f"replicas behind one endpoint, each of --tp-size {gpus} GPUs ({ranks * gpus:,} in "
            "all) with its own copy of the model, pool and --max-running-requests: size one "
            "with --num-gpus (its --tp-size) and no --dp-size, and take its conversations and "
            f"throughput × {ranks}; or add --enable-dp-attention for attention data-parallel "
            f"over the {gpus} GPUs")


SGLANG_SPELLINGS = ("--dp-size", "--dp")  # vLLM's: --data-parallel-size, -dp


def spelling_problem(spelling: str | None, ranks: int, engine: str | None) -> str:
    """Why SGLang's own spelling of data parallelism (--dp-size, --dp) is refused where it
    would be read as vLLM's --data-parallel-size (``engine`` "vllm", or None: none named, as
    kv on vLLM's card without --engine), or "": SGLang's reading is its own
    (sglang_replicas_problem)."""
    if spelling not in SGLANG_SPELLINGS or ranks == 1 or engine not in (None, "vllm"):
        return ""
    return (f"{spelling} is SGLang's flag, whose {spelling} {ranks} without "
            f"--enable-dp-attention runs {ranks} whole replicas, not the ranks of vLLM's "
            f"--data-parallel-size it would be read as here: give -dp {ranks} for vLLM's "
            "layout, or --engine sglang for SGLang's")


def server_running_requests(dep: Deployment, per_rank: int) -> int:
    """SGLang's --max-running-requests that gives each data-parallel rank ``per_rank`` (the
    server's flag, which rank_settings divides by --dp-size: 4 ranks of 111 are 444);
    ``per_rank`` itself without data parallelism or on vLLM (whose --max-num-seqs is a
    rank's)."""
    if dep.engine != "sglang":
        return per_rank
    return per_rank * dep.data_parallel_size


def rank_settings(dep: Deployment, settings: EngineSettings,
                  drafted: bool = False) -> EngineSettings:
    """The settings one data-parallel rank's pool is sized under: vLLM's are each rank's as
    given; SGLang's --max-running-requests is the server's, each rank taking its // dp_size
    (pool_configurator: max_running_requests // dp_size), and its --max-mamba-cache-size
    the same (handle_max_mamba_cache). Its --chunked-prefill-size is divided too, after the
    memory rule has read it whole, so the pool keeps it; so is --max-running-requests, whose
    whole the settings keep (server_max_num_seqs). ``drafted``: max_running_requests
    is SGLang's default with a drafter (sglang_pool.sglang_settings), not the flag."""
    n = dep.data_parallel_size
    seats, states = settings.max_num_seqs, settings.max_mamba_cache_size
    if dep.engine != "sglang" or n == 1:
        return settings
    if states is not None:
        if states < n:
            raise InputError(f"--max-mamba-cache-size {states} is the server's, divided over "
                             f"the {n} data-parallel ranks (// --dp-size): give at least {n}, "
                             "one a rank")
        settings = replace(settings, max_mamba_cache_size=states // n)
    if seats is None:
        return settings
    if seats < n and drafted:
        raise InputError(f"max_running_requests {seats} (SGLang's default with a drafter) is "
                         f"the server's, divided over the {n} data-parallel ranks "
                         f"(// --dp-size): give --max-running-requests of at least {n}, one a "
                         "rank")
    if seats < n:
        raise InputError(f"--max-running-requests {seats} is the server's, divided over the "
                         f"{n} data-parallel ranks (// --dp-size): give at least {n}, one a "
                         "rank")
    return replace(settings, max_num_seqs=seats // n, server_max_num_seqs=seats)


def rank_budget_tokens(engine: str, tokens: int, ranks: int) -> int:
    """One data-parallel rank's token budget a step from the server's ``tokens``: SGLang's
    --chunked-prefill-size is the server's, divided by --dp-size under DP attention (8,192
    over 8 ranks: 1,024 each); vLLM's --max-num-batched-tokens each engine core's, as given."""
    return max(1, tokens // ranks) if engine == "sglang" else tokens


def rank_step_budget(dep: Deployment, budget: tuple[int, str]) -> tuple[int, str]:
    """The server's step budget (chunked_prefill.step_budget: tokens, where they come from)
    as one data-parallel rank steps under it (``rank_budget_tokens``); as given without
    data parallelism."""
    n = dep.data_parallel_size
    if n == 1:
        return budget
    tokens, source = budget
    if dep.engine == "sglang":
        return (rank_budget_tokens(dep.engine, tokens, n),
                f"{source}: {tokens:,} the server's, ÷ --dp-size {n} on each rank")
    return rank_budget_tokens(dep.engine, tokens, n), f"{source}, each rank's"


def layout_label(dep: Deployment, devices: int = 1) -> str:
    """'attention DP8 × TP1, experts EP8' for a MoE; 'DP4 × TP2' for a dense model. With
    ``devices`` a card (vLLM on an MI250: 2), in the ranks the engine launches over the dies:
    4 x MI250 at DP4 'attention DP4 × TP2 over 8 dies, experts EP8'."""
    dp, tp = dep.data_parallel_size, dep.tensor_parallel_size * devices
    dies = f" over {dep.num_gpus * devices} dies" if devices > 1 else ""
    if dep.model.moe is None:
        return f"DP{dp} × TP{tp}{dies}"
    return (f"attention DP{dp} × TP{tp}{dies}, experts "
            f"{'EP' if dep.expert_parallel else 'TP'}{dep.expert_ranks * devices}")


def table_copies_bytes(dep: Deployment) -> float:
    """The embedding's and LM head's copies beyond one, over every GPU: vLLM splits each
    over a rank's TP GPUs, one copy a rank; SGLang keeps the embedding whole on every GPU and
    splits the LM head over all of them. DeepSeek-V3 on vLLM DP8: 7 × 2 × 129,280 × 7,168 ×
    2 B = 26 GB, 3.2 GB a GPU."""
    by = dep.bytes_by_category
    ranks = dep.data_parallel_size
    tables = {EMBEDDING: by.get(EMBEDDING, 0.0), LM_HEAD: by.get(LM_HEAD, 0.0)}
    if dep.engine == "sglang":
        return tables[EMBEDDING] * (dep.num_gpus - 1)
    return sum(tables.values()) * (ranks - 1)


def exchange_label(dep: Deployment) -> str:
    """How a MoE step's exchange between the ranks is priced, in the engine's words."""
    if dep.engine == "sglang":
        return ("SGLang's gather of every rank's tokens before each MLP and MoE layer and "
                "scatter after it")
    return ("vLLM's default all-to-all backend (allgather_reducescatter): every rank's tokens "
            "gathered before the experts, their outputs reduce-scattered after")


def data_parallel_kind(dep: Deployment) -> str:
    """What ``dep``'s data-parallel ranks are, in a caution's words: a MoE's "data-parallel
    attention" (each rank its own attention and requests, the experts shared over all of
    them), a dense model's "data parallelism (whole replicas of a dense model)": vLLM's
    --data-parallel-size over a dense model runs independent copies (its docs: "This will
    work with both dense and MoE models"), no layer shared between them."""
    if dep.model.moe is not None:
        return "data-parallel attention"
    return "data parallelism (whole replicas of a dense model)"


def independent_ranks(dep: Deployment) -> bool:
    """Whether ``dep``'s data-parallel ranks run each on its own clock: a dense model's, which
    vLLM runs as independent engines (vllm/v1/engine/core.py run_engine_core: only a MoE's
    ranks are a DPEngineCoreProc; "Non-MoE DP ranks are completely independent, so treat like
    DP=1"); a MoE's step together (sim/data_parallel.py)."""
    return dep.data_parallel_size > 1 and dep.model.moe is None


def prompt_rank_words(dep: Deployment) -> str:
    """What a prefill under data-parallel attention prices: each prompt is one rank's, whole
    (a rank runs its own requests: neither engine splits one prompt over the ranks), its
    attention and the rank's own weights on that rank's GPUs alone, the other ranks idle
    where they have no prompt (vLLM's idle MoE ranks run a dummy pass, SGLang's gather an
    empty batch) while the experts run over every GPU (cost.batch_shape)."""
    n, tp = dep.data_parallel_size, dep.tensor_parallel_size
    gpus = f"{tp} GPU{'s' if tp > 1 else ''}"
    return (f"each prompt runs whole on one of the {n} ranks (an engine gives a request to one "
            f"rank and splits none over them): its attention and the rank's own weights on "
            f"that rank's {gpus} alone, so a lone prompt has 1 of the {n} ranks' compute for "
            "them" + (f", the routed experts on all {dep.expert_ranks:,} GPUs" if dep.model.moe
                      else "") + f"; several prompts are dealt one a rank in turn, the floor "
            f"the busiest rank's (⌈prompts ÷ {n}⌉), the throughput every rank's")


def data_parallel_cautions(dep: Deployment, stepping: bool,
                           dispatched: str = "", prompts: bool = False) -> tuple[str, ...]:
    """What a data-parallel figure leaves out or assumes (``stepping``: a decode step's too;
    with ``prompts``, a prefill's), or nothing without data parallelism. ``dispatched``: a
    simulation's, its arrivals dealt over the ranks so (sim/data_parallel.py), each rank's
    load its own, not taken as even."""
    n = dep.data_parallel_size
    if n == 1:
        return ()
    kind = data_parallel_kind(dep)
    out = [f"{kind}: each of the {n} ranks keeps its own requests' cache "
           f"in its own pool, so the conversations are one rank's × {n}; the ranks' loads "
           "are taken as even (a rank given more long requests fills first"
           + (", and its step paces every rank's MoE layers" if dep.model.moe else "") + ")"] \
        if not dispatched else [
        f"{kind}: each of the {n} ranks is simulated with its own scheduler, "
        f"queue and pool, the arrivals dealt {dispatched}, so a prefix is reused only by the "
        "requests of the rank that cached it; "
        + ("each rank steps on its own clock, its step one rank's batch alone (vLLM runs a "
           "dense model's ranks as independent engines: no dummy pass, no exchange); the "
           "steps and busy time are the ranks' summed"
           if independent_ranks(dep) else
           "every step runs all the ranks together, as long as the slowest rank's attention "
           "and own weights plus the layers gathered over every rank's tokens and their "
           "exchange, an idle rank's dummy pass adding nothing")
        + ("; SGLang's admission estimate keeps its default schedule_conservativeness (under "
           "DP attention SGLang scales it by 0.3, admitting sooner)"
           if dep.engine == "sglang" else "")]
    if stepping and prompts:
        out.append(prompt_rank_words(dep))
    elif stepping and not dispatched:
        out.append(f"a step of batch B runs ⌈B ÷ {n}⌉ sequences on each rank: their attention "
                   "and the rank's own weights are one rank's, read on its "
                   f"{dep.tensor_parallel_size} GPU{'s' if dep.tensor_parallel_size > 1 else ''}"
                   + (", the experts once for every rank's tokens" if dep.model.moe else "")
                   + "; the step's reads and FLOPs are one rank's, tok/s the whole batch's")
    if dep.model.moe is not None and stepping:
        out.append(f"the exchange between the ranks is priced as {exchange_label(dep)}: the "
                   "bytes and steps of one all-reduce of the whole batch's activations over "
                   f"the {dep.expert_ranks:,} GPUs per layer; DeepEP or pplx kernels send only "
                   "each token's routed copies")
    node = node_size(dep.accelerator)
    if dep.model.moe is not None and stepping and dep.expert_ranks > node:
        out.append(f"the experts' {dep.expert_ranks:,} GPUs span {-(-dep.expert_ranks // node)} "
                   f"nodes of {node}: each MoE layer's exchange crosses the network between "
                   f"them (priced at {INTER_NODE_BYTES_PER_S * 8 / 1e9:,.0f} Gb/s a GPU)")
    if dep.model.moe is not None:
        out.append("the buffers of DeepEP's or pplx's all-to-all kernels (GBs a GPU, where "
                   "chosen over the default) are not counted in the pool")
    if dep.engine == "sglang":
        out.append("SGLang's --max-running-requests and --chunked-prefill-size are the "
                   f"server's, divided by --dp-size ({n}) on each rank; its default "
                   "mem_fraction_static holds back more for DP attention's buffers (CUDA-graph "
                   "batch × --dp-size × 3 MiB, × 4.5 above a batch of 300, from v0.5.3; 4 GiB "
                   "in v0.4.7.post1–v0.5.2), and the pool is sized with it")
    return tuple(out)

"""llama.cpp's prompt batching: one llama_decode call takes up to -b tokens (n_batch) and
runs them as ubatches of -ub tokens (n_ubatch), each re-reading the weights, pipelined over
a layer split's stages where llama.cpp pipelines the split (llamacpp_split.pipelines: every
block and the output on the GPUs, no tensor override), else one after another; several
prompts' tokens are packed into the calls and ubatches in order (``split_ubatches``), a prompt
split where one fills. One owner for validate's rows, prefill's and decode's expectations, the
prefill floor's pipelining and the simulator's llama-server (defaults from
data/engines.json)."""

from __future__ import annotations

from typing import Any

from ridgeline.cost import Seq, step_time_s
from ridgeline.datafiles import load_data
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile


def _defaults() -> dict[str, Any]:
    data: dict[str, Any] = load_data("engines.json")["llama.cpp"]
    return data


def llamacpp_n_ubatch() -> int:
    """llama.cpp's -ub: the tokens one ubatch (one pass over the weights) takes (default 512);
    read when asked, not at import."""
    return int(_defaults()["n_ubatch"])


def llamacpp_n_batch() -> int:
    """llama.cpp's -b: the tokens one llama_decode call takes (default 2048)."""
    return int(_defaults()["n_batch"])


def pipelined_stages(dep: Deployment) -> int:
    """The stages llama.cpp overlaps one call's ubatches over: a layer split's GPUs where it
    pipelines the split (llamacpp_split.pipelines), else 1, each ubatch passing the stages
    before the next starts (without pipeline_parallel, src/llama-context.cpp, the ggml
    scheduler keeps one copy of each input, ggml-backend.cpp n_copies, reused only once the
    last ubatch is done). Two GPUs with every layer on them: 2; with -ngl 70 of
    Llama-3.1-70B's 81 slots: 1."""
    from ridgeline.llamacpp_split import pipelines  # the split's memory: not at start-up

    if not dep.engine.startswith("llama.cpp") or not pipelines(dep):
        return 1
    return dep.pipeline_parallel_size


def pipelined_s(ubatches: list[float], stages: int) -> float:
    """One llama_decode call's ubatches through ``stages`` pipelined stages
    (``pipelined_stages``): llama.cpp pipelines them (PR #6017: GGML_SCHED_MAX_COPIES = 4
    copies of the graph inputs), each ubatch a stage behind the last, so the call takes its
    ubatches' stage times plus the (stages − 1) stages the last one waits behind; one stage,
    or one ubatch, runs them in turn."""
    if stages <= 1 or len(ubatches) <= 1:
        return sum(ubatches)
    return pipeline_span(sum(ubatches), max(ubatches), stages)


def pipeline_span(total: float, longest: float, stages: int) -> float:
    """Work of ``total`` stage-times, in pieces of at most ``longest``, through ``stages``
    stages a piece apart: each stage does its share, and the last piece waits behind the
    (stages − 1) before it: (total + (stages − 1) × longest) ÷ stages. Four equal ubatches
    over two stages take 2.5 ubatch-times, not 4."""
    return (total + (stages - 1) * longest) / stages


def split_ubatches(batch: list[Seq], size: int) -> list[list[Seq]]:
    """A llama.cpp batch cut, in order, into ubatches of at most ``size`` tokens, a prompt
    split where a ubatch fills (its second part continuing the first's context)."""
    parts: list[list[Seq]] = [[]]
    room = size
    for s in batch:
        left, context = s.new_tokens, s.context_tokens
        while left:
            if not room:
                parts.append([])
                room = size
            take = min(left, room)
            parts[-1].append(Seq(take, context))
            left, context, room = left - take, context + take, room - take
    return parts


def prefill_calls(prompt: int, depth: int, batch: int, chunk: int,
                  n_batch: int) -> list[list[list[Seq]]]:
    """``batch`` prompts of ``prompt`` tokens after ``depth`` cached ones as llama.cpp runs
    them: their tokens, in order, cut into llama_decode calls of ``n_batch`` tokens (-b), each
    call into ubatches of ``chunk`` (-ub), as llama-server packs its slots' prompts and the
    simulator's steps do (``split_ubatches``). Four 512-token prompts at -ub 512: 4 ubatches;
    four of 300: 3 (512, 512 and 176 tokens), not one each. A -ub past -b (which
    llama_context clamps to -b, as the CLI does) keeps one ubatch a call."""
    calls = split_ubatches([Seq(prompt, depth)] * batch, max(n_batch, chunk))
    return [split_ubatches(call, chunk) for call in calls]


def prefill_time_s(dep: Deployment, profile: EngineProfile, prompt: int, depth: int = 0,
                   batch: int = 1, chunk: int | None = 0, n_batch: int | None = None) -> float:
    """Prefill of ``batch`` prompts of ``prompt`` tokens after ``depth`` cached ones.

    llama.cpp cuts the work into ubatches of ``chunk`` tokens (0: its default -ub, 512),
    whichever prompts they come from (each ubatch re-reads the weights), ``n_batch`` tokens
    (-b; None: its default, 2048) to a llama_decode call (``prefill_calls``); engines, or
    chunk=None, run each prompt's tokens in one pass.
    """
    if not dep.engine.startswith("llama.cpp") or chunk is None:
        return step_time_s(dep, [Seq(prompt, depth)] * batch, profile)
    chunk = chunk or llamacpp_n_ubatch()
    stages = pipelined_stages(dep)
    return sum(pipelined_s([step_time_s(dep, part, profile) for part in call], stages)
               for call in prefill_calls(prompt, depth, batch, chunk,
                                         n_batch or llamacpp_n_batch()))

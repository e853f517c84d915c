"""What an engine is expected to take (step_cost with its calibrated profile), and what the
decode and prefill reports share: the deployment's line, the fit, the cautions, the
side-by-side of several cards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ridgeline.chunked_prefill import (
    chunks_prefill,
    pipelined_steps_s,
    rank_prefill_steps,
    serving_prefill_time_s,
)
from ridgeline.context_length import (
    served_context_caution,
    served_positions,
    trained_context_caution,
)
from ridgeline.cost import (
    OVER_HOST_LINK,
    SCORE_BYTES_PER_PAIR,
    Seq,
    StepCost,
    batch_shape,
    graph_mode,
    score_bytes,
    step_cost,
    step_time_s,
)
from ridgeline.cpu_offload import cpu_offload_note
from ridgeline.deployment import Deployment
from ridgeline.engine_names import engine_name
from ridgeline.engines import UNSEEN_GROUP_BAND, EngineProfile
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.floors import DecodeFloor, PrefillFloor, floor_time_s, prefill_floor
from ridgeline.graph_batches import captured
from ridgeline.hardware import Accelerator
from ridgeline.llamacpp_batching import (
    llamacpp_n_batch,
    llamacpp_n_ubatch,
    pipelined_stages,
    prefill_calls,
    prefill_time_s,
)
from ridgeline.raw_fit import FitCheck
from ridgeline.reports.graph_explain import graph_step
from ridgeline.reports.profile_story import (
    matmul_qs,
    moe_layer_qs,
    overhead_formula,
    overhead_q,
    share_qs,
)
from ridgeline.units import GB


class CardReport(Protocol):
    """One card's report, as a side-by-side of several cards reads it."""

    @property
    def deployment(self) -> Deployment: ...

    @property
    def steps(self) -> tuple[Step, ...]: ...

    def to_dict(self) -> dict[str, Any]: ...


_NO_EXPECTATION = ("expected on {engine}: nothing: this deployment does not fit, so it runs at "
                   "no speed (`ridgeline fit` for the levers)")


# a point -ngl all's run (as priced) cannot hold, which llama-server's default --fit runs by
# moving weights to the host (reports.decode.fit_seat_notes' caution gives the weights moved)
FIT_RUNS_IT = (" (arithmetic only: every layer on the GPU, as priced, overflows it; "
               "llama-server's default --fit runs it with weights on the host, the caution "
               "below):")


def floor_heading_end(runs: bool, fits: bool, fit_runs: bool, engine: str) -> str:
    """The end of decode's and prefill's floor heading: ":" where the engine runs the point;
    else whose arithmetic the figures are: the engine would not run a point that fits (its
    pool does not seat it), llama-server's --fit runs one that overflows as priced
    (FIT_RUNS_IT), or no engine can run it."""
    if runs:
        return ":"
    if fits:
        return f" (arithmetic only: {engine_name(engine)} would not run this):"
    return FIT_RUNS_IT if fit_runs else " (arithmetic only: no engine can run this):"


_FIT_HINT = ("  llama-server's default --fit (since b7437, Dec 2025) would keep layers in host "
             "memory instead: --host-bandwidth-gbs GB/s prices that")


def no_expectation(dep: Deployment, engine: str, cautions: Sequence[str] = ()) -> list[str]:
    """The line for a deployment that does not fit, and for llama.cpp on one discrete GPU
    what its --fit would do instead, unless one of the report's ``cautions`` says it with
    the weights it would move (SET_ASIDE_LEAD)."""
    from ridgeline.llamacpp_fit import SET_ASIDE_LEAD, fit_could_offload

    lines = [_NO_EXPECTATION.format(engine=engine_name(engine))]
    if dep.num_gpus == 1 and fit_could_offload(dep, engine) \
            and not any(c.startswith(SET_ASIDE_LEAD) for c in cautions):
        lines.append(_FIT_HINT)
    return lines


def _split(dep: Deployment) -> str:
    """llama.cpp's split over several GPUs, as its -sm names it."""
    if dep.pipeline_parallel_size > 1:
        return " (-sm layer: a step passes the GPUs' layers one after another)"
    return " (-sm tensor: each layer split over the GPUs)"


def deployment_line(dep: Deployment) -> str:
    line = (f"{dep.model.name} on {dep.gpus_label}"
            + (_split(dep) if dep.num_gpus > 1 and dep.engine.startswith("llama.cpp") else "")
            # EP moves the step (DeepSeek-V3 on 8 x H200, batch 1: a 2.07 ms floor, 1.25 under
            # TP): said, as simulate says it; a data-parallel layout's label already names it
            + (", experts spread over the GPUs (EP)"
               if dep.expert_parallel and dep.data_parallel_size == 1 else "")
            + ", weights "
            f"{dep.weights.label}, KV {dep.kv.id}, matmuls at {dep.matmuls_label}"
            + ("" if dep.flash_attention else ", no flash attention"))
    if dep.offload is not None:
        host = dep.offload.host_bandwidth_bytes_per_s
        line += f"; {dep.offload.describe(dep.model)}" + (
            f"; host memory {host / 1e9:,.1f} GB/s" if host else "")
    return line + cpu_offload_note(dep)


@dataclass(frozen=True)
class Expectation:
    """What an engine is expected to take: step_cost with its calibrated profile."""

    engine: str
    time_s: float
    low_s: float  # the band, from the profile's fit residuals
    high_s: float
    source: str
    steps: tuple[Step, ...] = ()  # how time_s follows from the profile (for --explain)
    compute_fitted: bool = True  # a compute-bound row set the profile's compute efficiency
    calibration: str = ""  # where the profile saw too few rows on this class of card
    prompt_steps: int = 1  # a prefill's passes over the weights: steps, or llama.cpp ubatches
    # several prompts over several steps: when the first prompt's last step ends, its TTFT
    # (time_s is the last prompt's); None where all end together or it is not priced apart
    first_time_s: float | None = None

    @classmethod
    def of(cls, dep: Deployment, batch: list[Seq], profile: EngineProfile) -> Expectation:
        cost = step_cost(dep, batch, profile)
        t = cost.time_s
        low, slow, band = band_edges(profile, t, floor_time_s(dep, batch), dep.accelerator)
        return cls(profile.engine, t, low, slow, profile.source,
                   (*_expectation_steps(dep, batch, profile, cost), *band),
                   profile.compute_fitted, profile.calibration_caution(dep.accelerator))

    @classmethod
    def of_prefill(cls, dep: Deployment, prompt: int, batch: int,
                   profile: EngineProfile, ubatch: int | None = None,
                   budget: tuple[int, str] | None = None,
                   enable_chunked_prefill: bool = False,
                   n_batch: int | None = None) -> Expectation:
        """A prompt as the engine runs it: llama.cpp in n_ubatch-token ubatches (default
        512), the prompts' tokens packed into them in order, each after the cache the ones
        before it filled (what `validate` scores); a serving engine in steps of its token
        budget (``budget``: the tokens a step and where they come from,
        ``chunked_prefill.step_budget``), in one pass without one; chunked where the engine
        chunks (TensorRT-LLM with ``enable_chunked_prefill``)."""
        if not dep.engine.startswith("llama.cpp"):
            return cls._of_steps(dep, prompt, batch, profile, budget, enable_chunked_prefill)
        given = ubatch is not None
        ubatch = ubatch or llamacpp_n_ubatch()
        if prompt * batch <= ubatch:  # every prompt in one ubatch
            return cls.of(dep, [Seq(prompt, 0)] * batch, profile)
        parts = [part for call in prefill_calls(prompt, 0, batch, ubatch, n_batch
                                                or llamacpp_n_batch()) for part in call]
        first = parts[0]
        t = prefill_time_s(dep, profile, prompt, 0, batch, ubatch, n_batch)
        ubatches = len(parts)
        head = tuple(replace(st, label=f"first ubatch: {st.label}") for st in
                     _expectation_steps(dep, first, profile, step_cost(dep, first, profile)))
        total = step("prefill in ubatches", "Σ over the ubatches of step_cost(ubatch, after "
                     "the tokens before it): each re-reads the weights and attends to a longer "
                     "cache", q("expected", t * 1e3, "ms"),
                     q("n_ubatch", ubatch, "tokens", "--ubatch-size" if given
                       else "llama.cpp default (-ub)"),
                     q("ubatches", ubatches, "", f"⌈{batch} x {prompt:,} ÷ {ubatch}⌉: the "
                       "prompts' tokens packed in order" if batch > 1 else
                       f"⌈{prompt:,} ÷ {ubatch}⌉"),
                     *_ubatch_times(dep, profile, parts))
        floor = prefill_floor(dep, prompt, batch, ubatch, n_batch=n_batch).time_s
        low, slow, band = band_edges(profile, t, floor, dep.accelerator)
        return cls(profile.engine, t, low, slow, profile.source, (*head, total, *band),
                   profile.compute_fitted, profile.calibration_caution(dep.accelerator),
                   ubatches)

    @classmethod
    def _of_steps(cls, dep: Deployment, prompt: int, batch: int, profile: EngineProfile,
                  budget: tuple[int, str] | None, enable_chunked_prefill: bool = False
                  ) -> Expectation:
        """A serving engine's prefill in steps of at most its token budget, each priced by
        step_cost as the simulator prices it; one step where the prompts fit one."""
        if budget is None:
            return cls.of(dep, [Seq(prompt, 0)] * batch, profile)
        tokens, source = budget
        chunked = chunks_prefill(dep, enable_chunked_prefill) \
            or prompt > tokens  # past it, chunked as simulate
        ranks = dep.data_parallel_size  # each rank its own prompts, under its own budget
        steps = rank_prefill_steps(prompt, batch, tokens, chunked, ranks)
        own = dep.rank_sequences(batch)  # the busiest rank's prompts, whose steps they are
        if len(steps) == 1:
            return cls.of(dep, steps[0], profile)
        from ridgeline.vllm_memory import one_pool  # the simulator's rule for it

        stages = dep.pipeline_parallel_size if one_pool(dep.engine, dep.state_engine_version) \
            else 1  # vLLM V1 sends a prompt's next chunk while its last is in the pipeline
        trips = [step_time_s(dep, s, profile) for s in steps]
        t = serving_prefill_time_s(dep, profile, steps) if stages == 1 else \
            pipelined_steps_s(trips, stages)
        head = tuple(replace(st, label=f"first step: {st.label}") for st in
                     _expectation_steps(dep, steps[0], profile,
                                        step_cost(dep, steps[0], profile)))
        total = step("prefill in steps of the token budget",
                     "Σ over the steps of step_cost(the step's prompt tokens): each step "
                     "re-reads the weights" + (", and a prompt's later chunk attends to the "
                                               "cache its earlier chunks filled"
                                               if chunked else "")
                     + (f"; vLLM V1 sends each step into the {stages}-stage pipeline as soon "
                        f"as it has room, so they overlap (up to {stages} in flight, each a "
                        "stage behind the last)" if stages > 1 else ""),
                     q("expected", t * 1e3, "ms"),
                     q("token budget", tokens, "tokens a step", source),
                     *([q("a rank's prompts", own, "", f"⌈{batch:,} ÷ {ranks} data-parallel "
                          "ranks⌉, the busiest's; the ranks' steps run together")]
                       if ranks > 1 else []),
                     q("steps", len(steps), "",
                       f"⌈{own} x {prompt:,} ÷ {tokens:,}⌉" if chunked else
                       f"⌈{own} ÷ ⌊{tokens:,} ÷ {prompt:,}⌋⌉: whole prompts a step"),
                     *_step_times(steps, trips))
        low, slow, band = band_edges(profile, t, prefill_floor(dep, prompt, batch,
                                                              chunk_tokens=tokens).time_s,
                                     dep.accelerator)
        # the first prompt (a rank's first, under data-parallel attention) ends in the step
        # its last chunk runs in: the first whole; chunked, the ⌈prompt ÷ budget⌉-th
        first_step = -(-prompt // tokens) if chunked else 1
        first = sum(trips[:first_step]) if stages == 1 and first_step < len(steps) else None
        return cls(profile.engine, t, low, slow, profile.source, (*head, total, *band),
                   profile.compute_fitted, profile.calibration_caution(dep.accelerator),
                   len(steps), first)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "time_s": self.time_s, "low_s": self.low_s,
                "high_s": self.high_s, "profile": self.source}


SHOWN_STEP_TIMES = 8  # a prefill's steps listed one by one; past it, the middle ones summed


def _step_times(steps: list[list[Seq]], trips_s: list[float]) -> tuple[Quantity, ...]:
    """Each step's step_cost time, the terms the prefill's Σ adds (Gemma-3-27B on 2 L40S, an
    8,000-token prompt at vLLM's 2,048 a step: 371.2 + 374.0 + 375.7 + 343.1 = 1,464 ms);
    past SHOWN_STEP_TIMES steps the first two, the middle ones' sum and the last."""
    def shown(i: int) -> Quantity:
        seqs = steps[i]
        new = sum(seq.new_tokens for seq in seqs)
        after = seqs[0].context_tokens if len(seqs) == 1 else 0
        return q(f"step {i + 1}", trips_s[i] * 1e3, "ms", f"{new:,} prompt tokens" + (
            f" of {len(seqs)} prompts" if len(seqs) > 1 else "") + (
            f" after {after:,} cached" if after else ""))

    n = len(steps)
    if n <= SHOWN_STEP_TIMES:
        return tuple(shown(i) for i in range(n))
    return (shown(0), shown(1), q(f"steps 3 to {n - 1:,}", sum(trips_s[2:-1]) * 1e3, "ms",
                                  "together"), shown(n - 1))


def _ubatch_times(dep: Deployment, profile: EngineProfile,
                  parts: list[list[Seq]]) -> tuple[Quantity, ...]:
    """llama.cpp's ubatches (``parts``, the prompts' tokens packed in order), each after the
    tokens before it, the terms the Σ adds; none where a split pipelines a call's ubatches
    over its GPUs, whose overlap is no sum."""
    if pipelined_stages(dep) > 1:
        return ()
    times = _step_times(parts, [step_time_s(dep, s, profile) for s in parts])
    return tuple(replace(t, name=t.name.replace("steps", "ubatches").replace("step", "ubatch"))
                 for t in times)


def band_edges(profile: EngineProfile, time_s: float, floor_s: float,
               acc: Accelerator | None = None) -> tuple[float, float, tuple[Step, ...]]:
    """The band around an expected time, its fast and slow edges and the two steps that give
    them: the profile's fit saw measured ÷ predicted rates from band_low to band_high
    (EngineProfile.band_s), so the time runs time ÷ band_high .. time ÷ band_low, the fast
    edge held between the floor (no engine beats it) and the expectation itself. A profile's
    default band, 0.8 .. 1.25 (EngineProfile), puts a 10 ms step at 8–12.5 ms; the bundled
    vllm profile's fitted 0.822 .. 1.129, at 8.86–12.16 ms. On ``acc`` where the fit saw too
    few of its group's rows, the rates are EngineProfile.band_on's, UNSEEN_GROUP_BAND wider."""
    slowest, fastest = (profile.band_low, profile.band_high) if acc is None else \
        profile.band_on(acc)
    widened = (slowest, fastest) != (profile.band_low, profile.band_high)
    fast, slow = time_s / fastest, time_s / slowest
    low = min(time_s, max(fast, floor_s))
    src = f"{profile.engine} profile: measured ÷ predicted rates in its fit"
    wide = (f" × {UNSEEN_GROUP_BAND:g}: it saw too few rows on this card's group, whose "
            "efficiencies it borrows" if widened else "")
    edge = ("max(expected ÷ fastest rate, floor), at most expected: no engine beats the floor"
            if fast < floor_s or fast > time_s else "expected ÷ fastest rate")
    return low, slow, (
        step("band, fast edge", edge, q("fast edge", low * 1e3, "ms"),
             q("expected", time_s * 1e3, "ms"),
             q("fastest rate", fastest, "", f"{src}, its band_high{wide}"),
             *([q("floor", floor_s * 1e3, "ms")] if fast < floor_s else [])),
        step("band, slow edge", "expected ÷ slowest rate", q("slow edge", slow * 1e3, "ms"),
             q("expected", time_s * 1e3, "ms"),
             q("slowest rate", slowest, "", f"{src}, its band_low"
               + (wide.replace(" × ", " ÷ ", 1) if widened else ""))))


def expected_speed_steps(e: Expectation, batch: int) -> tuple[Step, ...]:
    """The speeds the decode output prints beside an expected step: each user one token a
    step, the batch ``batch`` tokens a step (a 10 ms step at batch 8: 100 and 800 tok/s)."""
    return (step("expected per-user speed", "1 ÷ expected step",
                 q("per user", 1 / e.time_s, "tok/s"), q("expected", e.time_s * 1e3, "ms")),
            step("expected aggregate speed", "batch ÷ expected step",
                 q("aggregate", batch / e.time_s, "tok/s"), q("batch", batch),
                 q("expected", e.time_s * 1e3, "ms")))


def expected_prompt_speed_step(e: Expectation, prompts: int, prompt_len: int) -> Step:
    """The prompt tokens a second the prefill output prints beside an expected TTFT: every
    prompt's tokens over the time to the first token (4,096 tokens in 0.1 s: 40,960 tok/s)."""
    return step("expected prompt throughput", "prompts × prompt length ÷ expected TTFT",
                q("prompt throughput", prompts * prompt_len / e.time_s, "tok/s"),
                q("prompts", prompts), q("prompt length", prompt_len, "tokens"),
                q("expected", e.time_s * 1e3, "ms"))


def _expectation_steps(dep: Deployment, batch: list[Seq], profile: EngineProfile,
                       cost: StepCost) -> tuple[Step, ...]:
    """The calibrated step: every operator at the engine's share of peak and bandwidth, plus
    the links, plus the engine's fixed costs."""
    by = {kind: sum(op.time_s for op in cost.ops if op.bound == kind)
          for kind in ("compute", "memory", "link", "overhead", "host")}
    prefill = cost.tokens > cost.sequences
    shape = batch_shape(dep, batch)
    ungraphed, priced = graph_mode(dep, shape, profile)  # as step_cost decided
    graph = () if prefill else graph_step(dep, shape.tokens, shape.sequences,
                                          None if ungraphed else priced.tokens)
    src = f"{profile.engine} profile"
    overhead = step("engine overhead", overhead_formula(profile)
                    + (" (a step with prompt tokens: no CUDA graph)" if prefill else
                       " (a decode with no CUDA graph captured)" if ungraphed and not
                       getattr(captured(dep), "sizes", True) else
                       " (a decode above the engine's largest captured CUDA-graph batch: no "
                       "CUDA graph)" if ungraphed else ""),
                    q("overhead", by["overhead"] * 1e3, "ms"),
                    overhead_q("per step", profile.step_overhead_s, src),
                    q("layers", dep.model.num_layers, "", "config.json num_hidden_layers"),
                    overhead_q("per layer", profile.per_layer_s(ungraphed), src),
                    *matmul_qs(profile, dep), *moe_layer_qs(profile, dep))
    total = step("expected step", "Σ operators max(FLOPs ÷ (peak × compute share), bytes ÷ "
                 "(bandwidth × bandwidth share)) + collectives + overhead",
                 q("expected", cost.time_s * 1e3, "ms"),
                 *share_qs(profile, dep),
                 q("compute-bound operators", by["compute"] * 1e3, "ms"),
                 q("memory-bound operators", by["memory"] * 1e3, "ms"),
                 q("collectives", by["link"] * 1e3, "ms"),
                 q("overhead", by["overhead"] * 1e3, "ms"),
                 *([q("host operators", by["host"] * 1e3, "ms", "below")] if by["host"] else []))
    memory = _memory_bound_step(dep, profile, cost, by["memory"])
    steps = (*graph, overhead, *memory, total, *_host_step(dep, cost))
    if dep.flash_attention or dep.model.attention is None:
        return steps
    scores = step("attention scores", "written and read back without flash attention: per "
                  "layer, heads × query-key pairs × bytes per pair (in the memory-bound operators)",
                  q("scores", score_bytes(dep, batch) / GB, "GB"),
                  q("heads", dep.model.attention.num_heads / dep.tensor_parallel_size, "",
                    "config.json num_attention_heads ÷ TP"),
                  q("bytes per pair", SCORE_BYTES_PER_PAIR, "B",
                    "f32 scores written, read and written by softmax, read again as f16 by P·V"))
    return scores, *steps


def _memory_bound_step(dep: Deployment, profile: EngineProfile, cost: StepCost,
                       time_s: float) -> tuple[Step, ...]:
    """The expected step's memory-bound operators: their bytes at the engine's share of the
    bandwidth, and where some of their work items' arithmetic outlasts its bytes, that
    excess. Llama-3.1-70B fp8 on an H100 under vLLM at batch 1: 71.22 GB ÷ (3.35 TB/s ×
    0.7455) = 28.52 ms. None where no operator is memory-bound."""
    ops = [op for op in cost.ops if op.bound == "memory"]
    if not ops:
        return ()
    acc = dep.accelerator
    nbytes = sum(op.bytes for op in ops)
    share = profile.bandwidth_for(acc)
    excess = time_s - nbytes / (acc.memory_bandwidth_bytes_per_s * share)
    more = excess > time_s * 1e-9
    return (step("memory-bound operators", "Σ their bytes per GPU ÷ (bandwidth per GPU × "
                 "bandwidth share)"
                 + (" + arithmetic past the bytes (their work items whose FLOPs take longer "
                    "than their bytes)" if more else ""),
                 q("memory-bound operators", time_s * 1e3, "ms"),
                 q("bytes per GPU", nbytes / GB, "GB", "each GPU's share: "
                   + ", ".join(op.name for op in ops)),
                 q("bandwidth per GPU", acc.memory_bandwidth_bytes_per_s / 1e12, "TB/s",
                   f"one {acc.id}"),
                 q("bandwidth share", share, "",
                   f"{profile.engine} profile: {profile.bandwidth_story(acc)}"),
                 *([q("arithmetic past the bytes", excess * 1e3, "ms")] if more else [])),)


def _host_step(dep: Deployment, cost: StepCost) -> tuple[Step, ...]:
    """How a partial offload's host operators are priced, or nothing without one."""
    host = [op for op in cost.ops if op.bound == "host"]
    if not host or dep.offload is None:
        return ()
    from ridgeline.offload import host_bandwidth_share, offload_constants, op_offload_min_batch

    over_link = any(op.name.endswith(f"({OVER_HOST_LINK})") for op in host)
    if over_link:
        formula = (f"a step of ≥ {op_offload_min_batch()} tokens: host weights over the link, "
                   "then their matmuls and the operators between them on the GPU")
        inputs = [q("bytes over the link", sum(op.bytes for op in host
                                               if op.name.endswith(f"({OVER_HOST_LINK})"))
                          / GB, "GB"),
                  q("host link", link_gbs(dep), "GB/s", "--host-link-gbs or the card's PCIe")]
    else:
        formula = ("bytes in host memory ÷ (host bandwidth × the share llama.cpp's CPU layers "
                   "reach)")
        inputs = [q("bytes", sum(op.bytes for op in host) / GB, "GB"),
                  q("host bandwidth", dep.offload.host_bandwidth_bytes_per_s / 1e9, "GB/s",
                    "--host-bandwidth-gbs"),
                  q("host share", host_bandwidth_share(), "",
                    offload_constants()["sources"][0])]
    return (step("host operators", formula,
                 q("host operators", sum(op.time_s for op in host) * 1e3, "ms"), *inputs,
                 q("placement", dep.offload.describe(dep.model))),)


def link_gbs(dep: Deployment) -> float:
    from ridgeline.offload import link_bytes_per_s

    return link_bytes_per_s(dep) / 1e9


def fit_dict(f: DecodeFloor | PrefillFloor) -> dict[str, Any]:
    """The memory check; with data-parallel attention its bytes are the busiest rank's,
    which ``fit_rank`` names (raw_fit.batch_fit)."""
    rank = f.fit.rank
    return {"fits": f.fit.fits, "weight_bytes": f.fit.weight_bytes, "kv_bytes": f.fit.kv_bytes,
            "needed_bytes": f.fit.needed_bytes,  # the text's "N GB of weights and KV cache"
            "capacity_bytes": f.fit.capacity_bytes, "shortfall_bytes": f.fit.shortfall_bytes,
            # a drafter's weights and cache, counted in weight_bytes and kv_bytes (decode's;
            # 0 without one), and the busiest data-parallel rank the bytes are of (null: none)
            "drafter_bytes": f.fit.drafter_bytes,
            # the ranks under every command's data_parallel_size, a rank's GPUs under fit's
            # data_parallel.gpus_per_rank
            "fit_rank": {"data_parallel_size": rank.ranks, "sequences": rank.sequences,
                         "gpus_per_rank": rank.gpus} if rank else None}


def weights_fit_dict(check: FitCheck | None) -> dict[str, Any]:
    """roofline's and moe's memory check: whether the weights alone load (they ask no context,
    so no cache is counted: not decode's ``fits``, which counts the batch's cache too), the
    bytes on the GPUs, the memory they find and what is missing; all null without a model.
    Llama-3.1-70B bf16 on one H100: 141.1 GB of weights against 85.0 GB, short by 56.1 GB."""
    return {"weights_fit": None if check is None else check.fits,
            "weight_bytes": None if check is None else check.weight_bytes,
            "capacity_bytes": None if check is None else check.capacity_bytes,
            "shortfall_bytes": None if check is None else check.shortfall_bytes}


def context_caution(dep: Deployment, tokens: int) -> str:
    """What to say of a context past the one the engine serves the model at, or ""; where
    the launch's YaRN lifts llama.cpp's n_ctx_train, or --override-kv sets it
    (capacity.served_context), the cap it takes and why; and the --override-kv keys ridgeline
    does not model."""
    from ridgeline.capacity import served_context
    from ridgeline.llamacpp_overrides import unmodelled_note

    limit, label = served_context(dep)
    note = unmodelled_note(dep.model, dep.rope.kv_overrides) if dep.rope is not None else ""
    if limit is None or limit == served_positions(dep.model, dep.engine):
        said = served_context_caution(dep.model, tokens, dep.engine)
    elif tokens > limit:
        said = trained_context_caution(dep.model.name, limit, tokens, label)
    elif label.startswith("--override-kv"):
        said = (f"llama-server's slot cap is {limit:,} tokens (n_ctx_train, as the launch's "
                f"{label} sets it)")
    else:
        trained = served_positions(dep.model, dep.engine)
        # YaRN at a new scale rescales the GGUF's original context: gpt-oss's 4,096 × 2 is
        # under its 131,072, a cap the launch lowers
        how = "lifted" if trained is None or limit > trained else f"lowered from {trained:,}"
        said = (f"llama-server's slot cap is {label} tokens (n_ctx_train {how} by the launch's "
                "--rope-scaling yarn, llama.cpp PR #28030)")
    return "; ".join(c for c in (said, note) if c)


@dataclass(frozen=True)
class ByCard:
    """One question's reports on several cards: --explain steps labelled with the card, and
    each card's own JSON with its id and catalog price."""

    reports: tuple[CardReport, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{r.deployment.accelerator.id}: {st.label}")
                     for r in self.reports for st in r.steps)

    @property
    def engine_per_card(self) -> bool:
        """Whether the cards run different engines (no --engine named: llama.cpp-metal on an
        M2 Max beside vllm on an H100), so that each row names its own."""
        return len({r.deployment.engine for r in self.reports}) > 1

    def to_dict(self) -> dict[str, Any]:
        """Each card's own JSON, which names its card, engine and catalog price as the one-card
        answer does (reports.identity)."""
        return {"accelerators": [r.to_dict() for r in self.reports]}

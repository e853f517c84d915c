"""`ridgeline decode` and `prefill`: the article's floors, one division each, beside what
the engine is expected to take."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ridgeline.cost import (
    OVER_HOST_LINK,
    SCORE_BYTES_PER_PAIR,
    Seq,
    StepCost,
    decode_batch,
    score_bytes,
    step_cost,
)
from ridgeline.deployment import Deployment
from ridgeline.engines import EngineProfile
from ridgeline.explain import Step, q, step
from ridgeline.floors import (
    DecodeFloor,
    PrefillFloor,
    bound_label,
    decode_floor,
    floor_time_s,
    prefill_floor,
)
from ridgeline.llamacpp_batching import llamacpp_n_ubatch, prefill_time
from ridgeline.model import trained_context_caution
from ridgeline.render import table
from ridgeline.reports.profile_story import overhead_q, share_qs
from ridgeline.roofline import (
    ridge_point,
)
from ridgeline.stages import micro_batch, micro_batches
from ridgeline.units import GB, plural, usd_per_million_tokens

_NO_EXPECTATION = ("expected on {engine}: nothing: this deployment does not fit, so it runs at "
                   "no speed (`ridgeline fit` for the levers)")
_FIT_HINT = ("  llama.cpp's --fit (on by default since Dec 2025) would keep layers in host memory "
             "instead: -ngl auto --host-bandwidth-gbs GB/s prices that")


def _no_expectation(dep: Deployment, engine: str) -> list[str]:
    """The line for a deployment that does not fit, and for llama.cpp on one discrete GPU
    what its --fit would do instead."""
    lines = [_NO_EXPECTATION.format(engine=engine)]
    acc = dep.accelerator
    if (engine.startswith("llama.cpp") and dep.offload is None and dep.num_gpus == 1
            and acc.vendor != "apple" and acc.form != "soc"):
        lines.append(_FIT_HINT)
    return lines


def _split(dep: Deployment) -> str:
    """llama.cpp's split over several GPUs, as its -sm names it."""
    if dep.pipeline_parallel_size > 1:
        return " (-sm layer: a step passes the GPUs' layers one after another)"
    return " (-sm tensor: each layer split over the GPUs)"


_NOT_REACHED = ("expected on {engine}: nothing: {engine} cannot run a batch of {batch:,} at this "
                "context (below), so no step of that size happens")


def _deployment_line(dep: Deployment) -> str:
    line = (f"{dep.model.name} on {dep.gpus_label}"
            + (_split(dep) if dep.num_gpus > 1 and dep.engine.startswith("llama.cpp") else "")
            + ", weights "
            f"{dep.weights.label}, KV {dep.kv.id}, matmuls at {dep.matmuls_label}"
            + ("" if dep.flash_attention else ", no flash attention"))
    if dep.offload is not None:
        host = dep.offload.host_bandwidth_bytes_per_s
        line += f"; {dep.offload.describe(dep.model)}" + (
            f"; host memory {host / 1e9:,.1f} GB/s" if host else "")
    return line


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

    @classmethod
    def of(cls, dep: Deployment, batch: list[Seq], profile: EngineProfile) -> Expectation:
        cost = step_cost(dep, batch, profile)
        t = cost.time_s
        fast, slow = profile.band_s(t)
        low = min(t, max(fast, floor_time_s(dep, batch)))  # its fast edge never beats the floor
        return cls(profile.engine, t, low, slow, profile.source,
                   _expectation_steps(dep, batch, profile, cost), profile.compute_fitted)

    @classmethod
    def of_prefill(cls, dep: Deployment, prompt: int, batch: int,
                   profile: EngineProfile, ubatch: int | None = None) -> Expectation:
        """A prompt as the engine runs it: llama.cpp in n_ubatch-token ubatches (default
        512), each after the cache the ones before it filled (what `validate` scores); other
        engines in one pass."""
        given = ubatch is not None
        ubatch = ubatch or llamacpp_n_ubatch()
        if not dep.engine.startswith("llama.cpp") or prompt <= ubatch:
            return cls.of(dep, [Seq(prompt, 0)] * batch, profile)
        first = [Seq(ubatch, 0)]
        t = prefill_time(dep, profile, prompt, 0, batch, ubatch)
        ubatches = batch * -(-prompt // ubatch)
        head = tuple(replace(st, label=f"first ubatch: {st.label}") for st in
                     _expectation_steps(dep, first, profile, step_cost(dep, first, profile)))
        total = step("prefill in ubatches", "Σ over the ubatches of step_cost(ubatch, after "
                     "the tokens before it): each re-reads the weights and attends to a longer "
                     "cache", q("expected", t * 1e3, "ms"),
                     q("n_ubatch", ubatch, "tokens", "--ubatch-size" if given
                       else "llama.cpp default (-ub)"),
                     q("ubatches", ubatches, "", f"{batch} x ⌈{prompt:,} ÷ {ubatch}⌉"))
        floor = prefill_floor(dep, prompt, batch, ubatch).time_s
        fast, slow = profile.band_s(t)
        low = min(t, max(fast, floor))
        return cls(profile.engine, t, low, slow, profile.source, (*head, total),
                   profile.compute_fitted)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "time_s": self.time_s, "low_s": self.low_s,
                "high_s": self.high_s, "profile": self.source}


def _expectation_steps(dep: Deployment, batch: list[Seq], profile: EngineProfile,
                       cost: StepCost) -> tuple[Step, ...]:
    """The calibrated step: every operator at the engine's share of peak and bandwidth, plus
    the links, plus the engine's fixed costs."""
    by = {kind: sum(op.time_s for op in cost.ops if op.bound == kind)
          for kind in ("compute", "memory", "link", "overhead", "host")}
    prefill = cost.tokens > cost.sequences
    per_layer = profile.prefill_layer_overhead_s if prefill and \
        profile.prefill_layer_overhead_s is not None else profile.layer_overhead_s
    src = f"{profile.engine} profile"
    overhead = step("engine overhead", "per step + layers × per layer"
                    + (" (a step with prompt tokens: no CUDA graph)" if prefill else ""),
                    q("overhead", by["overhead"] * 1e3, "ms"),
                    overhead_q("per step", profile.step_overhead_s, src),
                    q("layers", dep.model.num_layers, "", "config.json num_hidden_layers"),
                    overhead_q("per layer", per_layer, src))
    total = step("expected step", "Σ operators max(FLOPs ÷ (peak × compute share), bytes ÷ "
                 "(bandwidth × bandwidth share)) + collectives + overhead",
                 q("expected", cost.time_s * 1e3, "ms"),
                 *share_qs(profile, dep),
                 q("compute-bound operators", by["compute"] * 1e3, "ms"),
                 q("memory-bound operators", by["memory"] * 1e3, "ms"),
                 q("collectives", by["link"] * 1e3, "ms"),
                 q("overhead", by["overhead"] * 1e3, "ms"),
                 *([q("host operators", by["host"] * 1e3, "ms", "below")] if by["host"] else []))
    steps = (overhead, total, *_host_step(dep, cost))
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


def _fit_dict(f: DecodeFloor | PrefillFloor) -> dict[str, Any]:
    return {"fits": f.fit.fits, "weight_bytes": f.fit.weight_bytes, "kv_bytes": f.fit.kv_bytes,
            "capacity_bytes": f.fit.capacity_bytes, "shortfall_bytes": f.fit.shortfall_bytes}


def _floor_dict(f: DecodeFloor, base: DecodeFloor, micro: int | None = None
                ) -> dict[str, Any]:
    """One point's floor; under pipeline parallelism its work figures (FLOPs, bytes read,
    intensity) are one ``micro``-batch's trip."""
    return {
        "batch": f.batch, "context": f.context, "step_time_s": f.step_time_s,
        "micro_batch": micro if micro is not None and micro != f.batch else None,
        "per_user_tok_s": f.per_user_tok_s, "aggregate_tok_s": f.aggregate_tok_s,
        "gain_over_batch_1": f.aggregate_tok_s / base.aggregate_tok_s,
        "per_user_vs_batch_1": f.per_user_tok_s / base.per_user_tok_s,
        "bound": f.bound, "flops": f.flops, "weight_bytes_read": f.weight_bytes_read,
        "kv_bytes_read": f.kv_bytes_read, "compute_time_s": f.compute_time_s,
        "memory_time_s": f.memory_time_s, "host_time_s": f.host_time_s,
        "intensity_flop_per_byte": f.intensity_flop_per_byte,
        **_fit_dict(f),
    }


@dataclass(frozen=True)
class DecodeReport:
    deployment: Deployment
    floors: tuple[tuple[DecodeFloor, DecodeFloor], ...]  # (this point, batch 1 at its context)
    expected: tuple[Expectation, ...]  # one per point
    pool_batch: tuple[tuple[int, int], ...] = ()  # (context, sequences the KV pool runs)
    cautions: tuple[str, ...] = ()  # what the expectation leaves out

    @property
    def steps(self) -> tuple[Step, ...]:
        f, base = self.floors[0]
        gain = () if f.batch == 1 else (step(
            "gain over batch 1", "aggregate ÷ batch 1's aggregate, at the same context",
            q("gain", f.aggregate_tok_s / base.aggregate_tok_s, "x"),
            q("aggregate", f.aggregate_tok_s, "tok/s", f"batch {f.batch:,}"),
            q("batch 1", base.aggregate_tok_s, "tok/s",
              f"one sequence at the same {f.context:,}-token context: 1 ÷ "
              f"{base.step_time_s * 1e3:,.4g} ms")),)
        return f.steps + gain + (self.expected[0].steps if self.engine_runs(f) else ())

    def engine_runs(self, f: DecodeFloor) -> bool:
        """Whether the engine can run this point: it fits, and the KV pool seats the batch."""
        seats = dict(self.pool_batch)
        return f.fit.fits and (f.context not in seats or f.batch <= seats[f.context])

    def why_not(self, f: DecodeFloor) -> str:
        if not f.fit.fits:
            return "does not fit"
        return f"pool holds {dict(self.pool_batch)[f.context]:,}"

    def to_dict(self) -> dict[str, Any]:
        points = []
        for (f, b), e in zip(self.floors, self.expected):
            point = _floor_dict(f, b, micro_batch(self.deployment, f.batch))
            price = self.deployment.accelerator.price_per_hour_usd
            point["expected"] = {**e.to_dict(), "per_user_tok_s": 1 / e.time_s,
                                 "aggregate_tok_s": f.batch / e.time_s,
                                 "usd_per_million_output_tokens": usd_per_million_tokens(
                                     None if price is None else price * self.deployment.num_gpus,
                                     f.batch / e.time_s)} \
                if self.engine_runs(f) else None
            points.append(point)
        return {"deployment": _deployment_line(self.deployment),
                "kind": "floor (the article's lower bound) and the engine's calibrated expectation",
                "points": points,
                "engine_max_batch": [{"context": c, "batch": b,
                                      "settings": _pool_settings(self.expected[0].engine)}
                                     for c, b in self.pool_batch],
                "cautions": list(self.cautions)}

    def text_lines(self) -> list[str]:
        unfit = [f for f, _ in self.floors if not f.fit.fits]
        lines: list[str] = []
        if unfit:
            worst = max(unfit, key=lambda f: f.fit.shortfall_bytes)
            lines.append(worst.fit.headline() + (f" (batch {worst.batch}, context "
                                                 f"{worst.context:,})" if len(self.floors) > 1
                                                 else ""))
        lines.append(_deployment_line(self.deployment))
        if len(self.floors) == 1:
            f, base = self.floors[0]
            e = self.expected[0]
            lines += [
                f"decode floor, batch {f.batch} at {f.context:,} {plural(f.context, 'token')} of context"
                + (":" if f.fit.fits else " (arithmetic only: no engine can run this):"),
                f"  step       {f.step_time_s * 1e3:,.2f} ms  (bound by {f.bound}: compute "
                f"{f.compute_time_s * 1e3:,.2f} ms, memory {f.memory_time_s * 1e3:,.2f} ms"
                + (f", then host {f.host_time_s * 1e3:,.2f} ms" if f.host_time_s else "") + ")",
                f"  reads      {f.weight_bytes_read / GB:,.1f} GB of weights + "
                f"{f.kv_bytes_read / GB:,.2f} GB of KV cache",
                f"  per user   {f.per_user_tok_s:,.1f} tok/s "
                f"({f.per_user_tok_s / base.per_user_tok_s:.0%} of batch 1)",
                f"  aggregate  {f.aggregate_tok_s:,.0f} tok/s "
                f"({f.aggregate_tok_s / base.aggregate_tok_s:,.1f}x batch 1)",
            ]
            if not f.fit.fits:
                return [*lines, *_no_expectation(self.deployment, e.engine),
                        *self._pool_lines()]
            if not self.engine_runs(f):
                return [*lines, _NOT_REACHED.format(engine=e.engine, batch=f.batch),
                        "  " + f.fit.headline(), *self._pool_lines()]
            lines += [
                f"expected on {e.engine}: {e.time_s * 1e3:,.2f} ms per step "
                f"({e.low_s * 1e3:,.2f}–{e.high_s * 1e3:,.2f}), {1 / e.time_s:,.1f} tok/s per "
                f"user, {f.batch / e.time_s:,.0f} in total  [{e.source}]",
                "  " + f.fit.headline(),
            ]
            return lines + self._pool_lines()
        rows = [[str(f.batch), f"{f.context:,}", f"{f.step_time_s * 1e3:,.2f}",
                 *([f"{e.time_s * 1e3:,.2f}", f"{e.low_s * 1e3:,.1f}–{e.high_s * 1e3:,.1f}",
                    f"{1 / e.time_s:,.1f}", f"{f.batch / e.time_s:,.0f}"] if self.engine_runs(f)
                   else [self.why_not(f), "", "", ""]),
                 f"{f.aggregate_tok_s / b.aggregate_tok_s:,.1f}x", bound_label(f.bound),
                 "yes" if f.fit.fits else "NO"]
                for (f, b), e in zip(self.floors, self.expected)]
        lines += table(rows, ["batch", "context", "floor ms", "expected ms", "band",
                              "tok/s/user", "tok/s total", "gain", "bound", "fits"])
        lines.append(f"expected: step_cost with the {self.expected[0].engine} profile "
                     f"[{self.expected[0].source}]; tok/s columns use the expectation, gain the "
                     "floor.")
        lines.append("Card output rises with batch; each user's speed falls, by how much "
                     "decided by context (the only term that grows).")
        lines += self._pool_lines()
        return lines

    def _pool_lines(self) -> list[str]:
        """The batch the engine's pool runs at each context, then what the expectation leaves
        out."""
        engine = self.expected[0].engine
        return [*self._seat_lines(engine), *(f"caution: {c}" for c in self.cautions)]

    def _seat_lines(self, engine: str) -> list[str]:
        from ridgeline.capacity import context_refusal

        # a batch run, as vLLM's offline LLM class sizes it (its defaults differ from serve's)
        fit = "`ridgeline fit --usage offline`" if engine == "vllm" else "`ridgeline fit`"
        slots = ""
        if engine.startswith("llama.cpp"):
            from ridgeline.memory import engine_defaults

            default = int(engine_defaults(engine)["n_parallel"])
            slots = f", given a slot each (-np; llama-server's default runs {default})"
        pool = f"{engine}'s KV pool" + (" (the offline LLM class's defaults, a batch run's)"
                                         if engine == "vllm" else "")
        return [f"{pool} runs at most {b:,} {plural(b, 'sequence')} at {c:,} "
                f"{plural(c, 'token')} of context{slots} ({fit} for the breakdown)" if b else
                context_refusal(self.deployment, c) or
                f"{engine} cannot hold one sequence of {c:,} {plural(c, 'token')} "
                f"beside these weights: it would refuse to start ({fit} for the breakdown)"
                for c, b in self.pool_batch]


def decode_report(dep: Deployment, batches: list[int], contexts: list[int],
                  profile: EngineProfile, enforce_eager: bool = False) -> DecodeReport:
    from ridgeline.capacity import engine_holds

    floors, expected = [], []
    held = [(c, engine_holds(dep, c, enforce_eager)) for c in contexts]
    pool_batch = tuple((c, n) for c, n in held if n is not None)
    for context in contexts:
        base = decode_floor(dep, 1, context)
        for b in batches:
            floors.append((pipelined_floor(dep, b, context), base))
            expected.append(Expectation.of(dep, decode_batch(micro_batch(dep, b), context),
                                           profile))
    from ridgeline.offload import offload_caution
    from ridgeline.predict import eager_caution

    cautions = (eager_caution(dep) if enforce_eager else "", context_caution(dep, max(contexts)),
                offload_caution(dep), split_caution(dep), dep.model.architecture_caution,
                micro_batch_caution(dep))
    return DecodeReport(dep, tuple(floors), tuple(expected), pool_batch,
                        tuple(c for c in cautions if c))


def pipelined_floor(dep: Deployment, batch: int, context: int) -> DecodeFloor:
    """A decode step of ``batch`` sequences; under a serving engine's pipeline parallelism
    the batch runs as micro-batches, one in each stage, so a token's step is one
    micro-batch's trip through every stage (the floor of ⌈batch ÷ PP⌉ sequences) while the
    memory check is the whole batch's."""
    micro = micro_batch(dep, batch)
    whole = decode_floor(dep, batch, context)
    if micro == batch:
        return whole
    trip = decode_floor(dep, micro, context)
    steps = [st for st in trip.steps if st.label != "aggregate speed"]
    return replace(trip, batch=batch, fit=whole.fit, steps=(
        step("micro-batch", "⌈batch ÷ pipeline stages⌉: each stage multiplies one at a time, "
             "the others in flight in the other stages; the steps below are one "
             "micro-batch's trip through every stage", q("micro-batch", micro),
             q("batch", batch), q("stages", micro_batches(dep))), *steps,
        step("aggregate speed", "batch ÷ a micro-batch's trip (every stage busy with one)",
             q("aggregate", batch / trip.step_time_s, "tok/s"))))


def micro_batch_caution(dep: Deployment) -> str:
    """How a pipeline-parallel row is priced, or ""."""
    pp = micro_batches(dep)
    if pp == 1:
        return ""
    return (f"pipeline parallel: a batch runs as {pp} micro-batches, one in each stage; a "
            f"token's step is one micro-batch's trip through all {pp} stages, and the total "
            "is the whole batch's tokens over it (as `simulate -pp` runs it)")


def split_caution(dep: Deployment) -> str:
    """What to say of llama.cpp's row and tensor splits, or ""."""
    if not dep.engine.startswith("llama.cpp") or dep.tensor_parallel_size == 1:
        return ""
    return ("llama.cpp's -sm tensor is priced as tensor parallelism (an all-reduce per "
            "layer over the cards' link); no measurement here checks it")


def context_caution(dep: Deployment, tokens: int) -> str:
    """What to say of a context past the model's trained length, or ""."""
    return trained_context_caution(dep.model.name, dep.model.max_position_embeddings, tokens)




def _pool_settings(engine: str) -> str:
    """The settings decode and prefill size an engine's pool under."""
    if engine == "vllm":
        return "offline defaults"
    return "one slot per sequence (-np)" if engine.startswith("llama.cpp") else "defaults"


def _dollars_per_million(dep: Deployment, tok_s: float) -> str:
    price = dep.accelerator.price_per_hour_usd
    cost = usd_per_million_tokens(None if price is None else price * dep.num_gpus, tok_s)
    return "no price" if cost is None else f"${cost:,.2f}"


@dataclass(frozen=True)
class _ByCard:
    """One question's reports on several cards: --explain steps labelled with the card, and
    each card's own JSON with its id and catalog price."""

    reports: tuple[DecodeReport | PrefillReport, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{r.deployment.accelerator.id}: {st.label}")
                     for r in self.reports for st in r.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"accelerators": [
            {"accelerator": r.deployment.accelerator.id,
             "price_per_device_hour_usd": r.deployment.accelerator.price_per_hour_usd,
             "ridge_flop_per_byte": r.deployment.dense_ridge_flop_per_byte,
             **r.to_dict()} for r in self.reports]}


@dataclass(frozen=True)
class DecodeComparison(_ByCard):
    """The same model, batch and context on several accelerators, side by side."""

    reports: tuple[DecodeReport, ...]

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        d = first.deployment
        rows = []
        for r in self.reports:
            for (f, _), e in zip(r.floors, r.expected):
                runs = r.engine_runs(f)
                rows.append([r.deployment.gpus_label,
                             str(f.batch), f"{f.context:,}", f"{f.step_time_s * 1e3:,.2f}",
                             f"{e.time_s * 1e3:,.2f}" if runs else r.why_not(f),
                             f"{1 / e.time_s:,.1f}" if runs else "",
                             f"{f.batch / e.time_s:,.0f}" if runs else "",
                             _dollars_per_million(r.deployment, f.batch / e.time_s)
                             if runs else "",
                             f"{r.deployment.dense_ridge_flop_per_byte:,.0f}",
                             bound_label(f.bound)])
        cautions = dict.fromkeys(c for r in self.reports for c in r.cautions)
        from ridgeline.offload import placement_lines

        engines = ", ".join(dict.fromkeys(r.expected[0].engine for r in self.reports))
        return [f"{d.model.name}, weights {d.weights.label}, KV {d.kv.id}, decode on "
                f"{engines}: one row per accelerator, batch and context", "",
                *table(rows, ["accelerator", "batch", "context", "floor ms", "expected ms",
                              "tok/s/user", "tok/s total", "$/M tok", "ridge", "bound"]),
                *placement_lines([r.deployment for r in self.reports]),
                "", "expected: each card's step_cost with the engine's calibrated profile; "
                "$/M tok: the catalog's price per device-hour over the output tokens of a "
                "steady batch (no prefill); `--gpu NAME` alone for one card's breakdown",
                *(f"caution: {c}" for c in cautions)]


@dataclass(frozen=True)
class PrefillReport:
    deployment: Deployment
    floor: PrefillFloor
    expected: Expectation
    ubatch: int | None = None  # llama.cpp -ub, where given
    pool_batch: int | None = None  # prompts of this length the serving engine's pool holds

    @property
    def runs(self) -> bool:
        """Whether the engine runs this prefill at once: it fits, and the serving engine's
        pool holds the batch's prompts (as decode asks of its batch)."""
        return self.floor.fit.fits and (self.pool_batch is None
                                        or self.pool_batch >= self.floor.batch)

    @property
    def cautions(self) -> list[str]:
        out = [context_caution(self.deployment, self.floor.prompt_len)]
        o = self.deployment.offload
        step = min(self.ubatch or llamacpp_n_ubatch(), self.floor.prompt_len)
        from ridgeline.offload import op_offload_min_batch

        if o is not None and o.moves_weights(self.deployment.model.num_layers) \
                and step < op_offload_min_batch():
            out.append(f"ubatches of {step} tokens run the host's layers on the CPU, whose "
                       "arithmetic is not priced (only its memory traffic): read the "
                       "expectation as a lower bound")
        dep = self.deployment
        if dep.engine.startswith("llama.cpp") and dep.pipeline_parallel_size > 1 \
                and self.floor.prompt_len * self.floor.batch > step:
            out.append(f"the ubatches' overlap over {dep.pipeline_parallel_size} stages is "
                       "llama.cpp's ideal: on 8 x A100 its pipelining PR (#6017) measured a "
                       "2,048-token prompt about a quarter under it (validation/pipeline.csv), so "
                       "read the expectation as optimistic, the more so the more stages")
        if self.runs and not self.expected.compute_fitted:
            out.append(f"the {self.expected.engine} profile was fitted on decode rows only: its "
                       "compute efficiency is the prior's, and its band is decode's, not a "
                       "prompt's (calibrate with prefill or TTFT rows to fit it)")
        return [c for c in out if c]

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.floor.steps + (self.expected.steps if self.runs else ())

    def to_dict(self) -> dict[str, Any]:
        f = self.floor
        return {"deployment": _deployment_line(self.deployment),
                "kind": "floor (the article's lower bound: time_s, tokens_per_s) and the "
                "engine's calibrated expectation (expected)", "prompt_len": f.prompt_len,
                "batch": f.batch, "time_s": f.time_s, "tokens_per_s": f.tokens_per_s,
                "bound": f.bound, "flops": f.flops, "bytes_moved": f.bytes_moved,
                "intensity_flop_per_byte": f.intensity_flop_per_byte,
                "weight_intensity_flop_per_byte": f.weight_intensity_flop_per_byte,
                "expected": {**self.expected.to_dict(), "tokens_per_s": f.batch * f.prompt_len
                             / self.expected.time_s} if self.runs else None,
                "engine_max_batch": self.pool_batch,
                "cautions": self.cautions, **_fit_dict(f)}

    def text_lines(self) -> list[str]:
        f, dep, e = self.floor, self.deployment, self.expected
        ridge = f"ridge {dep.dense_ridge_flop_per_byte:,.0f}"
        step_ridge = ridge_point(dep.peak_flops_per_s, dep.bandwidth_bytes_per_s)
        if dep.compute_dtype != dep.dense_compute_dtype:  # gpt-oss: bf16 attention, fp4 experts
            ridge += f" at {dep.dense_compute_dtype}, {step_ridge:,.0f} at {dep.compute_dtype}"
        lines = [] if f.fit.fits else [f.fit.headline()]
        lines += [
            _deployment_line(self.deployment),
            f"prefill floor, {f.batch} x {f.prompt_len:,}-token prompt"
            + (":" if self.runs else " (arithmetic only: no engine can run this):"
               if not f.fit.fits else f" (arithmetic only: {e.engine} would not run this):"),
            f"  time       {f.time_s * 1e3:,.1f} ms (bound by {f.bound}) = TTFT floor",
            # a deployment that cannot run gets no throughput, as decode gives it none
            f"  throughput {f.tokens_per_s:,.0f} prompt tok/s" if self.runs else
            "  throughput none: it does not run",
            f"  intensity  {f.weight_intensity_flop_per_byte:,.0f} FLOP per byte of weights, "
            f"{f.intensity_flop_per_byte:,.0f} over all bytes ({ridge})",
        ]
        lines += [f"caution: {c}" for c in self.cautions]
        if not f.fit.fits:
            return [*lines, *_no_expectation(self.deployment, e.engine)]
        if not self.runs:
            from ridgeline.capacity import context_refusal

            fit = "`ridgeline fit --usage offline`" if e.engine == "vllm" else "`ridgeline fit`"
            held = self.pool_batch or 0
            return [*lines, f"expected on {e.engine}: nothing: " + (
                context_refusal(self.deployment, f.prompt_len) or
                f"{e.engine} cannot hold one {f.prompt_len:,}-token prompt beside these weights: "
                f"it would refuse to start ({fit} for the breakdown)" if not held else
                f"its KV pool holds {held:,} {plural(held, 'prompt')} of {f.prompt_len:,} tokens "
                f"at once, not {f.batch:,} ({fit} for the breakdown)")]
        return [*lines,
                f"expected on {e.engine}: {e.time_s * 1e3:,.1f} ms ({e.low_s * 1e3:,.1f}–"
                f"{e.high_s * 1e3:,.1f}) = TTFT, {f.batch * f.prompt_len / e.time_s:,.0f} prompt "
                f"tok/s  [{e.source}]"]


@dataclass(frozen=True)
class PrefillComparison(_ByCard):
    """The same prompt on several accelerators: floor and expected time to first token."""

    reports: tuple[PrefillReport, ...]

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        d, f0 = first.deployment, first.floor
        rows = []
        for r in self.reports:
            f, e = r.floor, r.expected
            tokens = f.batch * f.prompt_len
            rows.append([r.deployment.gpus_label,
                         f"{f.time_s * 1e3:,.1f}",
                         f"{e.time_s * 1e3:,.1f}" if r.runs else
                         "pool too small" if f.fit.fits else "does not fit",
                         f"{tokens / e.time_s:,.0f}" if r.runs else "",
                         f"{r.deployment.dense_ridge_flop_per_byte:,.0f}", bound_label(f.bound)])
        from ridgeline.offload import placement_lines

        return [f"{d.model.name}, weights {d.weights.label}: {f0.batch} x {f0.prompt_len:,}-token "
                f"prompt on {', '.join(dict.fromkeys(r.expected.engine for r in self.reports))}, "
                "one row per accelerator", "",
                *table(rows, ["accelerator", "floor ms", "expected TTFT ms", "prompt tok/s",
                              "ridge", "bound"]),
                *placement_lines([r.deployment for r in self.reports]),
                "", "`--gpu NAME` alone for one card's breakdown"]

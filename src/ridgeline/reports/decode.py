"""`ridgeline decode`: the article's decode floor, one division each, beside what the engine
is expected to take, for one card or several side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ridgeline.capacity import EngineSeats, default_slots
from ridgeline.cost import (
    decode_batch,
)
from ridgeline.cpu_offload import cpu_offload_json
from ridgeline.data_parallel import data_parallel_cautions
from ridgeline.decode_context import dcp_caution
from ridgeline.dense_ridge import dense_ridge_steps, ridge_batch_step
from ridgeline.deployment import Deployment
from ridgeline.drafter_memory import drafter_rank_bytes
from ridgeline.engine_names import engine_name
from ridgeline.engine_runs import (
    decode_none_reason,
    no_sequence_clause,
    none_code,
    seated,
    seats_knob,
)
from ridgeline.engine_versions import engine_release
from ridgeline.engines import EngineProfile
from ridgeline.explain import Step, q, step
from ridgeline.floors import DecodeFloor, bound_label, decode_floor
from ridgeline.layouts import ATTENTION_MIXERS, CHUNKED, FULL, SLIDING, WINDOW_MIXERS
from ridgeline.memory import EngineSettings, loaded_vision_bytes
from ridgeline.model import Layer, ModelSpec
from ridgeline.offload import offload_json
from ridgeline.parallel import deployment_cross_node_caution
from ridgeline.raw_fit import FitCheck, as_served
from ridgeline.render import table
from ridgeline.reports.expectation import (
    ByCard,
    Expectation,
    context_caution,
    deployment_line,
    expected_speed_steps,
    fit_dict,
    floor_heading_end,
    no_expectation,
)
from ridgeline.reports.graph_explain import graph_step
from ridgeline.reports.identity import card_price_json, identity_json
from ridgeline.reports.refusal_headline import DECODE, Row, refusal_headline
from ridgeline.reports.refusal_steps import engine_check_step, refusal_steps
from ridgeline.roofline import first_whole_batch
from ridgeline.side_by_side import NotRun, not_run_dict, weights_by_engine
from ridgeline.spec_decode import SpecDecode, SpecStep, spec_step
from ridgeline.stages import micro_batch, micro_batches
from ridgeline.step_work import weight_bytes_read
from ridgeline.units import (
    GB,
    GIB,
    MIB,
    fmt_share,
    fmt_total_tok_s,
    plural,
    usd_per_million_tokens,
)
from ridgeline.vllm_mla_cache import per_head_caution


def _floor_dict(f: DecodeFloor, base: DecodeFloor, micro: int | None,
                runs: bool) -> dict[str, Any]:
    """One point's floor, under ``floor_`` keys where a figure is a time or a speed (the
    point's own step_time_s and speeds are the engine's expectation, as the text's columns);
    under pipeline parallelism its work figures (FLOPs, bytes read, intensity) are one
    ``micro``-batch's trip. Where the engine does not run the point (``runs`` False: it does
    not fit, or the engine refuses its length or will not run the batch at once) the floor's
    speeds are null, as the text prints none; its step time stays, the what-if arithmetic."""
    return {
        "floor_step_time_s": f.step_time_s,
        "micro_batch": micro if micro is not None and micro != f.batch else None,
        # a point the engine does not run has a step's arithmetic, not a speed
        "floor_per_user_tok_s": f.per_user_tok_s_if_fits if runs else None,
        "floor_aggregate_tok_s": f.aggregate_tok_s_if_fits if runs else None,
        # the text's "floor gain": the floor's aggregate over batch 1's, and each user's share
        "floor_gain_over_batch_1": f.aggregate_tok_s / base.aggregate_tok_s,
        "floor_per_user_vs_batch_1": f.per_user_tok_s / base.per_user_tok_s,
        "bound": f.bound, "flops": f.flops, "weight_bytes_read": f.weight_bytes_read,
        "kv_bytes_read": f.kv_bytes_read, "compute_time_s": f.compute_time_s,
        "memory_time_s": f.memory_time_s, "host_time_s": f.host_time_s,
        "intensity_flop_per_byte": f.intensity_flop_per_byte,
        **fit_dict(f),
    }


@dataclass(frozen=True)
class DecodeReport:
    deployment: Deployment
    floors: tuple[tuple[DecodeFloor, DecodeFloor], ...]  # (this point, batch 1 at its context)
    expected: tuple[Expectation, ...]  # one per point
    seats: tuple[EngineSeats, ...] = ()  # what the engine runs at each context
    cautions: tuple[str, ...] = ()  # what the expectation leaves out
    profile: EngineProfile | None = field(default=None, compare=False)  # the expectation's
    pool_settings: str = ""  # the engine settings the pool is sized under ("": the defaults)
    spec: tuple[SpecStep, ...] = ()  # --spec-tokens: one verify step per point (spec_decode.py)
    # llama.cpp where the answer's run set the build's default --fit aside (-ngl all's: a batch
    # asked needs weights on the host) or --fit found no placement: what llama-server runs at
    # each context as --fit starts it (fit's -np lever), one count whatever the batches asked,
    # which the max-batch line gives; ``seats`` stays the priced run's (with_fit_seats)
    fit_seats: tuple[EngineSeats, ...] = ()
    fit_pool_settings: str = ""  # the settings fit_seats were sized under
    engine_version: str | None = None  # whose rules sized the pool (--engine-version)
    # where the engine refuses to start at its max_model_len (start_refused): the same points
    # at the longest --max-model-len that starts, which the refusal suggests (at_longest_start)
    at_longest: DecodeReport | None = field(default=None, compare=False)
    # its working: the longest --max-model-len that starts, and at it each context's pool
    # (refusal_steps.py), heading at_longest's first block
    refusal_working: tuple[Step, ...] = field(default=(), compare=False)

    @property
    def line_seats(self) -> tuple[EngineSeats, ...]:
        """The seats the max-batch line and the JSON's engine_max_batch give: fit_seats where
        set, else the priced run's."""
        return self.fit_seats or self.seats

    @property
    def pool_batch(self) -> tuple[tuple[int, int], ...]:
        """(context, sequences the engine runs) where it has a memory model."""
        return tuple((s.context, s.held) for s in self.seats if s.held is not None)

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(st for _, group in self.step_groups for st in group)

    @property
    def step_groups(self) -> tuple[tuple[str, tuple[Step, ...]], ...]:
        """One block of working per point, headed by its batch and context (the renderer
        heads the blocks where there are several)."""
        return tuple((f"batch {f.batch:,} at {f.context:,} {plural(f.context, 'token')} of "
                      "context", self._point_steps(f, base, e))
                     for (f, base), e in zip(self.floors, self.expected)) \
            + self._longest_step_groups()

    def _longest_step_groups(self) -> tuple[tuple[str, tuple[Step, ...]], ...]:
        """The expectation of each point at_longest runs, headed by the --max-model-len it
        starts at: its expected step, speeds and the sequences its pool runs."""
        r = self.at_longest
        if r is None or r.started_at is None:
            return ()
        groups = tuple((f"at --max-model-len {r.started_at:,}, batch {f.batch:,} at "
                        f"{f.context:,} {plural(f.context, 'token')} of context",
                        e.steps + expected_speed_steps(e, f.batch) + r._seat_steps(f))
                       for (f, _), e in zip(r.floors, r.expected) if r.engine_runs(f))
        if not groups or not self.refusal_working:
            return groups
        (heading, first), rest = groups[0], groups[1:]
        return ((heading, self.refusal_working + first), *rest)

    @property
    def started_at(self) -> int | None:
        """The max_model_len the serving engine's seats were started at (one for all the
        contexts), or None."""
        return next((s.max_model_len for s in self.seats if s.max_model_len), None)

    @property
    def card_step_groups(self) -> tuple[tuple[str, tuple[Step, ...]], ...]:
        """step_groups with the $/M tok column's division after each priced point's speeds,
        as the card table prints it (DecodeComparison)."""
        return tuple((heading, group + self._cost_steps(f, e))
                     for (heading, group), (f, _), e
                     in zip(self.step_groups, self.floors, self.expected))

    def _cost_steps(self, f: DecodeFloor, e: Expectation) -> tuple[Step, ...]:
        """The $/M tok column: the card's price per hour over the tokens an hour the expected
        aggregate gives (none where the engine does not run the point or the card has no
        price): an H200 at $4.54/h and 4,078 tok/s, 14.68 M tokens an hour: $0.31 a million."""
        dep = self.deployment
        price = dep.accelerator.price_per_hour_usd
        if price is None or not self.engine_runs(f):
            return ()
        per_hour = price * dep.num_gpus
        tokens_m = f.batch / e.time_s * 3600 / 1e6
        return (step("cost per million output tokens", "price per hour ÷ millions of output "
                     "tokens an hour (expected aggregate × 3,600 s)",
                     q("$/M tok", per_hour / tokens_m, "$"),
                     q("price", per_hour, "$/h", f"{dep.num_gpus} x {dep.accelerator.id} at "
                       f"${price:g} a device-hour, the catalog's"),
                     q("output", tokens_m, "M tok/h", f"{f.batch / e.time_s:,.0f} tok/s × "
                       "3,600 s")),)

    def _point_steps(self, f: DecodeFloor, base: DecodeFloor, e: Expectation
                     ) -> tuple[Step, ...]:
        """One point's working: its floor, its gain over batch 1 at the same context, and the
        engine's expectation where the engine runs it. A point that does not fit the memory
        gets the step's arithmetic without the speeds it would give; one that fits but the
        engine does not run (a start it refuses, a batch past its pool) keeps the floor's
        speeds, the article's arithmetic, and an engine check saying it does not run there."""
        seats = self._seat_steps(f)
        if not f.fit.fits:  # the step's arithmetic, without the speeds it would give
            share = step("per-user speed as a share of batch 1's", "batch 1's step ÷ this step, "
                         "at the same context (the per-user speeds' ratio; neither runs as a "
                         "speed)", q("share", f.per_user_tok_s / base.per_user_tok_s),
                         q("batch 1's step", base.step_time_s * 1e3, "ms"),
                         q("step", f.step_time_s * 1e3, "ms"))
            return tuple(s for s in f.steps if s.result.unit != "tok/s") + (f.fit.explain_step(),) + (
                () if f.batch == 1 else (share, step(
                    "gain over batch 1", "batch × batch 1's step ÷ this step, at the same "
                    "context (the output's ratio; neither runs as a speed)",
                    q("gain", f.aggregate_tok_s / base.aggregate_tok_s, "x"),
                    q("batch", f.batch), q("batch 1's step", base.step_time_s * 1e3, "ms"),
                    q("step", f.step_time_s * 1e3, "ms")))) + seats
        share = step("per-user speed as a share of batch 1's", "per-user speed ÷ batch 1's, at the same "
                     "context (the floor's)", q("share", f.per_user_tok_s / base.per_user_tok_s),
                     q("per user", f.per_user_tok_s, "tok/s", f"batch {f.batch:,}"),
                     q("batch 1", base.per_user_tok_s, "tok/s"))
        gain = (share,) if f.batch == 1 else (share, step(
            "gain over batch 1", "aggregate ÷ batch 1's aggregate, at the same context",
            q("gain", f.aggregate_tok_s / base.aggregate_tok_s, "x"),
            q("aggregate", f.aggregate_tok_s, "tok/s", f"batch {f.batch:,}"),
            q("batch 1", base.aggregate_tok_s, "tok/s",
              f"one sequence at the same {f.context:,}-token context: 1 ÷ "
              f"{base.step_time_s * 1e3:,.4g} ms")),)
        if not self.engine_runs(f):  # the floor's arithmetic stands; the engine says no
            return f.steps + gain + (f.fit.explain_step(), *seats, engine_check_step(
                engine_name(e.engine), f.batch, self._seat(f.context).held or 0, "sequences",
                self.none_reason(f)))
        return f.steps + gain + (f.fit.explain_step(),) + e.steps + expected_speed_steps(e, f.batch) \
            + self._verify_graph_steps(f) + seats

    def _seat_steps(self, f: DecodeFloor) -> tuple[Step, ...]:
        """The sequences the engine's pool runs at this point's context, as the text's "runs
        at most N sequences" line gives them: min(the pool's conversations, the seats)."""
        seat = next((s for s in self.seats if s.context == f.context), None)
        slots = next((s for s in self.line_seats if s.context == f.context), None)
        if slots is not None and slots.default_slots:  # the slots the pool holds, then 4
            return (_slot_search_step(replace(slots, held=slots.pool_held),
                                      self._seats_knob()),
                    step(f"sequences llama-server runs at {f.context:,} tokens",
                         "min(slots the pool holds a sequence each, its default -np)",
                         q("sequences", slots.held or 0),
                         q("slots the pool holds", slots.pool_held or 0),
                         q("default -np", slots.seat_limit or 0, "",
                           "llama-server's -np auto (PR #16736); --parallel N raises it")))
        if slots is not None and slots.held and slots.slots_pool_held is not None:
            return (_slot_search_step(slots, self._seats_knob()),)
        if seat is None or not seat.held or seat.seat_limit is None or seat.pool_held is None:
            return ()
        return (step(f"sequences the engine runs at {f.context:,} tokens",
                     f"min(conversations its KV pool holds, {self._seats_knob()})",
                     q("sequences", seat.held),
                     q("pool holds", seat.pool_held, "", f"started at "
                       f"{settings_knob(self.expected[0].engine, 'max_model_len')} "
                       f"{seat.max_model_len:,}" if seat.max_model_len else ""),
                     q(self._seats_knob(), seat.seat_limit)),)

    def _verify_graph_steps(self, f: DecodeFloor) -> tuple[Step, ...]:
        """With --spec-tokens, the verify step's CUDA graph where it ran padded or ungraphed
        (graph_explain.graph_step, as the step cost priced it: SpecStep.verify_graph_tokens)."""
        if not self.spec:
            return ()
        s = self._spec_at(f)
        tokens, sequences = s.verify_shape
        return graph_step(self.deployment, tokens, sequences, s.verify_graph_tokens,
                          "verify step's CUDA graph")

    def engine_runs(self, f: DecodeFloor) -> bool:
        """Whether the engine can run this point: it fits, and the KV pool seats the batch
        (engine_runs.seated, as DecodeFloor.engine_runs asks it at the defaults)."""
        return seated(f.fit.fits, self._seat_or_none(f.context), f.batch)

    def _seat_or_none(self, context: int) -> EngineSeats | None:
        return next((s for s in self.seats if s.context == context), None)

    @property
    def priced(self) -> bool:
        """Whether the engine runs any point asked, so that the row has an expected time."""
        return any(self.engine_runs(f) for f, _ in self.floors)

    @property
    def expectation_cautions(self) -> tuple[str, ...]:
        """The cautions that speak only of the expected times on this card: the profile's rows
        on its class of card (a GeForce's, where the bundled profile saw none), the batches it
        saw there, and the track record's rows; nothing to say where no point is priced."""
        from ridgeline.track_record import track_record_caution

        if self.profile is None:
            return ()
        acc, batch = self.deployment.accelerator, max(f.batch for f, _ in self.floors)
        return tuple(c for c in (self.profile.calibration_caution(acc),
                                 self.profile.batch_range_caution(acc, batch),
                                 track_record_caution(self.deployment, "decode", self.profile))
                     if c)

    def fit_runs(self, f: DecodeFloor) -> bool:
        """Whether llama-server's default --fit runs this point's batch at its context where
        the priced run (-ngl all's) does not fit it: fit_seats, sized as --fit starts it."""
        return any(s.context == f.context and (s.held or 0) >= f.batch for s in self.fit_seats)

    def _seat(self, context: int) -> EngineSeats:
        return next(s for s in self.seats if s.context == context)

    def why_not(self, f: DecodeFloor) -> str:
        """The table's word for a point the engine does not run."""
        if not f.fit.fits:
            return "does not fit"
        seat = self._seat(f.context)
        if seat.held == 0:
            # a context the engine refuses outright (past the model's positions or the
            # --max-model-len given) says so, not that an empty pool stops it
            return ("won't start" if seat.start_refused else "too long" if seat.refusal
                    else "pool holds 0")
        return f"runs ≤ {seat.held:,}"

    def none_reason(self, f: DecodeFloor) -> str:
        """Why the engine gives this point no expectation, as the text says it (and the JSON
        carries it); "" where it runs (engine_runs.decode_none_reason)."""
        if self.engine_runs(f):
            return ""
        return decode_none_reason(f.fit, self._seat(f.context), f.batch, f.context,
                                  self.expected[0].engine, not self.pool_settings)

    def none_code(self, f: DecodeFloor) -> str:
        """none_reason's kind, for a program: does_not_fit, over_engine_pool (a batch past
        the seats) or engine_runs_none (no sequence of this context: a refusal to start, a
        length refused); "" where it runs (engine_runs.none_code)."""
        return none_code(f.fit.fits, self._seat_or_none(f.context), f.batch)

    def _none_clause(self, seat: EngineSeats) -> str:
        """Why the engine runs no sequence of this context, naming the settings' mode."""
        return no_sequence_clause(seat, self.expected[0].engine, not self.pool_settings)

    def point_dict(self, f: DecodeFloor, base: DecodeFloor, e: Expectation) -> dict[str, Any]:
        """One point as --json gives it, every point the same keys: step_time_s and the
        speeds are the engine's expectation, the text's tok/s columns (null, with the reason,
        where it would not run the point); the floor's under floor_ keys. Llama-3.1-8B on an
        H100, batch 1 at 2,000 tokens: 125.8 tok/s a user expected, 219.3 the floor's."""
        runs = self.engine_runs(f)
        price = self.deployment.accelerator.price_per_hour_usd
        expected = {**e.to_dict(), "per_user_tok_s": 1 / e.time_s,
                    "aggregate_tok_s": f.batch / e.time_s,
                    "usd_per_million_output_tokens": usd_per_million_tokens(
                        None if price is None else price * self.deployment.num_gpus,
                        f.batch / e.time_s)} if runs else None
        # the conversation's length as context_len, every command's name for it
        return {"batch": f.batch, "context_len": f.context, "engine_runs": runs,
                "step_time_s": None if expected is None else expected["time_s"],
                "per_user_tok_s": None if expected is None else expected["per_user_tok_s"],
                "aggregate_tok_s": None if expected is None else expected["aggregate_tok_s"],
                "expected_none_reason": self.none_reason(f) or None,
                "expected_none_code": self.none_code(f) or None,
                **_floor_dict(f, base, micro_batch(self.deployment, f.batch), runs),
                # weight_bytes_read is the busiest GPU's read × the expert-parallel ranks;
                # null where the GPUs read that between them
                "weight_bytes_read_in_all": self.weights_read_in_all(f),
                "expected": expected,
                "speculative": self._spec_at(f).to_dict() if runs and self.spec else None}

    def to_dict(self) -> dict[str, Any]:
        points = [self.point_dict(f, b, e) for (f, b), e in zip(self.floors, self.expected)]
        # the release the pool was sized as, named where none was given too (fit's)
        return {**identity_json(self.deployment, self.engine_version),
                **card_price_json(self.deployment),
                "deployment": deployment_line(self.deployment),
                "decode_context_parallel_size": self.deployment.decode_context_parallel_size,
                "cpu_offload": cpu_offload_json(self.deployment).get("cpu_offload"),
                # llama.cpp's layers in host memory (-ngl, --n-cpu-moe), or null
                "offload": offload_json(self.deployment),
                "kind": "step_time_s, per_user_tok_s, aggregate_tok_s: the engine's calibrated "
                "expectation, as the text's columns (null where it would not run the point: "
                "expected_none_reason); floor_*: the article's lower bound",
                "points": points,
                "engine_max_batch": [{"context_len": s.context, "engine_max_batch": s.held,
                                      "max_model_len": s.max_model_len,
                                      # min(conversations, max_num_seqs) where it
                                      # runs: the pool's count and the seats, fit's names
                                      "conversations": s.pool_held,
                                      "max_num_seqs": s.seat_limit,
                                      "settings": json_pool_settings(
                                          self.expected[0].engine, self._line_settings),
                                      "reason": self._none_clause(s) if s.held == 0 else None,
                                      # the -ngl all run the points are priced under (llama.cpp
                                      # where --fit starts another: fit_seats)
                                      "priced_run_batch": self.priced_held(s.context)}
                                     for s in self.line_seats if s.held is not None],
                "at_max_model_len": self._longest_dict(),
                "cautions": list(self.cautions)}

    def _longest_dict(self) -> dict[str, Any] | None:
        """at_longest's points' expectations and max batch, ``at_max_model_len``'s value
        (null where the engine starts at its max_model_len)."""
        r = self.at_longest
        if r is None:
            return None
        whole = r.to_dict()
        keys = ("batch", "context_len", "engine_runs", "step_time_s", "per_user_tok_s",
                "aggregate_tok_s", "expected", "expected_none_reason", "expected_none_code")
        return {"max_model_len": r.started_at,
                "points": [{k: point[k] for k in keys} for point in whole["points"]],
                "engine_max_batch": whole["engine_max_batch"]}

    def text_lines(self) -> list[str]:
        lines = self._headline()
        lines.append(deployment_line(self.deployment))
        if len(self.floors) == 1:
            f, base = self.floors[0]
            e = self.expected[0]
            runs = self.engine_runs(f)
            # as prefill says it: a point that fits but the engine would not run has the
            # floor's speeds, said to be the floor's
            lines += [
                f"decode floor, batch {f.batch:,} at {f.context:,} {plural(f.context, 'token')} of context"
                + floor_heading_end(runs, f.fit.fits, self.fit_runs(f), e.engine),
                f"  step       {f.step_time_s * 1e3:,.2f} ms  (bound by {f.bound}: compute "
                f"{f.compute_time_s * 1e3:,.2f} ms, memory {f.memory_time_s * 1e3:,.2f} ms"
                + (f", then host {f.host_time_s * 1e3:,.2f} ms" if f.host_time_s else "") + ")",
                f"  reads      {f.weight_bytes_read / GB:,.1f} GB of weights"
                + self._ep_read_note(f) + f" + {f.kv_bytes_read / GB:,.2f} GB of KV cache"
                + (f" + {f.lora_bytes / GB:,.2f} GB of LoRA adapters" if f.lora_bytes else "")
                + (" on each data-parallel rank" if self.deployment.data_parallel_size > 1
                   else ""),
            ]
            if not f.fit.fits:  # a step's arithmetic, but no speed: the batch cannot run
                return [*lines, "  tok/s      none: the batch does not fit in memory",
                        *self._gain_line(f, base),
                        *no_expectation(self.deployment, e.engine, self.cautions),
                        *self._pool_lines()]
            if not runs:  # as a batch that does not fit: the verdict leads, and no speed
                held = self._seat(f.context).held  # none: the verdict says why, and not again
                engine = engine_name(e.engine)
                return [*lines,
                        f"  tok/s      none: {engine} would not run "
                        + ("this batch at once" if held else "it") + " (first line)",
                        *self._gain_line(f, base),
                        f"expected on {self._priced_as}: nothing (first line)",
                        "  " + _memory_only(f.fit.headline(), engine),
                        *self._longest_point_line(),
                        *self._pool_lines(None if held else f.context)]
            lines += [
                f"  per user   {f.per_user_tok_s:,.1f} tok/s "
                f"({fmt_share(f.per_user_tok_s / base.per_user_tok_s)} of batch 1)",
                f"  aggregate  {fmt_total_tok_s(f.aggregate_tok_s)} tok/s "
                f"({f.aggregate_tok_s / base.aggregate_tok_s:,.1f}x batch 1)",
            ]
            lines += [
                f"expected on {self._priced_as}: {e.time_s * 1e3:,.2f} ms per step "
                f"({e.low_s * 1e3:,.2f}–{e.high_s * 1e3:,.2f}), {1 / e.time_s:,.1f} tok/s per "
                f"user, {fmt_total_tok_s(f.batch / e.time_s)} in total  [{e.source}]",
                *self._spec_lines(),
                "  " + f.fit.headline(),
            ]
            return lines + self._pool_lines()
        rows = [[f"{f.batch:,}", f"{f.context:,}", f"{f.step_time_s * 1e3:,.2f}",
                 *([f"{e.time_s * 1e3:,.2f}", f"{e.low_s * 1e3:,.1f}–{e.high_s * 1e3:,.1f}",
                    f"{1 / e.time_s:,.1f}", fmt_total_tok_s(f.batch / e.time_s)]
                   if self.engine_runs(f)
                   else [self.why_not(f), "", "", ""]),
                 f"{f.aggregate_tok_s / b.aggregate_tok_s:,.1f}x", bound_label(f.bound),
                 "yes" if f.fit.fits else "NO"]
                for (f, b), e in zip(self.floors, self.expected)]
        lines += table(rows, ["batch", "context", "floor ms", "expected ms", "band",
                              "tok/s/user", "tok/s total", "floor gain", "bound",
                              "fits in memory"])
        lines.append(f"expected on {self._priced_as}: step_cost with the "
                     f"{self.expected[0].engine} profile "
                     f"[{self.expected[0].source}]; tok/s columns use the expectation; floor "
                     "gain is the floor's aggregate over batch 1's.")
        more = []
        if self.deployment.model.moe is not None:
            more.append("the experts the batch touches")
        if any(f.bound == "compute" for f, _ in self.floors):
            more.append("the arithmetic, once the step is past the ridge")
        lines.append(speed_note(self.deployment.model,
                                sorted({f.context for f, _ in self.floors}), more))
        lines += self._spec_lines()
        # a pool's refusal the first line already gives is not said again under the table
        head = lines[0] if len(lines) > 1 and lines[1] == deployment_line(self.deployment) else ""
        return [*lines, *(s for s in self._seat_lines() if s not in head),
                *self._longest_table(), *(f"caution: {c}" for c in self.shown_cautions)]

    def _headline(self) -> list[str]:
        """The first line where some point does not run (refusal_headline, in decode's
        words): the README's Llama-3.1-70B at fp8 on one H100, batch 1 fits but vLLM would
        not start, batch 32 does not fit either: 'DOES NOT FIT on vLLM 0.34 at any of the 2
        points: … would refuse to start …; and batch 32 at 2,000 tokens does not fit in
        memory: …'."""
        line = refusal_headline([self._row(f) for f, _ in self.floors], self._priced_as,
                                DECODE, f"({self._fit_hint()} for the breakdown)")
        return [line] if line else []

    def _row(self, f: DecodeFloor) -> Row:
        """A point as the first line counts it, ranked past the memory by its shortfall."""
        runs = self.engine_runs(f)
        refused = f.fit.fits and not runs
        return Row(f"batch {f.batch:,} at {f.context:,} tokens", f.fit, runs,
                   f.fit.shortfall_bytes, self.none_reason(f) if refused else "",
                   refused and bool(self._seat(f.context).held))

    @staticmethod
    def _gain_line(f: DecodeFloor, base: DecodeFloor) -> list[str]:
        """A batch's floor gain over batch 1 where it runs at no speed: the steps' ratio."""
        if f.batch == 1:
            return []
        return [f"  gain       {f.aggregate_tok_s / base.aggregate_tok_s:,.1f}x batch 1's "
                f"output, each user at {fmt_share(f.per_user_tok_s / base.per_user_tok_s)} of "
                "batch 1's speed (the steps' ratio)"]

    def _longest_point_line(self) -> list[str]:
        """One point's expectation at the --max-model-len its refusal suggests (at_longest),
        said as such: 'expected at --max-model-len 40,192: 8.10 ms per step (…)'."""
        r = self.at_longest
        if r is None or r.started_at is None:
            return []
        (f, _), e = r.floors[0], r.expected[0]
        at = f"expected at --max-model-len {r.started_at:,}"
        if not r.engine_runs(f):
            return [f"{at}: nothing: {r.none_reason(f)}"]
        return [f"{at}: {e.time_s * 1e3:,.2f} ms per step ({e.low_s * 1e3:,.2f}–"
                f"{e.high_s * 1e3:,.2f}), {1 / e.time_s:,.1f} tok/s per user, "
                f"{fmt_total_tok_s(f.batch / e.time_s)} in total",
                *(f"  {line}" for line in r._seat_lines())]

    def _longest_table(self) -> list[str]:
        """The points again at the --max-model-len the refusal suggests (at_longest), headed
        by it, with the batch its pool runs there."""
        r = self.at_longest
        if r is None or r.started_at is None:
            return []
        rows = [[f"{f.batch:,}", f"{f.context:,}",
                 *([f"{e.time_s * 1e3:,.2f}", f"{e.low_s * 1e3:,.1f}–{e.high_s * 1e3:,.1f}",
                    f"{1 / e.time_s:,.1f}", fmt_total_tok_s(f.batch / e.time_s)]
                   if r.engine_runs(f) else [r.why_not(f), "", "", ""])]
                for (f, _), e in zip(r.floors, r.expected)]
        return [f"at --max-model-len {r.started_at:,} (the longest "
                f"{engine_name(r.expected[0].engine)} "
                "starts at), expected:",
                *table(rows, ["batch", "context", "expected ms", "band", "tok/s/user",
                              "tok/s total"]),
                *r._seat_lines()]

    @property
    def _priced_as(self) -> str:
        """The engine and the release its pool was sized as, as its project spells it:
        'vLLM 0.34', 'TensorRT-LLM' (engine_versions.engine_release)."""
        return engine_release(self.expected[0].engine, self.engine_version, named=True)

    def weights_read_in_all(self, f: DecodeFloor) -> float | None:
        """Under expert parallelism (one data-parallel rank), the weight bytes all the GPUs
        read in a step: the floor prices the busiest rank's read × the ranks (they step
        together), more than they read between them (DeepSeek-V3 at batch 64 on 8 H200s:
        644.4 GB priced, 593.5 GB read; with 32 redundant experts under EPLB 688.6 GB and
        626.8 GB, the replicas the tokens reach read too: step_work.experts_fraction_read); None
        where the two are the same."""
        dep = self.deployment
        if dep.model.moe is None or not dep.expert_parallel or dep.engine_expert_ranks == 1 \
                or dep.data_parallel_size > 1:
            return None
        return weight_bytes_read(dep, micro_batch(dep, f.batch))

    def _ep_read_note(self, f: DecodeFloor) -> str:
        """The reads line's words for what an expert-parallel figure is."""
        total = self.weights_read_in_all(f)
        if total is None:
            return ""
        return (f" (the busiest expert-parallel GPU's read × {self.deployment.expert_ranks}; "
                f"{total / GB:,.1f} GB read in all)")

    def _spec_at(self, f: DecodeFloor) -> SpecStep:
        return next(s for s in self.spec if (s.batch, s.context) == (f.batch, f.context))

    def _spec_lines(self) -> list[str]:
        """With --spec-tokens: each point the engine runs, as verify steps."""
        steps = [self._spec_at(f) for f, _ in self.floors if self.spec and self.engine_runs(f)]
        if not steps:
            return []
        spec = steps[0].spec
        head = (f"speculative ({spec.label()}): {spec.tokens_per_step:,.2f} tokens a verify "
                "step")
        if len(self.floors) == 1:
            s = steps[0]
            lookup = f", n-gram lookup {s.lookup_s * 1e3:,.3f} ms" if s.lookup_s else ""
            return [f"  {head}; step {s.step_s * 1e3:,.2f} ms (verify of {s.batch:,} × "
                    f"{spec.drafts + 1} tokens {s.verify_s * 1e3:,.2f} ms{lookup}), "
                    f"{s.per_user_tok_s:,.1f} tok/s per user, {fmt_total_tok_s(s.aggregate_tok_s)} in "
                    f"total ({s.speedup:,.2f}x plain decode)"]
        rows = [[f"{s.batch:,}", f"{s.context:,}", f"{s.verify_s * 1e3:,.2f}",
                 f"{s.step_s * 1e3:,.2f}", f"{s.per_user_tok_s:,.1f}",
                 fmt_total_tok_s(s.aggregate_tok_s), f"{s.speedup:,.2f}x"] for s in steps]
        return [head + ":", *table(rows, ["batch", "context", "verify ms", "step ms",
                                          "tok/s/user", "tok/s total", "vs plain"])]

    def _pool_lines(self, said: int | None = None) -> list[str]:
        """The batch the engine's pool runs at each context (but the ``said`` context, whose
        refusal the expectation's line gave), then what the expectation leaves out."""
        return [*self._seat_lines(said), *(f"caution: {c}" for c in self.shown_cautions)]

    @property
    def shown_cautions(self) -> tuple[str, ...]:
        """The cautions the text says: all of them where a point is priced; where none is
        (gemma-2-9b on an RTX 3060 does not fit), not those of the expected times
        (expectation_cautions: a GeForce card's missing profile rows), which would caution
        a figure the report does not print. The comparison drops them alike."""
        if self.priced or (self.at_longest is not None and self.at_longest.priced):
            return self.cautions  # at_longest's expectation is printed, and cautioned
        unpriced = self.expectation_cautions
        return tuple(c for c in self.cautions if c not in unpriced)

    def _fit_hint(self) -> str:
        # the defaults are fit's (vllm serve's, for vLLM); other settings are to be given again
        return "`ridgeline fit` with the same settings" if self._line_settings \
            else "`ridgeline fit`"

    def _seat_lines(self, said: int | None = None) -> list[str]:
        """One line per context with a memory model (but ``said``): the sequences the pool
        runs, or why none."""
        engine = self.expected[0].engine
        slots = ""
        if engine.startswith("llama.cpp") and not any(s.seat_limit and not s.default_slots
                                                      for s in self.line_seats):
            from ridgeline.datafiles import engine_defaults

            default = int(engine_defaults(engine)["n_parallel"])
            slots = f", given a slot each (-np; llama-server's default runs {default})"
        pool = f"{engine_name(engine)}'s KV pool" + (f" ({self._line_settings})" if self._line_settings
                                         else " (vllm serve's defaults)" if engine == "vllm"
                                         else "")
        fit = self._fit_hint()
        # a refusal that names no context (a start-up check failed) is said once, not per context
        # where max_num_seqs, not the pool, caps the batch, the line says so of the engine
        capped = pool.replace("'s KV pool", "", 1)
        knob = f", capped by {self._seats_knob()}: its KV pool holds more"

        def capped_by(s: EngineSeats) -> str:
            if s.default_slots:  # the slot each would be more: the default -np caps it
                return (f", capped by llama-server's default {s.held:,} slots (-np): its KV "
                        f"pool holds {s.pool_held or 0:,}, a slot each (--parallel N raises "
                        f"it, up to {s.pool_held or 0:,})")
            return (slots + knob) if s.seat_limited else slots

        return list(dict.fromkeys(
            f"{capped if s.seat_limited else pool} runs at most {s.held:,} "
            f"{plural(s.held, 'sequence')} at {s.context:,} "
            f"{plural(s.context, 'token')} of context{capped_by(s)} "
            f"({fit} for the breakdown)"
            if s.held else f"{self._none_clause(s)} ({fit} for the breakdown)"
            for s in self.line_seats if s.held is not None and (s.held or s.context != said)))

    @property
    def _line_settings(self) -> str:
        return self.fit_pool_settings if self.fit_seats else self.pool_settings

    def priced_held(self, context: int) -> int | None:
        """The sequences the priced run holds at ``context`` (``seats``)."""
        return next((s.held for s in self.seats if s.context == context), None)

    def _seats_knob(self) -> str:
        """The engine's own name for its cap on running sequences: vLLM's max_num_seqs."""
        return seats_knob(self.expected[0].engine)


def _slot_search_step(seat: EngineSeats, knob: str) -> Step:
    """llama.cpp's "runs at most N sequences", a slot each: the most slots N whose pool holds
    N conversations, shown by the pool of N slots (at least N) and of N + 1 (fewer than
    N + 1): llama-3.1-8b q4_k_m on an H100 at 2,000 tokens, 297 (297 slots hold 297, 298
    hold 297)."""
    n, cells = seat.held or 0, seat.max_model_len or seat.context  # a slot's cells
    more = seat.more_slots_pool_held
    return step(f"sequences the engine runs at {seat.context:,} tokens",
                f"min({knob} N, conversations the KV pool of N slots holds), N the most slots "
                "whose pool holds N (each slot adds its cache and logits row; at N + 1 the "
                "pool holds fewer than N + 1)",
                q("sequences", n),
                q(f"{knob} N", n, "", "a slot per sequence, as many as hold one"),
                q("pool of N slots holds", seat.slots_pool_held or 0, "conversations",
                  f"-np {n:,}, -c {n:,} × {cells:,}"),
                *([q("pool of N + 1 slots holds", more, "conversations",
                     f"-np {n + 1:,}, -c {n + 1:,} × {cells:,}")]
                  if more is not None else []))


def speed_note(model: ModelSpec, contexts: list[int], more: list[str]) -> str:
    """The decode table's word on batch: card output rises, each user's speed falls, by how
    much decided by the cache each sequence reads (its context, but where windowed layers
    reach their window: Mistral-7B's 4,096-token window caps its cache, so rows at 4,096 and
    32,000 tokens match) and by ``more`` (the experts touched, the arithmetic)."""
    lead = "Card output rises with batch; each user's speed falls"
    reached = [layer for layer in model.layers if layer.mixer in WINDOW_MIXERS
               and layer.window_tokens and max(contexts) >= layer.window_tokens]
    full = any(layer.mixer == FULL for layer in model.layers)
    attention = any(layer.mixer in ATTENTION_MIXERS for layer in model.layers)
    windows = [layer.window_tokens or 0 for layer in reached]
    if not attention or (not full and windows and min(contexts) >= max(windows)):
        why = (f"the {_window_phrase(reached)} caps each sequence's cache, and every context "
               "asked reaches it" if attention else
               "each sequence keeps a fixed recurrent state, whatever its context")
        return (lead + (f", by how much decided by {_and(more)}" if more else "")
                + f", alike at every context here: {why}.")
    only = "the only term that grows" if not more else ""
    if not reached:
        term = "context" + (f" ({only})" if only else "")
    elif full and {layer.mixer for layer in reached} == {CHUNKED}:  # Llama 4: the chunked
        # layers read their own chunk's keys, from 1 again at each chunk's start
        term = (f"context ({only}{', ' if only else ''}in the full-attention layers' cache; "
                f"the {len(reached)} chunked layers read only the keys of the current "
                f"{_window_phrase(reached)}, back to one at each chunk's start)")
    elif full:  # a hybrid: its full layers' cache grows, its windowed layers' stops
        term = (f"context ({only}{', ' if only else ''}in the full-attention layers' cache; "
                f"the {len(reached)} windowed layers' cache stops at their "
                f"{_window_phrase(reached)})")
    else:
        term = (f"context up to the {_window_phrase(reached)} (which caps each sequence's "
                f"cache{'; ' if only else ''}{only})")
    return f"{lead}, by how much decided by {_and([term, *more])}."


def _window_phrase(layers: list[Layer]) -> str:
    """'4,096-token sliding window', '8,192-token attention chunk', or 'sliding window of
    512 and 4,096 tokens' where the layers' windows differ."""
    kinds = {layer.mixer for layer in layers}
    name = ("sliding window" if kinds == {SLIDING} else
            "attention chunk" if kinds == {CHUNKED} else "window")
    sizes = sorted({layer.window_tokens or 0 for layer in layers})
    if len(sizes) == 1:
        return f"{sizes[0]:,}-token {name}"
    return f"{name} of {_and([f'{w:,}' for w in sizes])} tokens"


def _and(terms: list[str]) -> str:
    return terms[0] if len(terms) == 1 else ", ".join(terms[:-1]) + " and " + terms[-1]


def decode_report(dep: Deployment, batches: list[int], contexts: list[int],
                  profile: EngineProfile, enforce_eager: bool = False,
                  settings: EngineSettings | None = None,
                  max_model_len: int | None = None,
                  spec: SpecDecode | None = None) -> DecodeReport:
    """Each batch at each context: its floor, the engine's expectation, and the batch the
    engine's pool runs (sized under ``settings``, or the engine's defaults, vLLM's vllm
    serve's, and started at ``max_model_len``, or the engine's default, the model's context);
    with ``spec``, each point's speculative verify step too. Where the engine would refuse to
    start there, the same points at the longest --max-model-len that starts (at_longest):
    Llama-3.1-8B on an RTX 4090 refuses at 131,072 and runs 9 of 4,096 tokens at 40,192."""
    from ridgeline.capacity import engine_seats, suggested_max_model_len

    floors, expected = [], []
    # llama.cpp without -np: llama-server's default slots cap the batch (default_slots)
    seats = tuple(default_slots(engine_seats(dep, c, enforce_eager, settings, max_model_len),
                                dep.engine) for c in contexts)
    served = _served_fit(dep, settings or EngineSettings(), spec is not None)
    for context in contexts:
        base = decode_floor(dep, 1, context)
        for b in batches:
            floor = decode_floor(dep, b, context)  # micro-batched under PP
            floors.append((replace(floor, fit=served(floor.fit, b, context)), base))
            expected.append(Expectation.of(dep, decode_batch(micro_batch(dep, b), context),
                                           profile))
    from ridgeline.capacity import start_trim_caution
    from ridgeline.offload import offload_caution
    from ridgeline.predict import (
        bnb_caution,
        cdna3_moe_caution,
        eager_caution,
        eager_switch_note,
        gguf_caution,
        shared_profile_caution,
    )
    from ridgeline.track_record import track_record_caution

    cautions = (eager_switch_note(dep.engine) if enforce_eager else "",
                eager_caution(dep) if enforce_eager else "", context_caution(dep, max(contexts)),
                start_trim_caution(dep, settings or EngineSettings(),
                                   max_model_len),
                cdna3_moe_caution(dep), gguf_caution(dep), bnb_caution(dep),
                shared_profile_caution(profile, dep=dep),
                offload_caution(dep), split_caution(dep), dep.model.architecture_caution,
                per_head_caution(dep.model),
                micro_batch_caution(dep, batches), deployment_caution(dep),
                *data_parallel_cautions(dep, stepping=True), expected[0].calibration,
                profile.batch_range_caution(dep.accelerator, max(batches)),
                track_record_caution(dep, "decode", profile))
    described = describe_settings(settings or EngineSettings(), dep.engine,
                                  max_model_len) if settings or max_model_len else ""
    if spec is not None:  # Model Runner V2's n-gram lookup runs on the GPU (vLLM 0.32+)
        from ridgeline.vllm_mrv2_drafter import gpu_lookup_len

        spec = replace(spec, gpu_lookup_len=gpu_lookup_len(
            dep, settings or EngineSettings(), spec.method, max_model_len))
    steps = () if spec is None else tuple(spec_step(dep, spec, f.batch, f.context, profile)
                                          for f, _ in floors)
    longest = suggested_max_model_len(seats, max_model_len)
    at_longest = decode_report(dep, batches, contexts, profile, enforce_eager, settings,
                               longest, spec) if longest else None
    start = () if not longest else refusal_steps(
        dep, replace(settings or EngineSettings(),
                     enforce_eager=enforce_eager or (settings or EngineSettings()).enforce_eager),
        longest, contexts)
    return DecodeReport(dep, tuple(floors), tuple(expected), seats,
                        tuple(c for c in cautions if c), profile, described, steps,
                        engine_version=(settings or EngineSettings()).engine_version,
                        at_longest=at_longest, refusal_working=start)


def with_fit_seats(report: DecodeReport, fit_seats: tuple[EngineSeats, ...],
                   described: str, host_bytes: tuple[float, ...],
                   unplaced: bool = False) -> DecodeReport:
    """``report`` (llama.cpp, priced as -ngl all's run: cli_offload.FitRun.set_aside or
    .unplaced) with its max-batch line sized as llama-server's default --fit starts it at each
    context (``fit_seats``, under the ``described`` settings; ``host_bytes``: the weights that
    run keeps on the host, per context), so that the line does not move with the batches
    asked: gemma-2-9b on an A100-80GB at 4,096 tokens runs 45 under --fit's 1,024 MiB margin
    whether --batch is 1 or 64, where -ngl all's run holds 46. The points stay priced as
    they were; a caution names those past the line's count, and a context where -ngl all
    holds none but --fit, moving weights to the host, runs some. ``unplaced``: the priced
    run is llama-server's where --fit finds no placement for the largest point (it loads every
    layer as given), not -ngl all's typed."""
    notes = []
    fit_seats = tuple(default_slots(s, report.deployment.engine) for s in fit_seats)
    for seat, host in zip(fit_seats, host_bytes):
        c = seat.context
        past = [f.batch for f, _ in report.floors
                if f.context == c and f.batch > (seat.held or 0) and report.engine_runs(f)]
        notes += fit_seat_notes(report.deployment, seat, report.priced_held(c) or 0, past,
                                host, described, unplaced)
    return replace(report, fit_seats=fit_seats, fit_pool_settings=described,
                   cautions=(*report.cautions, *notes))


def fit_seat_notes(dep: Deployment, seat: EngineSeats, priced: int, past: list[int],
                   host_bytes: float, described: str, unplaced: bool = False) -> list[str]:
    """The cautions where llama.cpp's max batch is the run its default --fit starts
    (``seat``, under the ``described`` settings) and the points are priced as another
    (-ngl all's, or, ``unplaced``, llama-server's where --fit finds no placement), which
    holds ``priced``: the batches asked ``past`` that count, priced as that run; and, where
    it holds none but --fit, moving ``host_bytes`` of weights to the host, runs some, that.
    decode's and prefill's words (with_fit_seats, reports.prefill.with_fit_seat)."""
    run = ("the run llama-server starts where --fit finds no placement for them" if unplaced
           else "-ngl all's run")
    held, c = seat.held or 0, seat.context
    tokens = f"{c:,} {plural(c, 'token')} ({dep.gpus_label})"  # card named
    notes = []
    if past:
        batches = ", ".join(f"{b:,}" for b in past)
        notes.append(f"batch {batches} at {tokens} {'is' if len(past) == 1 else 'are'} "
                     f"past the {held:,} {plural(held, 'sequence')} llama-server runs "
                     f"under --fit ({described or 'as given'}; fit's -np "
                     f"lever): priced as {run}, every layer on the GPU and no margin "
                     f"kept, which holds {priced:,}")
    if held and not priced and host_bytes:
        notes.append(f"at {tokens} -ngl all's run holds no sequence; llama-server's "
                     f"default --fit runs {held:,}, with {host_bytes / GIB:,.2f} GiB of "
                     "weights on the host (--host-bandwidth-gbs GB/s prices its steps)")
    return notes


def _served_fit(dep: Deployment, settings: EngineSettings,
                drafting: bool) -> Callable[[FitCheck, int, int], FitCheck]:
    """The memory check as the engine serves ``dep`` under ``settings`` (raw_fit.as_served):
    the vision tower it loads (none under --language-model-only), and, ``drafting``, the
    drafter's weights and cache its pool holds beside the target's, as fit counts them."""
    vision = loaded_vision_bytes(dep, settings)
    weights, kv = drafter_rank_bytes(dep, settings) if drafting else (0.0, 0.0)
    return lambda fit, batch, context: as_served(fit, batch, context, vision, weights, kv)


# an engine's own name for a size decode's flags set where it is not EngineSettings' (the
# flags' help, cli.py and cli_engine.sizing_flags: SGLang's --cuda-graph-max-bs,
# TensorRT-LLM's kv_cache_config.max_tokens)
SIZE_KNOB_NAMES = {("sglang", "max_cudagraph_capture_size"): "cuda_graph_max_bs",
                   ("trtllm", "max_total_tokens"): "kv_cache_config.max_tokens"}


def describe_settings(settings: EngineSettings, engine: str,
                      max_model_len: int | None = None) -> str:
    """The settings a pool was sized under: 'vllm serve's defaults', or 'usage offline,
    gpu_memory_utilization 0.97, max_num_seqs 16, max_model_len 8192' (vLLM's names; the usage
    is vLLM's; SGLang's and TensorRT-LLM's own names for theirs, settings_knob)."""
    given = [f"{settings_knob(engine, name)} {value:g}" if isinstance(value, float) else
             f"{settings_knob(engine, name)} {value:,}"
             for name in ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                          "block_size") if (value := getattr(settings, name)) is not None]
    # llama.cpp's --max-model-len is each slot's context, as fit takes it: -c ÷ -np
    given += ([] if not max_model_len else
              [f"--max-model-len {max_model_len:,}, each slot's -c ÷ -np"]
              if engine.startswith("llama.cpp") else
              [f"{settings_knob(engine, 'max_model_len')} {max_model_len:,}"])
    given += [] if settings.async_scheduling else ["async_scheduling off"]
    given += [] if settings.prefix_caching is None else [
        f"prefix caching {'on' if settings.prefix_caching else 'off'}"]
    given += [name for name in ("language_model_only", "enable_multimodal", "warm_compile_cache")
              if getattr(settings, name)]
    given += [f"limit_mm_per_prompt {settings.mm_limits.describe()}"] \
        if settings.mm_limits is not None else []
    given += [f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
              for name in ("swa_full_tokens_ratio", "backend", "sglang_vlm_cache_size_mb",
                           "mm_feature_transport", "sglang_mm_feature_cache_mb",
                           "mm_preprocess_cache_size_mb")
              if (value := getattr(settings, name)) is not None]
    # the pool's sizes set rather than left to the engine, and a hybrid's state pool and
    # dtype (sizing_flags.py), each under the engine's own name (SIZE_KNOB_NAMES)
    given += [f"{SIZE_KNOB_NAMES.get((engine, name), name)} "
              + (f"{value:,}" if isinstance(value, int) else str(value))
              for name in ("kv_cache_memory_bytes", "max_total_tokens", "max_mamba_cache_size",
                           "mamba_ssm_dtype", "max_cudagraph_capture_size")
              if (value := getattr(settings, name)) is not None]
    given += [] if settings.lora is None else [f"LoRA {settings.lora.describe()}"]
    given += [] if settings.eplb is None else [settings.eplb.describe()]
    # vLLM's compilation config (vllm_compilation.py), in its own keys
    given += [f"{name} {value}" for name, value in (
        ("cuda_graph_bs" if engine == "sglang" else "cudagraph_capture_sizes",  # --cuda-graph-bs
         list(settings.cudagraph_capture_sizes or []) or None),
        ("cudagraph_mode", settings.cudagraph_mode),
        ("compilation mode", None if settings.torch_compile is None else
         "VLLM_COMPILE" if settings.torch_compile else "NONE")) if value is not None]
    # llama.cpp's --fit: the margin it keeps free, which its pool leaves uncached
    given += [] if settings.fit_target_bytes is None else [
        f"--fit-target {settings.fit_target_bytes / MIB:,.0f} MiB left free"]
    rules = [version_rules(engine, settings.engine_version)] if settings.engine_version else []
    if engine != "vllm":
        return ", ".join(given + rules)
    if not given:
        return ", ".join(["vllm serve's defaults" if settings.usage == "serve" else
                          "the offline LLM class's defaults, a batch run's", *rules])
    return ", ".join([f"usage {settings.usage}", *given, *rules])


def settings_knob(engine: str, name: str) -> str:
    """``engine``'s own name for vLLM's setting ``name``: the seats and the step's token budget
    as candidate.ENGINE_KNOB_NAMES has them, the memory share and the longest request as its
    launch flag (engines.json ``cli``) spells them, the tokens in a block as prefix.BLOCK_SETTINGS
    has them; vLLM's name elsewhere (SGLang's max_running_requests, mem_fraction_static,
    context_length and page_size)."""
    from ridgeline.candidate import ENGINE_KNOB_NAMES
    from ridgeline.datafiles import engine_defaults
    from ridgeline.prefix import BLOCK_SETTINGS

    knobs = ENGINE_KNOB_NAMES.get(engine)
    if engine.startswith("llama.cpp") and name == "max_num_seqs":
        return "-np"  # llama-server's slots
    if knobs is None:
        return name
    if name in ("max_num_seqs", "max_num_batched_tokens"):
        return knobs[0 if name == "max_num_seqs" else 1]
    if name == "block_size":
        return BLOCK_SETTINGS.get(engine, name)
    flag = engine_defaults(engine)["cli"].get({"gpu_memory_utilization": "memory",
                                               "max_model_len": "max_len"}.get(name, ""))
    return flag.lstrip("-").replace("-", "_") if flag else name


def version_rules(engine: str, version: str) -> str:
    """Whose rules sized a pool --engine-version names: 'as vLLM 0.10 sizes it', 'as
    llama.cpp-cuda b7000 sizes it'."""
    from ridgeline.engine_versions import llamacpp_build

    build = llamacpp_build(version) if engine.startswith("llama.cpp") else None
    name = engine_name(engine)
    return f"as {name} {f'b{build}' if build else version.strip()} sizes it"


def _memory_only(headline: str, engine: str) -> str:
    """A fit headline where the weights and cache fit the memory but the engine would not run
    the point: said to be the memory's alone, not the engine's ('fits' would read as 'runs')."""
    return headline.replace("fits: ", "fits in memory only: ", 1) \
        + f"; {engine} would not run it (above)"


def micro_batch_caution(dep: Deployment, batches: list[int] | None = None) -> str:
    """How a pipeline-parallel row is priced, or "": a batch of one cannot split, so it passes
    the stages one after another; a larger one runs as up to PP micro-batches."""
    pp = micro_batches(dep)
    if pp == 1:
        return ""
    if batches and max(batches) == 1:
        return (f"pipeline parallel: a batch of 1 cannot split, so it passes the {pp} stages "
                f"one after another, each idle while the others work; a token's step is its "
                f"trip through all {pp} (as `simulate -pp` runs it)")
    return (f"pipeline parallel: a batch runs as up to {pp} micro-batches of ⌈batch ÷ {pp}⌉ "
            f"sequences, one in each stage (a batch of fewer than {pp} leaves stages idle); a "
            f"token's step is one micro-batch's trip through all {pp} stages, and the total "
            "is the whole batch's tokens over it (as `simulate -pp` runs it): an upper bound, "
            "since vLLM V1 fills its micro-batches greedily rather than evenly (vLLM #41682) "
            "and the slowest stage, not the mean trip, sets the pace")


def deployment_caution(dep: Deployment) -> str:
    """What to say of the deployment's layout itself, or "": tensor parallelism past a node;
    what -dcp leaves unpriced (decode_context.dcp_caution)."""
    return "; ".join(c for c in (deployment_cross_node_caution(dep),
                                 dcp_caution(dep)) if c)


def split_caution(dep: Deployment) -> str:
    """What to say of llama.cpp's row and tensor splits, or ""."""
    if not dep.engine.startswith("llama.cpp") or dep.tensor_parallel_size == 1:
        return ""
    return ("llama.cpp's -sm tensor is priced as tensor parallelism (an all-reduce per "
            "layer over the cards' link); no measurement here checks it")


def default_pool_settings(engine: str) -> str:
    """The settings decode and prefill size an engine's pool under."""
    if engine == "vllm":
        return "serve defaults"
    return "one slot per sequence (-np)" if engine.startswith("llama.cpp") else "defaults"


def json_pool_settings(engine: str, described: str) -> str:
    """decode's and prefill's --json ``settings``: those ``described`` (describe_settings),
    else the engine's defaults; llama.cpp's one slot per sequence said either way, as the
    text's "given a slot each" says it."""
    if engine.startswith("llama.cpp"):
        return ", ".join(filter(None, (default_pool_settings(engine), described)))
    return described or default_pool_settings(engine)


def _dollars_per_million(dep: Deployment, tok_s: float) -> str:
    price = dep.accelerator.price_per_hour_usd
    cost = usd_per_million_tokens(None if price is None else price * dep.num_gpus, tok_s)
    return "no price" if cost is None else f"${cost:,.2f}"


@dataclass(frozen=True)
class DecodeComparison(ByCard):
    """The same model, batch and context on several accelerators, side by side."""

    reports: tuple[DecodeReport, ...]
    not_run: tuple[NotRun, ...] = ()  # the cards named that cannot run it, and why

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every card's working for every point, each step labelled with its card (and its
        point, where a card has several), then the ridge batch column's blended peak where
        a card's dense matmuls run at several dtypes (dense_ridge_steps)."""
        return tuple(replace(st, label=f"{r.deployment.accelerator.id}"
                             + (f", {heading}" if len(r.floors) > 1 else "") + f": {st.label}")
                     for r in self.reports for heading, group in r.card_step_groups
                     for st in group) \
            + tuple(replace(st, label=f"{r.deployment.accelerator.id}: {st.label}")
                    for r in self.reports
                    for st in (*dense_ridge_steps(r.deployment),
                               ridge_batch_step(r.deployment)))

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **not_run_dict(self.not_run, "accelerator")}

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        d = first.deployment
        per_card = self.engine_per_card
        kv_per_card = len({r.deployment.kv.id for r in self.reports}) > 1
        rows = []
        for r in self.reports:
            for (f, _), e in zip(r.floors, r.expected):
                runs = r.engine_runs(f)
                rows.append([r.deployment.gpus_label,
                             *([r.deployment.engine] if per_card else []),
                             *([r.deployment.kv.id] if kv_per_card else []),
                             str(f.batch), f"{f.context:,}", f"{f.step_time_s * 1e3:,.2f}",
                             f"{e.time_s * 1e3:,.2f}" if runs else r.why_not(f),
                             f"{e.low_s * 1e3:,.1f}–{e.high_s * 1e3:,.1f}" if runs else "",
                             f"{1 / e.time_s:,.1f}" if runs else "",
                             f"{f.batch / e.time_s:,.0f}" if runs else "",
                             _dollars_per_million(r.deployment, f.batch / e.time_s)
                             if runs else "",
                             f"{first_whole_batch(r.deployment.dense_ridge_batch):,}",
                             bound_label(f.bound)])
        # a card that prices no row has no expected time to caution (a GeForce's profile
        # rows, where the card's row does not fit): its other cautions stay
        cautions = dict.fromkeys(c for r in self.reports for c in r.shown_cautions)
        from ridgeline.offload import placement_lines

        engines = ", ".join(dict.fromkeys(engine_name(r.expected[0].engine)
                                          for r in self.reports))
        weights = weights_by_engine([r.deployment for r in self.reports])
        return [f"{d.model.name}, weights {weights}, "
                + ("" if kv_per_card else f"KV {d.kv.id}, ") + "decode on "
                f"{engines}{' (each card its own)' if per_card else ''}: one row per "
                "accelerator, batch and context", "",
                *table(rows, ["accelerator", *(["engine"] if per_card else []),
                              *(["KV"] if kv_per_card else []), "batch", "context", "floor ms",
                              "expected ms", "band",
                              "tok/s/user", "tok/s total", "$/M tok", "ridge batch", "bound"]),
                *(e.line for e in self.not_run),
                *placement_lines([r.deployment for r in self.reports]),
                *dict.fromkeys(f"{r.deployment.gpus_label}: {r._none_clause(s)}"
                               for r in self.reports for s in r.seats if s.held == 0),
                *(line for r in self.reports if (line := _card_longest_line(r))),
                *(line for r in self.reports for line in _card_spec_lines(r)),
                "", "expected: each card's step_cost with the engine's calibrated profile; "
                "band: the profile's spread of measured over predicted; "
                "$/M tok: the catalog's price per device-hour over the output tokens of a "
                "steady batch (no prefill); ridge batch: the batch at which the dense weights' reads "
                "reach the card's ridge (ridge FLOP/byte × bytes per weight ÷ 2"
                + ("; the ridge at their matmuls' blend of dtypes where they mix them"
                   if any(r.deployment.dense_blended for r in self.reports) else "")
                + "); `--gpu NAME` alone for one card's breakdown",
                *(f"caution: {c}" for c in cautions)]


def _card_spec_lines(r: DecodeReport) -> list[str]:
    """With --spec-tokens, one card's verify steps in the single-card wording, headed by the
    card ('1 x h100-sxm: speculative (…)')."""
    lines = r._spec_lines()
    if not lines:
        return []
    return [f"{r.deployment.gpus_label}: {lines[0].strip()}", *lines[1:]]


def _card_longest_line(r: DecodeReport) -> str:
    """One card's points at the --max-model-len its refusal suggests (at_longest), in a line:
    '1 x rtx-4090 at --max-model-len 40,192: batch 8 at 4,096 tokens 27.56 ms (24.5–33.5),
    290 tok/s'; "" where it starts."""
    at = r.at_longest
    if at is None or at.started_at is None:
        return ""
    points = [f"batch {f.batch:,} at {f.context:,} tokens "
              + (f"{e.time_s * 1e3:,.2f} ms ({e.low_s * 1e3:,.1f}–{e.high_s * 1e3:,.1f}), "
                 f"{fmt_total_tok_s(f.batch / e.time_s)} tok/s" if at.engine_runs(f)
                 else at.why_not(f))
              for (f, _), e in zip(at.floors, at.expected)]
    return f"{r.deployment.gpus_label} at --max-model-len {at.started_at:,}: " \
        + "; ".join(points)

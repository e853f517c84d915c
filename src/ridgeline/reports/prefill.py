"""`ridgeline prefill`: the article's prefill floor (time to first token) beside what the
engine is expected to take, for one card or several side by side."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from ridgeline.capacity import EngineSeats
from ridgeline.chunked_prefill import (
    chunks_prefill,
    mla_unchunked_caution,
    refuses_whole_prompt,
    splits_a_prompt,
    whole_context_reason,
)
from ridgeline.cpu_offload import cpu_offload_json
from ridgeline.data_parallel import data_parallel_cautions
from ridgeline.decode_context import dcp_caution
from ridgeline.dense_ridge import dense_ridge_steps
from ridgeline.deployment import Deployment
from ridgeline.engine_names import engine_name
from ridgeline.engine_runs import (
    DOES_NOT_FIT,
    ENGINE_RUNS_NONE,
    OVER_ENGINE_POOL,
    OVER_MAX_NUM_TOKENS,
    prefill_none_reason,
    seated,
)
from ridgeline.engine_versions import engine_release
from ridgeline.explain import Step, q, step
from ridgeline.floors import PrefillFloor, bound_label
from ridgeline.gguf_blocks import gguf_block_count
from ridgeline.llamacpp_batching import llamacpp_n_ubatch, pipelined_stages
from ridgeline.offload import offload_json
from ridgeline.parallel import deployment_cross_node_caution
from ridgeline.render import table
from ridgeline.reports.decode import json_pool_settings
from ridgeline.reports.expectation import (
    ByCard,
    Expectation,
    context_caution,
    deployment_line,
    expected_prompt_speed_step,
    fit_dict,
    floor_heading_end,
    no_expectation,
)
from ridgeline.reports.identity import card_price_json, identity_json
from ridgeline.reports.refusal_headline import PREFILL, Row, refusal_headline
from ridgeline.reports.refusal_steps import engine_check_step
from ridgeline.roofline import ridge_point
from ridgeline.side_by_side import NotRun, not_run_dict
from ridgeline.units import fmt_latency, latency_figure, latency_unit, plural
from ridgeline.vllm_mla_cache import per_head_caution


def engine_runs(floor: PrefillFloor, seat: EngineSeats | None) -> bool:
    """Whether the engine runs this prefill at once: it fits, and the serving engine's pool
    holds the batch's prompts (as decode asks of its batch: engine_runs.seated)."""
    return seated(floor.fit.fits, seat, floor.batch)


@dataclass(frozen=True)
class PrefillReport:
    deployment: Deployment
    floor: PrefillFloor
    expected: Expectation
    ubatch: int | None = None  # llama.cpp -ub, where given
    seat: EngineSeats | None = None  # prompts of this length the engine's pool holds
    more_cautions: tuple[str, ...] = ()  # from where it is built: a shared profile, a placement
    # a serving engine's token budget a step, and where it comes from (chunked_prefill.py)
    step_budget: tuple[int, str] | None = None
    usage: str = "serve"  # vLLM's usage context the pool is sized for (--usage)
    engine_version: str | None = None  # whose rules sized the pool (--engine-version)
    # the settings the pool is sized under, as decode describes them ("": the defaults)
    pool_settings: str = ""
    enable_chunked_prefill: bool = False  # TensorRT-LLM's (chunked_prefill.chunks_prefill)
    # llama.cpp where the answer's run set the build's default --fit aside or --fit found no
    # placement: the prompts llama-server runs at this length as --fit starts it (fit's -np
    # lever), one count whatever --batch asks, which engine_max_batch gives; ``seat`` stays
    # the priced run's (with_fit_seat, as reports.decode.with_fit_seats)
    fit_seat: EngineSeats | None = None
    fit_pool_settings: str = ""  # the settings fit_seat was sized under
    # where the engine refuses to start at its max_model_len (EngineSeats.start_refused): the
    # same prompt at the --max-model-len the refusal suggests (capacity.suggested_max_model_len)
    at_longest: PrefillReport | None = field(default=None, compare=False)
    # its working: the longest --max-model-len that starts, and the conversations of this
    # prompt its pool holds there (refusal_steps.py), heading at_longest's block
    refusal_working: tuple[Step, ...] = field(default=(), compare=False)

    @property
    def chunks(self) -> bool:
        """Whether the engine cuts a prompt between steps (not TensorRT-LLM by default)."""
        return chunks_prefill(self.deployment, self.enable_chunked_prefill)

    @property
    def pool_batch(self) -> int | None:
        """Prompts of this length the engine's pool holds at once (None: no memory model)."""
        seat = self.fit_seat or self.seat
        return None if seat is None else seat.held

    @property
    def pool_conversations(self) -> int | None:
        """The prompts the pool alone holds where counted apart from the seats that cap
        ``pool_batch`` (max_num_seqs; llama.cpp's -np, given or its default 4), else None."""
        seat = self.fit_seat or self.seat
        return None if seat is None else seat.pool_held

    @property
    def runs(self) -> bool:
        return engine_runs(self.floor, self.seat) and not self.refuses_prompt

    @property
    def refuses_prompt(self) -> bool:
        """Whether the engine, its pool seating the prompts, refuses each as longer than its
        step's whole token budget while it runs contexts whole, as `simulate` refuses it
        (chunked_prefill.refuses_whole_prompt): TensorRT-LLM, enable_chunked_prefill off, a
        16,000-token prompt at max_num_tokens 8,192."""
        budget = self.step_budget
        return budget is not None and engine_runs(self.floor, self.seat) \
            and refuses_whole_prompt(self.floor.prompt_len, budget[0], self.chunks)

    @property
    def chunked_alternative(self) -> bool:
        """Where the engine refuses the prompt (``refuses_prompt``) and its
        enable_chunked_prefill would run it (not an MLA model it turns it off for): the
        expectation, priced in chunks, is then that run's, said as such."""
        return self.refuses_prompt and chunks_prefill(self.deployment, True)

    @property
    def priced(self) -> bool:
        """Whether an expectation is shown: the engine runs the prompts, or would with
        --enable_chunked_prefill (``chunked_alternative``)."""
        return self.runs or self.chunked_alternative

    @property
    def fit_runs(self) -> bool:
        """Whether llama-server's default --fit runs these prompts where the priced run
        (-ngl all's) does not fit them: fit_seat, sized as --fit starts it."""
        return self.fit_seat is not None and (self.fit_seat.held or 0) >= self.floor.batch

    @property
    def cautions(self) -> list[str]:
        out = [context_caution(self.deployment, self.floor.prompt_len)]
        o = self.deployment.offload
        step = min(self.ubatch or llamacpp_n_ubatch(), self.floor.prompt_len)
        from ridgeline.offload import op_offload_min_batch

        model = self.deployment.model
        if o is not None and o.moves_weights(model.num_layers, gguf_block_count(model)) \
                and step < op_offload_min_batch():
            out.append(f"ubatches of {step} tokens run the host's layers on the CPU, whose "
                       "arithmetic is not priced (only its memory traffic): read the "
                       "expectation as a lower bound")
        dep = self.deployment
        if pipelined_stages(dep) > 1 and self.floor.prompt_len * self.floor.batch > step:
            out.append(f"the ubatches' overlap over {dep.pipeline_parallel_size} stages is "
                       "llama.cpp's ideal: on 8 x A100 its pipelining PR (#6017) measured a "
                       "2,048-token prompt about a quarter under it (validation/pipeline.csv), so "
                       "read the expectation as optimistic, the more so the more stages")
        out.append(deployment_cross_node_caution(dep))
        out.append(dcp_caution(dep))
        out.extend(data_parallel_cautions(dep, stepping=True, prompts=True))
        out.append(mla_unchunked_caution(dep, self.enable_chunked_prefill))
        from ridgeline.offload import offload_caution
        from ridgeline.predict import bnb_caution, gguf_caution

        # the expectation printed: this run's, else the one at the suggested --max-model-len
        shown = self if self.priced else self.at_longest
        runs = shown is not None and shown.priced
        out += [gguf_caution(dep) if runs else "", bnb_caution(dep) if runs else "",
                offload_caution(dep), dep.model.architecture_caution,
                per_head_caution(dep.model), *self.more_cautions]
        if shown is not None and runs and shown.expected.calibration:
            out.append(shown.expected.calibration)
        if shown is not None and runs and not shown.expected.compute_fitted:
            out.append(f"the {shown.expected.engine} profile was fitted on decode rows only: its "
                       "compute efficiency is the prior's, and its band is decode's, not a "
                       "prompt's (calibrate with prefill or TTFT rows to fit it)")
        return [c for c in out if c]

    @property
    def none_reason(self) -> str:
        """Why the engine gives no expectation, as the text says it (and the JSON carries
        it); "" where it runs."""
        e = self.expected
        if self.refuses_prompt:
            return self.refusal
        flags = (" --usage offline" if e.engine == "vllm" and self.usage == "offline" else "") \
            + (f" --engine-version {shlex.quote(self.engine_version)}"
               if self.engine_version else "")
        return prefill_none_reason(self.floor.fit, self.seat, self.floor.batch,
                                   self.floor.prompt_len, e.engine, f"`ridgeline fit{flags}`",
                                   self.pool_batch)

    @property
    def refusal(self) -> str:
        """What the engine says of a prompt it refuses (``refuses_prompt``), and the levers
        that run it: TensorRT-LLM at max_num_tokens 8,192, a 16,000-token prompt: refused, as
        `simulate` refuses it; --enable_chunked_prefill runs it in chunks (the text's expected
        line prices that run), or --max-num-tokens 16,000 runs it whole."""
        n, (tokens, source) = self.floor.prompt_len, self.step_budget or (0, "")
        engine = engine_name(self.expected.engine)
        turned_off = self.enable_chunked_prefill and not self.chunked_alternative
        return (f"a {n:,}-token prompt is longer than max_num_tokens {tokens:,} ({source}), "
                f"which {engine} refuses while it runs a context whole "
                f"({whole_context_reason(turned_off)}: \"should not exceed max_num_tokens\"), "
                "as `simulate` refuses it: "
                + ("--enable_chunked_prefill runs it in chunks, or "
                   if self.chunked_alternative else "")
                + f"--max-num-tokens {n:,} runs it whole")

    @property
    def short_why(self) -> str:
        """A table's word for a prompt the engine does not run."""
        if not self.floor.fit.fits:
            return "does not fit"
        if self.seat is not None and self.seat.start_refused:
            return "won't start"
        if self.refuses_prompt:
            return "too long"
        # a prompt past what the engine admits (the model's positions, --max-model-len, a
        # whole context's max_num_tokens)
        return "too long" if self.seat is not None and self.seat.refusal else "pool too small"

    @property
    def none_code(self) -> str:
        """none_reason's kind, for a program: does_not_fit, over_engine_pool or
        engine_runs_none; "" where it runs."""
        return "" if self.runs else DOES_NOT_FIT if not self.floor.fit.fits else \
            OVER_MAX_NUM_TOKENS if self.refuses_prompt else \
            OVER_ENGINE_POOL if self.pool_batch else ENGINE_RUNS_NONE

    @property
    def headline_row(self) -> Row:
        """The prompt as a first line counts it (refusal_headline), ranked past the memory by
        its length: a table names its longest."""
        f = self.floor
        refused = f.fit.fits and not self.runs
        return Row(f"{f.prompt_len:,} tokens", f.fit, self.runs, f.prompt_len,
                   self.none_reason if refused else "", self.none_code == OVER_ENGINE_POOL,
                   self.none_code == OVER_MAX_NUM_TOKENS)

    @property
    def ubatch_note(self) -> str:
        """Where the engine splits the prompts into passes over the weights, what the floor
        does not count: the floor is the ideal, one read of the weights for the whole batch;
        each llama.cpp ubatch (-ub, 512), or each step of a serving engine's token budget,
        reads them again, and the expectation counts every read (-ub 1 makes a 1,000-token
        prompt 1,000 passes, memory-bound, beside a compute-bound floor)."""
        f, dep = self.floor, self.deployment
        if not dep.engine.startswith("llama.cpp"):
            return self._steps_note
        ubatch = self.ubatch or llamacpp_n_ubatch()
        passes = -(-f.batch * f.prompt_len // ubatch)  # the prompts' tokens packed in order
        if passes <= 1:
            return ""
        return (f"the floor reads the weights once (the ideal); {engine_name(dep.engine)} runs "
                f"{passes:,} ubatches of at most {ubatch:,} {plural(ubatch, 'token')} (-ub), "
                "each reading them again, and the expectation counts them")

    @property
    def _steps_note(self) -> str:
        """A serving engine's prompts in more than one step of its token budget."""
        f, steps, budget = self.floor, self.expected.prompt_steps, self.step_budget
        if budget is None or steps <= 1 or not self.runs:
            return ""
        tokens, source = budget
        prompts = (f"the {f.prompt_len:,}-token prompt" if f.batch == 1 else
                   f"the {f.batch:,} prompts of {f.prompt_len:,} tokens")
        # a prompt cut between steps (TensorRT-LLM runs whole ones, priced in chunks only past
        # its budget)
        chunked = (splits_a_prompt(f.prompt_len, f.batch, tokens)
                   if self.chunks else f.prompt_len > tokens)
        return (f"the floor reads the weights once (the ideal); "
                f"{engine_name(self.expected.engine)} runs "
                f"{prompts} in {steps:,} steps of at most {tokens:,} tokens ({source}"
                + ("; each data-parallel rank its own prompts, the ranks' steps together"
                   if self.deployment.data_parallel_size > 1 else "") + "), each "
                "reading them again" + (" and attending to the chunks before it" if chunked
                                        else "") + ", and the expectation counts them")

    @property
    def steps(self) -> tuple[Step, ...]:
        """The floor's working and the expectation's; at_longest's expectation after, each
        step's label headed by the --max-model-len it starts at."""
        r = self.at_longest
        if not self.step_groups or r is None:
            return self._own_steps
        return self._own_steps + self.refusal_working + tuple(
            replace(st, label=f"at --max-model-len {r.started_at:,}: {st.label}")
            for st in r._expected_steps)

    @property
    def step_groups(self) -> tuple[tuple[str, tuple[Step, ...]], ...]:
        """Where at_longest prices the prompt, two blocks: this run's working, then the
        expectation at the suggested --max-model-len ('at --max-model-len 40,192, 1 x
        4,096-token prompt'); else none (the steps are one block)."""
        r = self.at_longest
        if r is None or not r.runs or r.started_at is None:
            return ()
        f = self.floor
        prompts = f"{f.batch} x {f.prompt_len:,}-token {plural(f.batch, 'prompt')}"
        return ((prompts, self._own_steps),
                (f"at --max-model-len {r.started_at:,}, {prompts}",
                 self.refusal_working + r._expected_steps))

    @property
    def _own_steps(self) -> tuple[Step, ...]:
        f, dep = self.floor, self.deployment
        # the ridge the intensity line sets it against: the dense weights' dtype's, or their
        # dtypes' blend (dense_ridge_steps)
        ridge = dense_ridge_steps(dep) if dep.dense_blended else (_ridge_step(dep),)
        # prompts that do not fit run at no speed: the step's arithmetic without the
        # throughput it would give (as decode's --explain), --json's floor_prompt_tok_s null;
        # prompts that fit but the engine does not run keep the floor's arithmetic, with an
        # engine check saying it does not run them
        own = f.steps if f.fit.fits else tuple(s for s in f.steps if s.result.unit != "tok/s")
        why = () if self.runs or not f.fit.fits else (engine_check_step(
            engine_name(self.expected.engine), f.batch,
            0 if self.refuses_prompt else self.pool_batch or 0, "prompts", self.none_reason),)
        return (*own, *ridge, f.fit.explain_step(), *why, *self._expected_steps)

    @property
    def _expected_steps(self) -> tuple[Step, ...]:
        """The expectation's working and its prompt speed, where the engine runs the prompts."""
        if not self.priced:
            return ()
        steps = (*self.expected.steps, expected_prompt_speed_step(
            self.expected, self.floor.batch, self.floor.prompt_len))
        if self.runs:
            return steps
        return tuple(replace(st, label=f"with --enable_chunked_prefill: {st.label}")
                     for st in steps)

    @property
    def started_at(self) -> int | None:
        """The max_model_len the serving engine's pool was started at, or None."""
        return None if self.seat is None else self.seat.max_model_len

    @property
    def longest_line(self) -> str:
        """The expectation at the --max-model-len a refused start suggests (at_longest), said
        as such, with the prompts its pool holds there: Llama-3.1-70B bf16 on 2 x H100, a
        1,100-token prompt, 'expected at --max-model-len 42,752: 159.2 ms (141.5–193.5) =
        TTFT, 6,912 prompt tok/s; its pool holds 37 prompts …'; "" where the engine starts."""
        r = self.at_longest
        if r is None or r.started_at is None:
            return ""
        at = f"expected at --max-model-len {r.started_at:,}"
        if not r.runs:
            return f"{at}: nothing: {r.none_reason}"
        e, f = r.expected, r.floor
        return (f"{at}: {band_words(e)} {ttft_words(e)}, "
                f"{f.batch * f.prompt_len / e.time_s:,.0f} prompt tok/s; its pool holds "
                f"{r.pool_batch or 0:,} {plural(r.pool_batch or 0, 'prompt')} of "
                f"{f.prompt_len:,} tokens at once")

    def _longest_dict(self) -> dict[str, Any] | None:
        """at_longest's expectation, pool and budget, ``at_max_model_len``'s value (null where
        the engine starts at its max_model_len)."""
        r = self.at_longest
        if r is None:
            return None
        whole = r.to_dict()
        keys = ("engine_runs", "time_s", "prompt_tok_s", "expected", "expected_none_reason",
                "expected_none_code", "engine_max_batch", "prompt_steps", "max_num_batched_tokens")
        return {"max_model_len": r.started_at, **{k: whole[k] for k in keys}}

    def _chunked_dict(self) -> dict[str, Any] | None:
        """The expectation with --enable_chunked_prefill where the engine refuses the prompt
        without it (``chunked_alternative``), as the text's 'with --enable_chunked_prefill'
        gives it; None elsewhere."""
        if not self.chunked_alternative:
            return None
        e, f = self.expected, self.floor
        rate = f.batch * f.prompt_len / e.time_s
        return {"time_s": e.time_s, "prompt_tok_s": rate, "prompt_steps": e.prompt_steps,
                "expected": {**e.to_dict(), "prompt_tok_s": rate}}

    def to_dict(self) -> dict[str, Any]:
        f = self.floor
        expected = {**self.expected.to_dict(), "prompt_tok_s": f.batch * f.prompt_len
                    / self.expected.time_s} if self.runs else None
        # the ridge the text's intensity line sets the prompt against: card_price_json's
        return {**identity_json(self.deployment, self.engine_version),
                **card_price_json(self.deployment),
                "deployment": deployment_line(self.deployment),
                "cpu_offload": cpu_offload_json(self.deployment).get("cpu_offload"),
                # llama.cpp's layers in host memory (-ngl, --n-cpu-moe), or null
                "offload": offload_json(self.deployment),
                "kind": "time_s (the TTFT), prompt_tok_s: the engine's calibrated expectation, "
                "as the text's 'expected' line (null where it would not run the prompts: "
                "expected_none_reason); floor_*: the article's lower bound",
                "prompt_len": f.prompt_len, "batch": f.batch, "engine_runs": self.runs,
                "time_s": None if expected is None else expected["time_s"],
                # prompt tokens per second, tok_s as decode and simulate spell a rate of tokens
                "prompt_tok_s": None if expected is None else expected["prompt_tok_s"],
                "expected_none_reason": self.none_reason or None,
                "expected_none_code": self.none_code or None,
                "floor_time_s": f.time_s,
                # the floor's rate where the engine runs the prompts: one that does not fit,
                # or that the engine refuses, has no speed (the text prints none)
                "floor_prompt_tok_s": f.tokens_per_s if self.runs else None,
                "bound": f.bound, "flops": f.flops, "bytes_moved": f.bytes_moved,
                "intensity_flop_per_byte": f.intensity_flop_per_byte,
                "weight_intensity_flop_per_byte": f.weight_intensity_flop_per_byte,
                "expected": expected,
                # the engine's tokens a step, under simulate's and plan's name (vLLM's flag's)
                "max_num_batched_tokens": None if self.step_budget is None
                else self.step_budget[0],
                # whether a prompt past the budget runs in chunks (TensorRT-LLM: only with its
                # enable_chunked_prefill), or whole
                "chunked_prefill": self.chunks,
                # counted where the engine runs the prompts (cli_prefill prices no steps
                # else): null beside a null expectation, not a stub 1 under a smaller budget
                "prompt_steps": self.expected.prompt_steps if self.runs else None,
                "engine_max_batch": self.pool_batch,
                # the prompts the pool alone holds, before the seats (max_num_seqs; llama.cpp's
                # -np, given or its default 4) cap engine_max_batch: decode's key
                "conversations": self.pool_conversations,
                "max_model_len": None if self.seat is None else self.seat.max_model_len,
                # as decode's engine_max_batch[].settings: the version's rules named there too
                "settings": None if self.seat is None else json_pool_settings(
                    self.expected.engine, self.fit_pool_settings if self.fit_seat
                    else self.pool_settings),
                # the prompts the run priced holds (llama.cpp's -ngl all, where --fit starts
                # another: engine_max_batch is then --fit's); null without a memory model
                "priced_run_batch": None if self.seat is None else self.seat.held,
                "at_max_model_len": self._longest_dict(),
                # where the engine refuses the prompt (expected_none_code over_max_num_tokens)
                # and --enable_chunked_prefill would run it: that run's expectation, else null
                "with_enable_chunked_prefill": self._chunked_dict(),
                "cautions": self.cautions, **fit_dict(f)}

    def text_lines(self) -> list[str]:
        f, dep, e = self.floor, self.deployment, self.expected
        ridge = f"ridge {dep.dense_ridge_flop_per_byte:,.0f}"
        step_ridge = ridge_point(dep.peak_flops_per_s, dep.bandwidth_bytes_per_s)
        if dep.dense_blended:  # Qwen3.6-35B-A3B-NVFP4: fp8 attention beside bf16 layers
            ridge += f" at the dense matmuls' {dep.dense_dtype_label} blend"
        elif dep.compute_dtype != dep.dense_compute_dtype:  # gpt-oss: bf16 attention, fp4 experts
            ridge += f" at {dep.dense_compute_dtype}, {step_ridge:,.0f} at {dep.compute_dtype}"
        # the verdict leads where it does not run: fit's DOES NOT FIT where the memory or the
        # engine refuses the prompt (as decode says it), DOES NOT RUN AT ONCE past its pool
        on = engine_release(e.engine, self.engine_version, named=True)
        lines = [line] if (line := refusal_headline([self.headline_row], on, PREFILL)) else []
        lines += [
            deployment_line(self.deployment),
            f"prefill floor, {f.batch} x {f.prompt_len:,}-token {plural(f.batch, 'prompt')}"
            + floor_heading_end(self.runs, f.fit.fits, self.fit_runs, e.engine),
            f"  time       {fmt_latency(f.time_s)} (bound by {f.bound}) = TTFT floor",
            # a deployment that does not fit gets no throughput, as decode gives it none; nor
            # does one that fits but that the engine would not run (the first line says why)
            f"  throughput {f.tokens_per_s:,.0f} prompt tok/s" if self.runs else
            f"  throughput none: {engine_name(e.engine)} would not run it (first line)"
            if f.fit.fits else "  throughput none: it does not run",
            f"  intensity  {f.weight_intensity_flop_per_byte:,.0f} FLOP per byte of weights, "
            f"{f.intensity_flop_per_byte:,.0f} over all bytes ({ridge})",
        ]
        lines += [f"note: {self.ubatch_note}"] if self.ubatch_note else []
        lines += [f"caution: {c}" for c in self.cautions]
        if not f.fit.fits:
            return [*lines, *no_expectation(self.deployment, e.engine, self.cautions)]
        # the release the pool and the step budget were sized as, as fit's header names it
        if not self.runs:
            return [*lines, f"expected on {on}: nothing (first line)"
                    + (f"; with --enable_chunked_prefill: {self._expected_words}, in "
                       f"{e.prompt_steps:,} steps of at most {(self.step_budget or (0,))[0]:,} "
                       f"tokens  [{e.source}]" if self.chunked_alternative else ""),
                    *([self.longest_line] if self.longest_line else [])]
        return [*lines, f"expected on {on}: {self._expected_words}  [{e.source}]"]

    @property
    def _expected_words(self) -> str:
        """The expectation's time, band and prompt speed: '1,442.5 ms (1,282.8–1,754.0) =
        TTFT, 11,092 prompt tok/s'."""
        e, f = self.expected, self.floor
        return (f"{band_words(e)} {ttft_words(e)}, "
                f"{f.batch * f.prompt_len / e.time_s:,.0f} prompt tok/s")


def ttft_words(e: Expectation) -> str:
    """Whose time to first token an expected prefill is: '= TTFT', or, where several prompts
    run over several steps, the last prompt's, the first's beside it (16 prompts of 2,000
    tokens on an H100 under vLLM's 8,192 a step: 882.3 ms the last's, 225.6 ms the first's,
    where '= TTFT' had read as every prompt's)."""
    if e.first_time_s is None or e.first_time_s >= e.time_s:
        return "= TTFT"
    return f"= the last prompt's TTFT (the first's: {fmt_latency(e.first_time_s)})"


def band_words(e: Expectation) -> str:
    """An expected prefill and its band in one unit, seconds where the band reaches 100 s:
    '456.3 ms (405.8–554.8)', '259.9 s (231.2–316.1)'."""
    unit = latency_unit((e.time_s, e.low_s, e.high_s))
    return (f"{latency_figure(e.time_s, unit)} {unit} ({latency_figure(e.low_s, unit)}–"
            f"{latency_figure(e.high_s, unit)})")


def _ridge_step(dep: Deployment) -> Step:
    """The ridge the intensity line sets the prompt against: the dense weights' matmul dtype's
    peak ÷ the bandwidth, both the tensor-parallel group's as the prefill time counts them (the
    same ratio as one card's: Deployment.dense_ridge_flop_per_byte)."""
    acc, tp, dtype = dep.accelerator, dep.tensor_parallel_size, dep.dense_compute_dtype
    bandwidth = acc.memory_bandwidth_bytes_per_s * tp
    peak = dep.peak_at(dtype) * tp  # the engine's, as the step prices it
    return step("ridge point", f"peak {dtype} ÷ bandwidth (the dense weights' matmul dtype)",
                q("ridge", peak / bandwidth, "FLOP/byte"),
                q(f"peak {dtype}", peak / 1e12, "TFLOP/s",
                  f"{tp} x {acc.id}: " + "; ".join(filter(None, (
                      acc.source_of("peak_flops"), dep.peak_note_at(dtype))))),
                q("bandwidth", bandwidth / 1e12, "TB/s",
                  f"{tp} x {acc.id}: {acc.source_of('memory_bandwidth_bytes_per_s')}"))


@dataclass(frozen=True)
class PrefillComparison(ByCard):
    """The same prompts on several accelerators: floor and expected time to first token, a
    row per card and prompt length."""

    reports: tuple[PrefillReport, ...]
    not_run: tuple[NotRun, ...] = ()  # the cards named that cannot run it, and why

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **not_run_dict(self.not_run, "accelerator")}

    def text_lines(self) -> list[str]:
        first = self.reports[0]
        d, f0 = first.deployment, first.floor
        prompts = list(dict.fromkeys(r.floor.prompt_len for r in self.reports))
        several = len(prompts) > 1
        rows = []
        unit = _table_unit(self.reports)
        for r in self.reports:
            f, e = r.floor, r.expected
            tokens = f.batch * f.prompt_len
            rows.append([r.deployment.gpus_label,
                         *([r.deployment.engine] if self.engine_per_card else []),
                         *([f"{f.prompt_len:,}"] if several else []),
                         latency_figure(f.time_s, unit),
                         latency_figure(e.time_s, unit) if r.runs else r.short_why,
                         f"{tokens / e.time_s:,.0f}" if r.runs else "",
                         f"{r.deployment.dense_ridge_flop_per_byte:,.0f}", bound_label(f.bound)])
        from ridgeline.offload import placement_lines

        asked = (f"{f0.prompt_len:,}-token prompt" if not several else
                 f"prompts of {', '.join(f'{n:,}' for n in prompts)} tokens")
        return [f"{d.model.name}, weights {d.weights.label}: {f0.batch} x {asked} on "
                f"{', '.join(dict.fromkeys(r.expected.engine for r in self.reports))}"
                + (" (each card its own)" if self.engine_per_card else "")
                + ", one row per accelerator" + (" and prompt" if several else ""), "",
                *table(rows, ["accelerator", *(["engine"] if self.engine_per_card else []),
                              *(["prompt"] if several else []), f"floor {unit}",
                              f"expected TTFT {unit}", "prompt tok/s", "ridge", "bound"]),
                *(e.line for e in self.not_run),
                *placement_lines([r.deployment for r in self.reports]),
                *(f"{r.deployment.gpus_label}" + (f", {r.floor.prompt_len:,} tokens"
                                                   if several else "")
                  + f": {r.none_reason}" for r in self.reports if r.floor.fit.fits and not r.runs),
                *(f"{r.deployment.gpus_label}" + (f", {r.floor.prompt_len:,} tokens"
                                                   if several else "")
                  + f": {r.longest_line}" for r in self.reports if r.longest_line),
                *self._passes_line(),
                *first_prompt_lines(self.reports, several_cards=True),
                "", "`--gpu NAME` alone for one card's breakdown",
                *(f"caution: {c}" for c in dict.fromkeys(
                    c for r in self.reports for c in r.more_cautions))]

    def _passes_line(self) -> list[str]:
        """Which rows' expectations count several passes over the weights (a serving
        engine's steps of its token budget, llama.cpp's ubatches)."""
        several = [f"{r.deployment.gpus_label} at {r.floor.prompt_len:,}: "
                   f"{r.expected.prompt_steps:,}" + (
                       f" steps of {r.step_budget[0]:,}" if r.step_budget else " ubatches")
                   for r in self.reports if r.runs and r.expected.prompt_steps > 1]
        if not several:
            return []
        return ["expected TTFT counts each pass the engine makes over the weights (steps of "
                f"its token budget, or ubatches): {'; '.join(several)}"]


@dataclass(frozen=True)
class PrefillSeries:
    """Several prompt lengths on one deployment: a row each, floor beside expectation."""

    reports: tuple[PrefillReport, ...]

    @property
    def deployment(self) -> Deployment:
        return self.reports[0].deployment

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(replace(st, label=f"{r.floor.prompt_len:,}-token prompt: {st.label}")
                     for r in self.reports for st in r.steps)

    def to_dict(self) -> dict[str, Any]:
        first = self.reports[0]
        return {**identity_json(self.deployment, first.engine_version),
                **card_price_json(self.deployment),
                "deployment": deployment_line(self.deployment),
                "cpu_offload": cpu_offload_json(self.deployment).get("cpu_offload"),
                # llama.cpp's layers in host memory (-ngl, --n-cpu-moe), or null
                "offload": offload_json(self.deployment),
                "prompts": [r.to_dict() for r in self.reports]}

    def _headline(self) -> tuple[list[str], bool]:
        """The table's first line where a prompt does not run (refusal_headline, in prefill's
        words), and whether it gives the engine's refusal (then the lines under the table do
        not repeat it): Llama-3.1-70B at fp8 on one H100, prompts of 2,000 and 40,000: 'DOES
        NOT FIT on vLLM 0.34 for any of the 2 prompts: vLLM would refuse to start …; and
        40,000 tokens does not fit in memory: …'."""
        first = self.reports[0]  # one deployment: its engine and release are every row's
        on = engine_release(first.expected.engine, first.engine_version, named=True)
        line = refusal_headline([r.headline_row for r in self.reports], on, PREFILL)
        said = len({r.none_reason for r in self.reports if r.floor.fit.fits and not r.runs}) == 1
        return ([line] if line else []), said

    def text_lines(self) -> list[str]:
        dep, e0 = self.deployment, self.reports[0].expected
        lines, said = self._headline()
        rows = []
        unit = _table_unit(self.reports)
        for r in self.reports:
            f, e = r.floor, r.expected
            tokens = f.batch * f.prompt_len
            rows.append([f"{f.prompt_len:,}", latency_figure(f.time_s, unit),
                         *([latency_figure(e.time_s, unit), latency_figure(e.low_s, unit) + "–"
                            + latency_figure(e.high_s, unit), f"{tokens / e.time_s:,.0f}"]
                           if r.runs
                           else [r.short_why, "", ""]),
                         f"{f.weight_intensity_flop_per_byte:,.0f}", bound_label(f.bound),
                         "yes" if f.fit.fits else "NO"])
        batch = self.reports[0].floor.batch
        lines += [deployment_line(dep),
                  *table(rows, ["prompt", f"floor {unit}", f"expected TTFT {unit}", "band",
                                "prompt tok/s", "FLOP/byte", "bound", "fits in memory"]),
                  f"{batch} x each prompt; floor: the article's lower bound on time to first "
                  f"token; expected: step_cost with the {e0.engine} profile [{e0.source}]; "
                  "prompt tok/s: at the expected TTFT (the floor's is a prompt alone's); "
                  f"FLOP/byte: per byte of weights (ridge "
                  f"{dep.dense_ridge_flop_per_byte:,.0f}); a prompt alone for its breakdown",
                  *(line for r in self.reports if r.floor.fit.fits and not r.runs
                    for line in (f"{r.floor.prompt_len:,} tokens: "
                                 + ("the first line's refusal" if said else r.none_reason),
                                 *([f"  {r.longest_line}"] if r.longest_line else []))),
                  *(f"note: {n}" for n in dict.fromkeys(r.ubatch_note for r in self.reports
                                                          if r.ubatch_note)),
                  *first_prompt_lines(self.reports, several_cards=False),
                  *(f"caution: {c}" for c in dict.fromkeys(c for r in self.reports
                                                             for c in r.cautions))]
        return lines


def _table_unit(reports: tuple[PrefillReport, ...]) -> str:
    """The one unit a table of prompts' floors and expected TTFTs (their bands too) reads
    in: seconds where one reaches 100 s (a 128k prompt on an L4), else ms."""
    return latency_unit(t for r in reports for t in (
        r.floor.time_s, *((r.expected.time_s, r.expected.low_s, r.expected.high_s)
                          if r.runs else ())))


def first_prompt_lines(reports: tuple[PrefillReport, ...], several_cards: bool) -> list[str]:
    """A table's note where an expected TTFT is the last of several prompts' (ttft_words):
    whose it is and the first prompt's beside it, per row (card and prompt length)."""
    rows = [(f"{r.deployment.gpus_label} at " if several_cards else "")
            + f"{r.floor.prompt_len:,}: {fmt_latency(r.expected.first_time_s)}"
            for r in reports if r.runs and r.expected.first_time_s is not None
            and r.expected.first_time_s < r.expected.time_s]
    if not rows:
        return []
    return [f"expected TTFT: the last of the {reports[0].floor.batch} prompts' (they run over "
            f"several steps); the first prompt's: {'; '.join(rows)}"]


def with_fit_seat(report: PrefillReport, seat: EngineSeats, described: str,
                  host_bytes: float, unplaced: bool = False) -> PrefillReport:
    """``report`` (llama.cpp, priced as -ngl all's run) with its engine_max_batch as
    llama-server's default --fit starts it at this prompt length (``seat``), as decode's
    max-batch line (reports.decode.with_fit_seats): gemma-2-9b on an A100-80GB, 4,096-token
    prompts, 45 whether --batch is 1 or 64, where -ngl all's run holds 46. The prompt stays
    priced as it was; decode's cautions say where the batch is past the count, or -ngl all
    holds none but --fit runs some (reports.decode.fit_seat_notes)."""
    from ridgeline.capacity import default_slots
    from ridgeline.reports.decode import fit_seat_notes

    f = report.floor
    seat = default_slots(seat, report.deployment.engine)  # -np not given: the default slots
    priced = 0 if report.seat is None else report.seat.held or 0
    past = [f.batch] if f.batch > (seat.held or 0) and report.runs else []
    notes = fit_seat_notes(report.deployment, seat, priced, past, host_bytes, described,
                           unplaced)
    return replace(report, fit_seat=seat, fit_pool_settings=described,
                   more_cautions=(*report.more_cautions, *notes))

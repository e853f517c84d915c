"""`ridgeline observe`'s latency check: the steps the observed load builds (the batch's decodes,
each prompt in a step of its own beside them, or the prompt tokens the load brings a step on
average where the source cannot say how many prompts a step starts), the mean time ridgeline
predicts for them, the time the source measured, and how far apart they are. With a drafter
whose acceptance the source reports, each decode step is its verify step (spec_decode.py), and
a token's time is that step over the tokens it keeps a request."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ridgeline.chunked_prefill import (
    MAX_PREFILL_STEPS,
    chunks_prefill,
    prompt_steps_beside,
    steady_step_time_s,
)
from ridgeline.cost import Seq, decode_batch, step_cost, step_time_s
from ridgeline.reports.observe_pool import ObservedPool
from ridgeline.spec_decode import SpecDecode, SpecStep, spec_step, verify_row_tokens
from ridgeline.stages import micro_batch

# batch ÷ ITL and the generation rate count the same tokens: apart by more than this, one of
# the readings is not what it seems
RATES_APART = 2.0


@dataclass(frozen=True)
class ObservedLatency(ObservedPool):
    """The pool check, with the step the load builds and its time, predicted and measured."""

    # the server's drafter, its acceptance read off the source's acceptance length
    # (SpecDecode.observed): each decode step is its verify step; None prices plain decode
    spec: SpecDecode | None = None

    @property
    def step_budget(self) -> int:
        """The tokens a step takes at most: max_num_batched_tokens (SGLang's
        chunked_prefill_size, TensorRT-LLM's max_num_tokens), the engine's default here."""
        return self.modelled_pool.profile_tokens

    @property
    def prompt_ratio(self) -> tuple[float, str] | None:
        """Prompt tokens the load brings per generated token, and from what: the two rates
        where the source gives both (prompt tok/s ÷ generation tok/s), else a bench's mean
        input ÷ mean output; None with neither."""
        o = self.obs
        if o.prompt_tok_s is not None and o.generation_tok_s:
            return o.prompt_tok_s / o.generation_tok_s, "prompt tok/s ÷ generation tok/s"
        if o.mean_prompt_tokens is not None and o.mean_output_tokens:
            return o.mean_prompt_tokens / o.mean_output_tokens, "mean prompt ÷ mean output"
        return None

    @cached_property  # read by the prediction, the gap and the text: one pool sizing
    def prompt_tokens_per_step(self) -> int:
        """Prompt tokens an average step carries beside its decodes: in a steady state
        prompts arrive at prompt_ratio of them per decode, each step holding the batch's
        share of the tokens it generates (tokens_per_step a request), less prefix-cache hits,
        capped at the step budget its decodes leave (2,389 prompt tok/s beside 831 generated
        at batch 34: 98 a step)."""
        b, ratio = self.batch, self.prompt_ratio
        if b is None or ratio is None:
            return 0
        share = ratio[0] * (1 - (self.obs.cached_prompt_share or 0.0))  # a hit is not computed
        return max(0, min(round(b * self.tokens_per_step * share),
                          self.step_budget - self.decode_tokens_per_step))

    @property
    def decode_tokens_per_step(self) -> int:
        """The step budget the batch's decodes take: a token a request, or with drafts priced
        its fed token and each draft it proposed (a verify step of 40 requests and 3 drafts:
        160; half of them drafting: 100, verify_row_tokens)."""
        drafted, rows = self.spec_step, round(self.batch or 0.0)
        if drafted is None or not rows:
            return rows
        return sum(verify_row_tokens(rows, drafted.spec.drafts, drafted.drafted_share,
                                     drafted.drafts_each))

    @property
    def chunk_context(self) -> int:
        """The tokens of its prompt already cached when a prompt's chunk runs, on average:
        half the mean prompt where the source gives it, else half the context each running
        request holds (its prompt and part of its output: a little long)."""
        prompt = self.obs.mean_prompt_tokens
        return round((prompt if prompt else self.context) / 2)

    @cached_property  # read by the prediction and the text
    def prompts_per_step(self) -> float | None:
        """Prompts the load starts a step, on average: batch × tokens_per_step × prompt_ratio
        ÷ the mean prompt (1,024 in and 256 out at batch 8: one every 32 steps; with 2 tokens
        a step, one every 16); None without a mean prompt length or a prompt ratio."""
        b, ratio, prompt = self.batch, self.prompt_ratio, self.obs.mean_prompt_tokens
        if b is None or ratio is None or not prompt:
            return None
        return b * self.tokens_per_step * ratio[0] / prompt

    @cached_property  # read by the prediction, the text and the worked step
    def prompt_steps(self) -> tuple[tuple[Seq, ...], ...]:
        """The steps one prompt runs in, as the engine schedules it: its computed tokens (the
        mean prompt less its prefix-cache hits) beside the batch's decodes, in one step, or
        in chunks of the step budget the decodes leave where longer (prompt_steps_beside); the
        other steps decode alone. Empty where the source gives no mean prompt length, or its
        prompts keep every step busy (as many of their steps a step as there are steps), both
        priced as the average step instead (prompt_tokens_per_step)."""
        b, each, prompt = self.batch, self.prompts_per_step, self.obs.mean_prompt_tokens
        if b is None or not each or not prompt:
            return ()
        computed = round(prompt * (1 - (self.obs.cached_prompt_share or 0.0)))
        room = self.step_budget - self.decode_tokens_per_step
        if computed < 1 or room < 1:
            return ()
        count = -(-computed // room)
        if each * count >= 1 or count > MAX_PREFILL_STEPS:
            return ()
        steps = prompt_steps_beside(computed, round(prompt) - computed, room,
                                    chunks_prefill(self.deployment))
        return tuple(tuple(step) for step in steps)

    def step_times_ms(self) -> tuple[float, tuple[float, ...]]:
        """The decode step alone and each of a prompt's steps (prompt_steps) beside it, in ms:
        one micro-batch's decodes at the context, priced by step_time_s."""
        micro = micro_batch(self.deployment, max(1, round(self.batch or 0.0)))
        decodes = decode_batch(micro, self.context)
        return (step_time_s(self.deployment, decodes, self.profile) * 1e3,
                tuple(step_time_s(self.deployment, [*decodes, *step], self.profile) * 1e3
                      for step in self.prompt_steps))

    @property
    def prompt_spread_reason(self) -> str | None:
        """Why the prediction spreads the prompt work evenly over the steps rather than
        running each prompt in its own (prompt_steps); None where it does not, or carries
        none."""
        if self.prompt_steps or not self.prompt_tokens_per_step:
            return None
        if self.prompts_per_step is None:
            return ("the source gives no mean prompt length to run each prompt in a step of "
                    "its own")
        return "its prompts keep every step busy"

    @property
    def prompt_work_label(self) -> str:
        """The prompt work the predicted step carries, as the text says it: each prompt in its
        own steps, or the average a step carries (and why), or '' with none."""
        steps, each = self.prompt_steps, self.prompts_per_step
        if steps and each:
            tokens = sum(s.new_tokens for step in steps for s in step)
            cached = steps[0][0].context_tokens
            what = f"{tokens:,} tokens" + (f" computed of {tokens + cached:,} (the rest from "
                                          "the prefix cache)" if cached else "")
            where = ("in its own step" if len(steps) == 1 else
                     f"in {len(steps)} chunks of at most "
                     f"{self.step_budget - self.decode_tokens_per_step:,} tokens")
            share = ("about one step in" if len(steps) == 1 else
                     f"about {len(steps)} steps in")
            return (f"each prompt, {what}, runs {where} beside the batch's decodes, {share} "
                    f"{1 / each:,.0f}; the other steps decode alone")
        chunk = self.prompt_tokens_per_step
        if not chunk:
            return ""
        why = self.prompt_spread_reason
        return (f"each step a decode of the batch and the {chunk:,} prompt tokens the load "
                "brings per step, on average" + (f": {why}" if why else ""))

    @cached_property  # read by the prediction, the floor, the text and the worked step
    def spec_step(self) -> SpecStep | None:
        """The verify step of the observed batch at the context (spec_step: one micro-batch,
        the target over each row's drafts + 1 tokens, then the drafter's passes), where the
        drafter and its acceptance are known; None elsewhere. Where the source counts the
        steps that drafted (Observation.spec_drafted_share, spec_drafts_per_draft: vLLM's
        counters, a bench's), the target runs only the tokens the rows carried: half the rows
        drafting 3 of 40, 100 tokens, not 160."""
        b = self.batch
        if self.spec is None or b is None or b < 0.5 or not self.fits:
            return None
        o = self.obs
        return spec_step(self.deployment, self.spec, max(1, round(b)), self.context,
                         self.profile, o.spec_drafted_share or 1.0, o.spec_drafts_per_draft)

    @property
    def tokens_per_step(self) -> float:
        """The tokens a step keeps a request where a verify step is priced, else 1: over all
        its decode steps where the source counts them, else the acceptance length
        (Observation.spec_tokens_per_decode_step: an n-gram window of 1.5 tokens a step over
        all, 2.0 over the steps that drafted, divides by 1.5)."""
        if self.spec_step is None:
            return 1.0
        return self.obs.spec_tokens_per_decode_step or self.spec_step.spec.tokens_per_step

    @property
    def tokens_per_step_over(self) -> str | None:
        """Which steps tokens_per_step counts where a verify step is priced: "all decode
        steps" (the source's generation and accepted tokens), or "drafted steps" (an
        acceptance length, which leaves out the steps that proposed no draft); else None."""
        if self.spec_step is None:
            return None
        return "all decode steps" if self.obs.spec_tokens_per_request_step else "drafted steps"

    @property
    def decode_step_ms(self) -> float:
        """The batch's decode step alone, in ms: its verify step where drafts are priced,
        else its plain decodes (step_times_ms)."""
        drafted = self.spec_step
        return drafted.step_s * 1e3 if drafted is not None else self.step_times_ms()[0]

    @property
    def predicted_step_ms(self) -> float | None:
        """The mean step the load builds (plain_step_ms); with drafts priced, the verify step
        in place of the plain decodes it contains, the prompt work they carry kept (a 20 ms
        verify step where decode alone takes 15 and the mean plain step 16: 21 ms)."""
        plain = self.plain_step_ms
        if plain is None or self.spec_step is None:
            return plain
        return self.decode_step_ms + self.prompt_work_ms

    @property
    def prompt_work_ms(self) -> float:
        """What the load's prompt work adds to the mean step: the plain mean step less its
        decodes alone (step_times_ms); 0 without prompt work, or without a prediction."""
        plain = self.plain_step_ms
        if plain is None or not (self.prompt_tokens_per_step or self.prompt_steps):
            return 0.0
        return plain - self.step_times_ms()[0]

    @property
    def predicted_itl_ms(self) -> float | None:
        """The time between a request's tokens: the mean step (predicted_step_ms) over the
        tokens it keeps a request (tokens_per_step: 1 without drafts priced), as an engine's
        ITL histogram times each streamed token (a 21 ms step keeping 2.5 tokens: 8.4 ms)."""
        step = self.predicted_step_ms
        return None if step is None else step / self.tokens_per_step

    @cached_property  # read by the prediction, the slowdown and the text
    def plain_step_ms(self) -> float | None:
        """The mean step the observed load builds without drafts, one micro-batch's decodes at
        the context: with each prompt in its own steps (prompt_steps), steady_step_time_s;
        else the step carrying the average prompt tokens (prompt_tokens_per_step) beside its
        decodes."""
        b = self.batch
        if b is None or b < 0.5 or not self.fits:
            return None
        micro = micro_batch(self.deployment, max(1, round(b)))  # a token's trip: one micro-batch
        work = decode_batch(micro, self.context)
        steps = self.prompt_steps
        if steps:
            return steady_step_time_s(self.deployment, self.profile, work,
                                      [list(step) for step in steps],
                                      self.prompts_per_step or 0.0) * 1e3
        chunk = self.prompt_tokens_per_step
        if chunk:  # the prompt work the load spreads over its steps rides in them
            work = [*work, Seq(chunk, self.chunk_context)]
        return step_cost(self.deployment, work, self.profile).time_s * 1e3

    @property
    def mixed_step_slowdown(self) -> float:
        """How much slower ridgeline prices the window's mean step (predicted_step_ms, its
        prompt work included) than the batch's decodes alone (decode_step_ms), the step a
        decode row for
        calibrate is read as: 0 where the steps carry no prompt work (32 decodes of
        Llama-3.1-8B on an H100, a 1,000-token prompt in its own step one step in 50: 11.4
        ms against 10.9, 0.04)."""
        mixed = self.predicted_step_ms
        if not (self.prompt_tokens_per_step or self.prompt_steps) or not mixed:
            return 0.0
        return mixed / self.decode_step_ms - 1

    @property
    def single_scrape(self) -> bool:
        """One /metrics scrape: its gauges are an instant, its histograms the server's life."""
        return self.obs.kind == "metrics" and self.obs.duration_s is None

    @property
    def measured_itl_ms(self) -> float | None:
        """The mean time between a request's tokens over the window: the ITL histogram's
        mean, else what the generation rate implies at the running batch (batch ÷ tok/s);
        None from a single scrape (its histogram is the server's lifetime)."""
        if self.single_scrape:
            return None
        itl = self.obs.latency_ms.get("itl", {}).get("mean")
        if itl and not math.isnan(itl):
            return itl
        return self.rate_itl_ms

    @property
    def rate_itl_ms(self) -> float | None:
        """The time a token implied by the running gauge and the generation rate: batch ÷
        generation tok/s (34 running at 831 tok/s: 40.9 ms)."""
        b, rate = self.batch, self.obs.generation_tok_s
        return b / rate * 1e3 if b and rate and not self.single_scrape else None

    @property
    def rates_apart(self) -> float | None:
        """How far the ITL histogram and batch ÷ generation rate disagree (the larger ÷ the
        smaller), where the batch is the engine's gauge; a bench's batch is derived from
        the two, so they cannot."""
        itl = self.obs.latency_ms.get("itl", {}).get("mean")
        implied = self.rate_itl_ms
        if not (itl and implied and self.obs.running) or math.isnan(itl):
            return None
        return max(itl, implied) / min(itl, implied)

    def gaps(self) -> dict[str, float]:
        """Predicted ÷ measured − 1; none from a single scrape, whose latency histograms cover
        the server's lifetime and whose batch is one instant's."""
        out: dict[str, float] = {}
        if self.single_scrape:
            return out
        predicted = self.predicted_itl_ms
        measured = self.obs.latency_ms.get("itl", {}).get("mean")
        if predicted and measured and not math.isnan(measured):
            out["itl"] = predicted / measured - 1
        b = self.batch
        if predicted and b and self.obs.generation_tok_s:
            out["generation_tok_s"] = (b / (predicted / 1e3)) / self.obs.generation_tok_s - 1
        return out

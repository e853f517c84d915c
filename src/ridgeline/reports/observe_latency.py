"""`ridgeline observe`'s latency check: the step the observed load builds (the batch's decodes
beside the prompt tokens the load brings it), the time ridgeline predicts for it, the time the
source measured, and how far apart they are."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ridgeline.cost import Seq, decode_batch, step_cost
from ridgeline.reports.observe_pool import ObservedPool
from ridgeline.stages import micro_batch

# batch ÷ ITL and the generation rate count the same tokens: apart by more than this, one of
# the readings is not what it seems
RATES_APART = 2.0


@dataclass(frozen=True)
class ObservedLatency(ObservedPool):
    """The pool check, with the step the load builds and its time, predicted and measured."""

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
        share, less prefix-cache hits, capped at the engine's step budget (2,389 prompt tok/s
        beside 831 generated at batch 34: 98 a step)."""
        b, ratio = self.batch, self.prompt_ratio
        if b is None or ratio is None:
            return 0
        share = ratio[0] * (1 - (self.obs.cached_prompt_share or 0.0))  # a hit is not computed
        return max(0, min(round(b * share), self.step_budget - round(b)))

    @property
    def chunk_context(self) -> int:
        """The tokens of its prompt already cached when a prompt's chunk runs, on average:
        half the mean prompt where the source gives it, else half the context each running
        request holds (its prompt and part of its output: a little long)."""
        prompt = self.obs.mean_prompt_tokens
        return round((prompt if prompt else self.context) / 2)

    @property
    def predicted_itl_ms(self) -> float | None:
        b = self.batch
        if b is None or b < 0.5 or not self.fits:
            return None
        micro = micro_batch(self.deployment, max(1, round(b)))  # a token's trip: one micro-batch
        work = decode_batch(micro, self.context)
        chunk = self.prompt_tokens_per_step
        if chunk:  # the prompt work the load spreads over its steps rides in them
            work = [*work, Seq(chunk, self.chunk_context)]
        cost = step_cost(self.deployment, work, self.profile)
        return cost.time_s * 1e3

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

"""`ridgeline observe`: the batch you are really getting, on the roofline, and which wall."""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from ridgeline.capacity import context_refusal
from ridgeline.cost import Seq, mean_decode_context
from ridgeline.dense_ridge import dense_ridge_steps
from ridgeline.deployment import Deployment
from ridgeline.engine_pool import (
    LOG_POOL_UNREAD,
    EnginePool,
    context_from_kv_usage,
    fill_at_context,
    reported_pool,
)
from ridgeline.engines import EngineProfile
from ridgeline.explain import Quantity, Step, q, step
from ridgeline.memory import EngineSettings
from ridgeline.observation import Observation, latencies_s, seconds, stats
from ridgeline.render import table
from ridgeline.reports.observe_drafts import unpriced_drafts_note, verify_step
from ridgeline.reports.observe_floor import (
    refuse_rate_past_peak,
    server_computed_tok_s,
    server_gpus,
    server_peak_tok_s,
)
from ridgeline.reports.observe_latency import RATES_APART
from ridgeline.reports.observe_verdict import ObserveVerdict
from ridgeline.reports.utilization import billed_scope
from ridgeline.roofline import batch_for_intensity, first_whole_batch
from ridgeline.spec_decode import SpecDecode
from ridgeline.stages import micro_batches
from ridgeline.units import GIB, fmt_share, latency_figure, latency_unit
from ridgeline.vllm_cache_dtype import VLLM_FP8_CACHE_DTYPES, auto_words

# the most an emitted decode row's prompt steps may slow it (ridgeline's mean step against its
# decodes alone): a decode row's typical error, the held-out median of decode_tok_s_per_user
# (9.6 %, docs/accuracy.md; 10 % its round figure), so that what the row leaves out stays
# within the scatter calibrate already fits through; a mixed load past it (a bench at 1 prompt
# step in 4: 51 %) would pull the fit by more than a typical row's error, and is left out
MIXED_ROW_SLACK = 0.10
# data-parallel engines whose busiest batch is this many times their mean run steps far enough
# apart that the measurement, weighted by each engine's tokens, is no step at the mean batch
ENGINES_APART = 1.5


@dataclass(frozen=True)
class ObserveReport(ObserveVerdict):
    """The verdict with its worked steps, as text, JSON and rows for `ridgeline calibrate`."""

    steps: tuple[Step, ...] = field(default=())
    # the counters' mean context and the sequences of it the modelled pool holds, where that
    # is fewer than the running batch and the context was read off the KV fill instead
    unheld_mean: tuple[int, int] | None = None
    # the tokens a running request holds by the KV cache's fill, and how that was read, where
    # they are over FILL_OVER_MEAN × the --context given: the pool, the wall and the
    # prediction priced at --context say less than the server holds
    fill_over_given: tuple[int, str] | None = None
    # the same from a modelled pool's fill where over FILL_OVER_MEAN × the counters' mean,
    # which is kept (observe_report): the fill is only as good as the deployment described
    fill_over_mean: tuple[int, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        o, pool, d = self.obs, self.engine_pool, self.deployment
        modelled = EnginePool.modelled(self.modelled_pool)
        return {
            "source": o.source, "kind": o.kind, "duration_s": o.duration_s,
            # the deployment described, as the text names it (`on 1 x h100-sxm`, `(vllm; …)`)
            "model": d.model.name, "accelerator": d.accelerator.id, "num_gpus": d.num_gpus,
            "engine": d.engine,
            "running": stats(o.running), "waiting": stats(o.waiting),
            "kv_usage": stats(o.kv_usage),
            # a count (the counter's increase, whole); null where the source has none
            "preemptions": None if o.preemptions is None else round(o.preemptions),
            # the generated tokens a second under simulate's name for them
            "prompt_tok_s": o.prompt_tok_s, "output_tok_s": o.generation_tok_s,
            # SGLang's sglang:gen_throughput over the window (each engine's); null elsewhere
            "gen_throughput_tok_s": o.gen_throughput_tok_s,
            # vLLM's releases the page's metric names allow ("0.10.2 to 0.11"), and the one
            # the pool was sized at from them (no cache_config_info, no --engine-version)
            "engine_version_range": None if o.vllm_releases is None
            else o.vllm_releases.text(),
            "engine_version_inferred": o.engine_version_inferred,
            # in seconds, as every other command's latencies; null where the source has none
            # the data-parallel engines the source reports (vLLM's "engine" label, SGLang's
            # DP-attention ranks) under utilization's and plan's name for that count
            "latency_s": latencies_s(o.latency_ms) or None, "data_parallel_size": o.engines,
            "swapped": stats(o.swapped),
            # the busiest data-parallel engine's running at each reading: what fills its pool
            "busiest_engine_running": stats(o.busiest_running),
            "cached_prompt_share": o.cached_prompt_share,
            "pool_tokens_reported": None if pool is None else pool.tokens,
            "pool_blocks_reported": None if pool is None else pool.blocks,
            "pool_tokens_modelled": modelled.tokens, "pool_blocks_modelled": modelled.blocks,
            "kv_cache_groups": None if pool is None or pool.groups is None
            else pool.groups.count,
            "prompt_tokens_per_step": self.prompt_tokens_per_step,
            "prompts_per_step": self.prompts_per_step,
            "prompt_step_tokens": [sum(s.new_tokens for s in step)
                                   for step in self.prompt_steps],
            "batch": self.batch, "stage_batch": self.stage_batch,
            "ridge_flop_per_byte": self.ridge,
            "first_whole_batch_to_ridge": first_whole_batch(batch_for_intensity(
                self.ridge, d.bytes_per_weight_split[0])),
            "fits": self.fits,
            # why the engine serves no sequence of the context at all (past the model's
            # positions), as the text's does-not-fit line says; None where it would
            "refusal": None if self.fits else context_refusal(d, self.context) or None,
            # the sequences of the context the engine runs at once, prefill's and decode's
            # engine_max_batch; what caps it: "seats" (max_num_seqs, max_running_requests,
            # llama-server's slots) or "pool"; and the conversations of the context the pool
            # alone holds, as fit, kv, utilization, decode and simulate name them
            "fraction_of_arithmetic": self.fraction, "engine_max_batch": self.pool_batch,
            "engine_max_batch_capped_by": "seats" if self.seat_capped else "pool",
            "conversations": self.pool_sequences,
            # the conversation's length the pool is read at, every command's context_len
            "context_len": self.context, "context_len_source": self.context_source,
            "wall": self.wall, "lever": self.lever,
            "predicted_itl_s": seconds(self.predicted_itl_ms),
            "predicted_step_s": seconds(self.predicted_step_ms),
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_step_over": self.tokens_per_step_over,
            "speculative": None if self.spec_step is None else self.spec_step.to_dict(),
            "gap": {} if self.not_comparable else self.gap_dict(),
            "gap_not_comparable": self.not_comparable if self.gaps() else None,
            "floor_itl_s": seconds(self.floor_itl_ms), "queued_readings": list(self.queued),
            "likely_weights": [name for name, _ in self.lighter_weights],
            # the model caution (the metrics name another model) first, as the text says it
            "cautions": [c for c in (self.model_caution, *self.cross_checks()) if c],
            "notes": o.notes, "model_names": o.model_names,
        }

    def gap_dict(self) -> dict[str, float]:
        """``gaps`` as --json gives them (the generation rate's under ``output_tok_s``, the
        top level's name), with the text's "implies 40.9 ms a token: -26%" beside it: the ITL
        that rate implies at the batch (``rate_itl_s``, 0.0409) and the prediction against it
        (``rate_itl``, predicted ÷ implied − 1), where the text prints them."""
        gaps, implied, predicted = self.gaps(), self.rate_itl_ms, self.predicted_itl_ms
        out = {"output_tok_s" if k == "generation_tok_s" else k: v for k, v in gaps.items()}
        if "generation_tok_s" in gaps and "itl" not in gaps and implied and predicted:
            out |= {"rate_itl_s": implied / 1e3, "rate_itl": predicted / implied - 1}
        return out

    def text_lines(self) -> list[str]:
        o, d = self.obs, self.deployment
        lines = [f"{o.kind} from {o.source}" + (f", {o.duration_s:,.0f} s window"
                                                 if o.duration_s else "")]
        caution = self.model_caution
        if caution:
            lines.append(f"caution: {caution}")
        rows = []
        for label, values, fmt in (("running", o.running, "{:,.1f}"),
                                   ("waiting", o.waiting, "{:,.1f}"),
                                   ("swapped", o.swapped if any(o.swapped) else [], "{:,.1f}"),
                                   ("KV usage", o.kv_usage, "{:.0%}")):
            s = stats(values)
            if s:
                rows.append([label, *(fmt.format(s[k]) for k in ("mean", "p50", "p90", "max"))])
        if rows:
            lines += table(rows, ["", "mean", "p50", "p90", "max"])
        rates = []
        each = f" per engine ({o.engines} engines: {{:,.0f}} in all)" if o.engines > 1 else ""
        if o.prompt_tok_s is not None:
            cached = o.cached_prompt_share
            rates.append(f"prompt {o.prompt_tok_s:,.0f} tok/s" + each.format(
                o.prompt_tok_s * o.engines) + (f" ({cached:.0%} from the prefix cache)"
                                               if cached else ""))
        if o.generation_tok_s is not None:
            gauge = o.gen_throughput_tok_s  # SGLang's own, shown where it is not the rate
            rates.append(f"generation {o.generation_tok_s:,.0f} tok/s" + each.format(
                o.generation_tok_s * o.engines) + (
                f" (its gen_throughput gauge {gauge:,.0f})"
                if gauge is not None and gauge != o.generation_tok_s else ""))
        if o.preemptions is not None:
            rates.append(f"preemptions {o.preemptions:,.0f}" + (" (all engines)"
                                                                 if o.engines > 1 else ""))
        if rates:
            lines.append(", ".join(rates))
        for key, label in (("ttft", "TTFT"), ("itl", "ITL/TPOT"), ("e2e", "end-to-end")):
            read = o.latency_ms.get(key)
            v = {k: x for k, x in (read or {}).items() if k != "count"}
            if read:  # a line's figures in one unit, seconds where one reaches 100 s
                unit = latency_unit(x / 1e3 for x in v.values())
                lines.append(f"{label:<11} " + ", ".join(
                    f"{k} {_ms(x) if unit == 'ms' else latency_figure(x / 1e3, unit)} {unit}"
                    for k, x in v.items()))
        b, frac = self.batch, self.fraction
        lines.append("")
        if b is None or frac is None:  # (the fraction is None only without a batch)
            lines.append("no running batch in this source")
        else:
            stages = micro_batches(d)
            if self.weights_do_not_load:
                lines.append(f"batch {b:,.1f}: no share of the arithmetic, the deployment as "
                             "described cannot load")
            elif self.unit_suspect:
                lines.append(f"batch {b:,.1f}: no share of the arithmetic, the ITL it is read "
                             "from is likely in seconds (the caution below)")
            else:
                ridge_batch = batch_for_intensity(self.ridge, d.bytes_per_weight_split[0])
                lines.append(f"batch {b:,.1f} against a ridge batch of {first_whole_batch(ridge_batch):,} "
                             f"({self.ridge:,.0f} FLOP per byte) on "
                             f"{d.gpus_label}: {fmt_share(frac, 1)} of the arithmetic you "
                             "are billed for" + billed_scope(d.model.moe is not None)
                             + (f", each of {stages} pipeline stages multiplying a micro-batch "
                                f"of {self.stage_batch:,.0f}" if stages > 1 else ""))
        reported = self.engine_pool
        if self.fits:
            pool = (f"the engine's pool of {reported.shown}, as its "
                    + ("log reports" if o.kind == "log" else "metrics report") + " it"
                    + (f", at most its {self.seats:,} seats" if self.pool_batch == self.seats
                       and not self.seat_capped else "") if reported is not None else None)
            if self.seat_capped:  # the seats, not the pool, give the count: named so
                lines.append(f"{self.pool_batch:,} sequences of {self.context:,} tokens "
                             f"({self.context_source}) run at once, capped by "
                             f"{self.seat_cap_words}: "
                             f"the KV pool holds {self.pool_sequences:,}"
                             + (f" ({pool})" if pool else ""))
            else:
                lines.append(f"the KV pool allows {self.pool_batch:,} sequences of "
                             f"{self.context:,} tokens ({self.context_source}"
                             + (f"; {pool}" if pool else "")
                             + (f"; {self.pool_division}" if self.pool_division else "") + ")")
        elif self.weights_do_not_load:
            p = self.modelled_pool
            lines.append(f"{d.model.name} does not fit on {d.gpus_label} as described: the "
                         f"weights alone, {p.weight_bytes / GIB:,.1f} GiB per GPU, exceed the "
                         f"card's {p.total_bytes / GIB:,.1f} GiB" + (
                             f"; yet the engine reports a live pool of {reported.shown}"
                             if reported else f"; yet the server runs a batch of {b:,.1f}"
                             if b else "")
                         + (", so --num-gpus or --weights are probably not what the server runs"
                            if reported or b else ""))
        else:
            # past the model's positions the engine refuses the length, whatever its pool holds
            refusal = context_refusal(d, self.context)
            lines.append(f"{d.model.name} does not fit on {d.gpus_label} as described: " + (
                f"sequences of {self.context:,} tokens ({self.context_source}), and {refusal}"
                if refusal else f"the KV pool holds no sequence of {self.context:,} tokens "
                f"({self.context_source})"))
        lines.append(f"wall: {self.wall} — {self.lever}")
        predicted = self.predicted_itl_ms
        gaps = self.gaps()
        if predicted:
            measured = o.latency_ms.get("itl", {}).get("mean")
            work = self.prompt_work_label
            drafted = self.spec_step
            line = (f"ridgeline predicts {predicted:,.1f} ms per token at this batch ({d.engine}"
                    + (f"; {work}" if work else "")
                    + (f"; a {self.predicted_step_ms or 0.0:,.1f} ms step keeping "
                       f"{self.tokens_per_step:,.2f} tokens a request over "
                       f"{self.tokens_per_step_over}: {drafted.spec.label()}, the acceptance "
                       "read off the source's acceptance length"
                       + (f"; {drafted.drafted_share:.0%} of the rows drafting, "
                          f"{drafted.drafts_each or drafted.spec.drafts:,.2f} draft tokens "
                          f"each: {drafted.verify_tokens:,} tokens a verify step"
                          if drafted.partial else "")
                       if drafted is not None else "") + ")")
            implied = self.rate_itl_ms
            apart = self.not_comparable
            below = " (the caution below)" if self.misdescribed else ""
            if apart and measured and not self.single_scrape:
                line += f"; measured {measured:,.1f} ms: not compared, {apart}{below}"
            elif apart and "generation_tok_s" in gaps and implied and b:
                line += (f"; the generation rate, {o.generation_tok_s:,.0f} tok/s at batch "
                         f"{b:,.1f}, implies {implied:,.1f} ms a token: not compared, {apart}"
                         f"{below}")
            elif "itl" in gaps and measured:
                line += f"; measured {measured:,.1f} ms: {gaps['itl']:+.0%}"
            elif measured and self.single_scrape:
                line += (f"; not set against the scrape's {measured:,.1f} ms, the mean over the "
                         "server's lifetime (scrape twice for a window)")
            elif "generation_tok_s" in gaps and implied and b:
                line += (f"; the generation rate, {o.generation_tok_s:,.0f} tok/s at batch "
                         f"{b:,.1f}, implies {implied:,.1f} ms a token: "
                         f"{predicted / implied - 1:+.0%} ({gaps['generation_tok_s']:+.0%} in "
                         "tok/s)")
            lines.append(line)
        lines += [f"caution: {c}" for c in self.cross_checks()]
        lines += [f"note: {n}" for n in o.notes]
        return lines

    @property
    def misdescribed(self) -> str | None:
        """Why the prediction is not set against the measurement (nor written as a row for
        calibrate), where the cautions say the deployment described is not the one that runs,
        or the measurement's unit is in doubt: a percentage between a model of the wrong
        deployment and the real one's latency measures the description, not the engine
        (Llama-3.1-70B described on two H100s, measured under its floor: "+107%")."""
        if self.unit_suspect:
            return "the measured ITL's unit is in doubt"
        if self.rate_over_peak is not None:
            return ("the token rates pass what the deployment described computes at its peak, "
                    "so the prediction prices another than the server runs")
        if self.below_floor:
            return ("the measurement is under the floor of the deployment described, so the "
                    "prediction prices another than the server runs")
        if self.unheld_mean is not None:
            return ("the pool modelled for the deployment described cannot hold the running "
                    "batch at the counters' mean, so the deployment described may not be the "
                    "one that runs")
        return None

    @property
    def unpriced_drafts(self) -> str | None:
        """Why the prediction is not set against the measurement where a drafter served the
        window but its drafts are not priced (no draft length in the flags, or no acceptance
        length in the source): the measured time is a drafting server's token (vLLM's
        histogram divided by the tokens a reading covered, SGLang's and a bench's per token), the
        prediction a plain decode step's, so their percentage measures the drafter, not the
        engine (16.3 ms against 6.0 ms at 2.5 tokens a step: "+172%"). None elsewhere."""
        if self.spec_step is not None or not self.drafted:
            return None
        return ("a drafter served the window and its drafts are not priced (the notes say "
                "why), so the prediction, a plain decode step, is not a drafting server's "
                "token")

    @property
    def not_comparable(self) -> str | None:
        """Why the prediction is not set against the measurement: the deployment or the unit
        in doubt (misdescribed, which the cautions give), or a drafter's unpriced drafts."""
        return self.misdescribed or self.unpriced_drafts

    @property
    def engines_apart(self) -> str | None:
        """A caution where data-parallel engines run batches far apart (the busiest at
        ENGINES_APART × the mean or more) and the prediction is set against a measurement: the
        engines' ITL readings and tokens, summed, weigh each engine by the tokens it makes, a
        busy engine's slower steps the most, while the prediction prices one step at the mean
        batch. On ridgeline's own steps (Llama-3.1-8B, an H100, 2,000 tokens) engines at 10
        and 60 make tokens every 9.9 and 20.4 ms: 70 ÷ (10 ÷ 9.9 + 60 ÷ 20.4) = 17.7 ms a
        token, where the mean batch, 35, steps in 15.1 ms — 15 % under, with no model error."""
        o, b = self.obs, self.batch
        busiest = o.busiest_batch
        if o.engines < 2 or not b or busiest is None or busiest < ENGINES_APART * b \
                or not self.gaps():
            return None
        return (f"the {o.engines} data-parallel engines run batches far apart (the busiest "
                f"{busiest:,.1f} against a mean of {b:,.1f}): the ITL histogram and the "
                "generation rate, summed over the engines, weigh each by the tokens it makes, "
                "so they read slower than one step at the mean batch, which the prediction "
                "prices; the gap above is partly that")

    def cross_checks(self) -> list[str]:
        """What the measured figures say against each other and against the floor: a latency
        under decode's floor (the deployment is not what the server runs), and an ITL that
        batch ÷ generation rate contradicts. Each without the text's "caution: " prefix, as
        every command's --json ``cautions`` are."""
        out = [c for c in (self.weights_caution, self.pinned_caution) if c is not None]
        o, d = self.obs, self.deployment
        if o.stalled_engines:
            hung = ", ".join(o.stalled_engines)
            which = "that engine" if len(o.stalled_engines) == 1 else "those engines"
            out.append(f"{hung} ran requests at every reading, but vLLM's generation counter "
                       f"did not move there in {o.duration_s or 0.0:,.0f} s (it moves at every "
                       f"step of an engine's): {which} took no step (hung, or a dead core: see "
                       "the server's log); the batch, the rates and the wall above average it "
                       "with the engines that ran")
        if o.engine_family and not d.engine.startswith(o.engine_family):
            # the metric names say which engine exported them (observe_metrics); the pool,
            # the seats and the step priced are the engine named's, so they size another
            from ridgeline.engine_platforms import engine_platform_problem

            # leaving --engine out sizes the metrics' engine, unless it does not run on the
            # card named (a vLLM server's metrics with --gpu an Apple chip: llama.cpp-metal
            # is the card's default), where --gpu is the doubt
            elsewhere = engine_platform_problem(o.engine_family, d.accelerator)
            fix = (f"{o.engine_family} does not run on {d.accelerator.id}: is --gpu the "
                   "server's card?" if elsewhere else
                   "leave --engine out to size the engine the metrics name")
            out.append(f"the source carries {o.engine_family}'s metrics, but "
                       f"{d.engine}'s pool, seats and step size the figures here: they are not "
                       f"the server's unless it runs {d.engine} ({fix})")
        skew = self.engines_apart
        if skew is not None:
            out.append(skew)
        apart = self.rates_apart
        if apart is not None and apart > RATES_APART:
            itl, implied, o = self.obs.latency_ms["itl"]["mean"], self.rate_itl_ms, self.obs
            out.append(f"the ITL histogram's {itl:,.1f} ms and the running batch over "
                       f"the generation rate ({self.batch:,.1f} ÷ {o.generation_tok_s:,.0f} "
                       f"tok/s = {implied:,.1f} ms) disagree {apart:,.1f}×: the gauge is read "
                       "at each scrape, the counter and the histogram over the window, so a "
                       "batch that moved between scrapes, or several tokens a step "
                       "(speculative decoding), parts them; ridgeline sets its prediction "
                       "against the histogram, which times the tokens themselves")
        if self.unheld_mean is not None:
            mean, held = self.unheld_mean
            out.append(f"at the counters' mean of {mean:,} tokens a request, the KV "
                       f"pool modelled for {d.model.name} on {d.gpus_label} with "
                       f"{d.weights.label} weights holds only {held:,} of the "
                       f"{self.batch or 0.0:,.1f} running: the server does not run what is "
                       "described (check --weights, --num-gpus and --kv-dtype against what it "
                       "serves), or its requests share prefixes its cache holds once; the "
                       f"context of {self.context:,} tokens is read off that modelled pool's "
                       "fill, only as good as the description")
        served_kv = self.cache_dtype_apart
        if served_kv is not None:
            fp8 = served_kv.lower() in VLLM_FP8_CACHE_DTYPES  # a name --kv-dtype refuses
            out.append(f"the engine's cache_config_info says cache_dtype={served_kv}, "
                       f"not the KV {d.kv.id} described: give --kv-dtype as the server runs it "
                       + ("(fp8, its size) " if fp8 else "")
                       + f"({auto_words(served_kv, d.model)}), or each step's KV reads are "
                       "priced at another dtype than the server's")
        over = self.rate_over_peak
        if over is not None:
            out.append(f"the source counts {server_computed_tok_s(o):,.0f} tokens a "
                       "second computed" + (f" by its {o.engines} engines together"
                                            if o.engines > 1 else "")
                       + " (prompt tokens less the prefix cache's, and generated), "
                       f"{over:,.1f}× the {server_peak_tok_s(o, d):,.0f} {d.model.name} computes "
                       f"on {server_gpus(o, d)} at their peak (2 FLOP a weight a token): the server "
                       "runs more GPUs or lighter weights than described, or the scrapes are "
                       "not one server's run (a counter reset read as a restart)")
        apart_pools = self.pool_apart
        if apart_pools is not None:
            reported, modelled = apart_pools
            share = reported.tokens / modelled.tokens - 1
            s = self.engine_settings
            scraped = [f"{flag} {value:,}" for flag, value in (
                ("--gpu-memory-utilization", s.gpu_memory_utilization),
                ("--kv-cache-memory-bytes", s.kv_cache_memory_bytes)) if value is not None]
            others = [flag for flag in ("--gpu-memory-utilization", "--kv-cache-memory-bytes")
                      if not any(x.startswith(flag) for x in scraped)] + ["--engine-version"]
            if d.engine == "trtllm":  # its memory share is of the free memory, in its own name
                others = ["--kv_cache_free_gpu_memory_fraction", "--engine-version"]
            out.append(f"the engine reports a pool of {reported.shown}, "
                       f"{abs(share):.0%} {'more' if share > 0 else 'less'} than the "
                       f"{modelled.shown} modelled for {d.model.name} on {d.gpus_label} as "
                       f"described (weights {d.weights.label}, KV {d.kv.id}, {d.engine}'s "
                       "defaults" + (f" but {' and '.join(scraped)}, as its metrics state"
                                     if scraped else "")
                       + ", as `ridgeline fit` sizes it): the server was started with "
                       f"other settings ({', '.join(others)}) or serves another deployment "
                       "(--weights, --kv-dtype, --num-gpus) than described; the pool and the "
                       "wall above count the engine's, the prediction prices the deployment "
                       "described")
        if self.fill_over_given is not None:
            held, how = self.fill_over_given
            out.append(f"--context {self.context:,} is under the KV cache's fill: "
                       f"{held:,} tokens a running request ({how}), {held / self.context:,.1f}× "
                       "it; the pool, the wall and the prediction above are priced at "
                       "--context: give the server's context, or leave --context out to read "
                       "it off the fill (unless the server runs another deployment than "
                       "described, whose pool fills otherwise)")
        if self.fill_over_mean is not None:
            held, how = self.fill_over_mean
            out.append(f"the KV cache's fill gives {held:,} tokens a running request "
                       f"({how}), {held / self.context:,.1f}× the counters' mean of "
                       f"{self.context:,}, which the figures above use: a modelled pool's fill "
                       "is only as good as the deployment described (--context "
                       f"{held} prices the fill's, if the description is the server's)")
        drafted = self.spec_step
        if drafted is not None and self.tokens_per_step_over == "drafted steps":
            out.append(f"the {self.tokens_per_step:,.2f} tokens a step the predicted "
                       "ITL divides by are the source's acceptance length, which counts only the "
                       "steps that drafted: a step that proposed none (an n-gram drafter without "
                       "a match, a request near max_model_len) keeps 1 token and is not in it, "
                       "so where such steps are many the prediction reads low")
        remark = self.preemption_remark
        if remark is not None:
            out.append(f"{remark}")
        if self.unit_suspect:
            measured, floor = self.measured_itl_ms, self.floor_itl_ms
            assert measured is not None and floor is not None
            out.append(f"the mean time between tokens reads {measured:,.3g} ms, under "
                       f"a hundredth of the {floor:,.1f} ms floor of this batch on "
                       f"{d.gpus_label}: no deployment is that much faster than described, so "
                       "the result's *_itl_ms and *_tpot_ms values are likely seconds (× 1,000: "
                       f"{measured * 1e3:,.1f} ms), or --model and --gpu are not what it ran; "
                       "the batch read from them is as far off")
        elif self.below_floor:
            measured, floor = self.measured_itl_ms, self.floor_itl_ms
            assert measured is not None and floor is not None
            lighter = self.lighter_weights
            out.append(f"the measured {measured:,.1f} ms a token is under the "
                       f"{floor:,.1f} ms floor of this batch at {self.context:,} tokens on "
                       f"{d.gpus_label} with {d.weights.label} weights (every byte at the "
                       "card's rated bandwidth, no overhead): the server does not run what is "
                       "described — " + (
                           "likely a lighter weight format, one whose floor is under "
                           f"{measured:,.1f} ms: " + " or ".join(
                               f"--weights {name} (floor {ms:,.1f} ms)" for name, ms in lighter)
                           + "; or more GPUs than --num-gpus says" if lighter else
                           "check --weights, --num-gpus and --context against what it "
                           "serves"))
        return out

    @property
    def drafted(self) -> bool:
        """Whether a drafter served the window: its flags say so, or the source's acceptance
        length does (SGLang's gauge above 0, a vLLM bench's spec_decode_acceptance_length),
        or vLLM's draft tokens grew (its counters, its log's SpecDecoding lines)."""
        o = self.obs
        return bool(self.engine_settings.speculative_decoding or self.spec is not None
                    or o.spec_accept_length or o.spec_tokens_per_step or o.spec_draft_tokens)

    @property
    def mixed_row(self) -> bool:
        """Whether the window's steps carry so much prompt work that its inter-token latency
        is no decode measurement: ridgeline prices its mean step more than MIXED_ROW_SLACK
        slower than the decodes alone (mixed_step_slowdown)."""
        return self.mixed_step_slowdown > MIXED_ROW_SLACK

    def measurement_rows(self, model_id: str) -> str:
        """What was observed, as rows `ridgeline calibrate` reads: none from a single scrape,
        whose lifetime latency would be paired with one instant's batch, nor for a deployment
        that does not fit as described or that the cautions say is not the one that runs
        (misdescribed: the row would price another than the server runs), nor from a window
        whose prompt steps slow its tokens past MIXED_ROW_SLACK (mixed_row: the row, read as
        decode alone, would drag calibrate's fit), nor from a window a drafter served (drafted:
        the format has no speculative-decoding column, validation/README.md leaves such rows
        out, and calibrate would price its tokens as plain decodes)."""
        o, d = self.obs, self.deployment
        out = io.StringIO()
        columns = ["id", "model", "weights_dtype", "kv_dtype", "gpu", "num_gpus", "tp", "batch",
                   "input_len", "output_len", "context_len", "metric", "value", "unit", "engine",
                   "source", "notes"]
        writer = csv.writer(out)
        writer.writerow(columns)
        itl = o.latency_ms.get("itl", {}).get("mean")
        b = self.batch
        if itl and b and not math.isnan(itl) and not self.single_scrape and self.fits \
                and self.misdescribed is None and not self.mixed_row and not self.drafted:
            weights = d.weights.label
            if weights == "as stored":  # the checkpoint's own format, as validate names it
                stored = d.model.stored_format_map
                weights = d.weights.format_of(max(
                    stored, key=lambda c: d.bytes_by_category.get(c, 0.0))).id if stored \
                    else d.model.dtype
            writer.writerow([f"observed-{d.accelerator.id}-b{round(b)}", model_id, weights,
                             d.kv.id, d.accelerator.id, d.num_gpus, d.tensor_parallel_size,
                             max(1, round(b)), "", "", self.context, "decode_tok_s_per_user",
                             f"{1e3 / itl:.4g}", "tok/s", d.engine, f"observe {o.source}",
                             f"per-user decode speed at the observed running batch "
                             f"(context {self.context_source})"])
        return out.getvalue()


def _ms(value: float) -> str:
    """A latency in ms as the text shows it: one decimal, or two significant figures under
    0.1 ms, where one decimal would print a bench's 0.028 as 0.0."""
    return f"{value:,.1f}" if value >= 0.1 or value <= 0 else f"{value:.2g}"


# the reported pool's KV fill is read instead of the counters' mean where it says a running
# request holds more than this many times the mean: a lifetime's mix, or a running set that
# long requests dominate (each stays in it for as many steps as it has output tokens)
FILL_OVER_MEAN = 2.0


def observe_report(obs: Observation, dep: Deployment, profile: EngineProfile,
                   context: int | None, settings: EngineSettings | None = None,
                   spec: SpecDecode | None = None) -> ObserveReport:
    """The report on ``obs`` for ``dep`` as described, its pool modelled under the server's
    ``settings`` (its drafter, from observe's flags: fit's and simulate's seats), each decode
    step priced as ``spec``'s verify step where given (the drafter's flags and the source's
    acceptance length: SpecDecode.observed; Model Runner V2's n-gram lookup on the GPU, as
    decode prices it: vllm_mrv2_drafter.gpu_lookup_len)."""
    refuse_rate_past_peak(obs, dep)
    settings = settings or EngineSettings()
    if spec is not None:
        from ridgeline.vllm_mrv2_drafter import gpu_lookup_len

        spec = replace(spec, gpu_lookup_len=gpu_lookup_len(dep, settings, spec.method))
    if obs.kind == "log" and obs.pool_tokens is not None and reported_pool(obs, dep) is None \
            and LOG_POOL_UNREAD not in obs.notes:
        obs.notes.append(LOG_POOL_UNREAD)
    unheld: tuple[int, int] | None = None
    fill_over_mean: tuple[int, str] | None = None
    read = "given"  # where the context comes from: given, counters, fill or assumed
    if context is None:
        held = context_from_kv_usage(obs, dep, settings)
        if obs.mean_prompt_tokens is not None and obs.mean_output_tokens is not None:
            context, read = mean_decode_context(obs.mean_prompt_tokens,
                                                obs.mean_output_tokens), "counters"
            source = "mean prompt + half the mean output, from the source"
            counted = ObserveReport(obs, dep, profile, context, source, settings, spec)
            if held is not None and not counted.weights_overflow:
                # the live fill of the pool says what each running request holds where the
                # counters' mean cannot be right: the running batch could not be held at it
                # (shared prefixes, cached once, counted in every prompt), or the fill of the
                # pool the engine reports holds far more a request (a mix the mean misreads:
                # a full pool beside one "allowing" several times the batch). A modelled
                # pool's fill is only as good as the deployment described, so a mere
                # disagreement with it is not read as the counters' fault, and a modelled
                # pool that cannot hold the batch at the mean is cautioned as a description
                # that may be wrong (ObserveReport.cross_checks)
                busiest = obs.busiest_batch or 0.0  # one engine's pool: its busiest's batch
                if busiest > counted.pool_batch:
                    source = (f"{held[1]}; the counters' mean of {context:,} tokens would hold "
                              f"only {counted.pool_batch:,} of the {busiest:,.1f} running"
                              + (" in the busiest engine" if busiest != obs.batch else ""))
                    if counted.engine_pool is None:
                        unheld = (context, counted.pool_batch)
                    context, read = held[0], "fill"
                elif counted.engine_pool is not None and held[0] > FILL_OVER_MEAN * context:
                    source = (f"{held[1]}; {held[0] / context:,.1f}× the counters' mean of "
                              f"{context:,} tokens")
                    context, read = held[0], "fill"
                elif held[0] > FILL_OVER_MEAN * context:  # a modelled pool's: cautioned
                    fill_over_mean = held
        elif held is not None:
            (context, source), read = held, "fill"
        else:
            context, source, read = 2000, "assumed: pass --context", "assumed"
    else:
        source = "given"
    report = ObserveReport(obs, dep, profile, context, source, settings, spec)
    fill_over: tuple[int, str] | None = None
    if read == "given" and not report.weights_overflow:
        held = context_from_kv_usage(obs, dep, settings)
        if held is not None and held[0] > FILL_OVER_MEAN * context:
            fill_over = held
    note = ""
    if report.drafting_by_metrics and dep.engine == "sglang":
        seated = ("so the seats are max_running_requests "
                  f"{report.modelled_settings.max_num_seqs}, SGLang's default with a drafter "
                  "(unless the server was given --max-running-requests)"
                  if settings.max_num_seqs is None else
                  f"seated at --max-running-requests {settings.max_num_seqs}")
        note = (f"sglang:spec_accept_length reads up to {obs.spec_accept_length:,.2f} tokens: "
                f"a drafter serves, {seated}; its memory is not modelled, nor its drafts "
                "priced (each step is priced as plain decoding), without the drafter's flags "
                "(--speculative-algorithm …)")
    elif report.drafting_by_metrics:
        kept = (f", {obs.spec_tokens_per_step:,.2f} tokens a verify step"
                if obs.spec_tokens_per_step else "")
        note = (f"vLLM's drafter proposed {obs.spec_draft_tokens:,.0f} draft tokens{kept}: a "
                "drafter serves; its memory is not modelled, nor its drafts priced (each step "
                "is priced as plain decoding), without the drafter's flags (--spec-tokens and "
                "--spec-method, or --speculative-config)")
    if note and note not in obs.notes:
        obs.notes.append(note)
    unpriced = unpriced_drafts_note(report)
    if unpriced and unpriced not in obs.notes:
        obs.notes.append(unpriced)
    b = report.batch
    steps: tuple[Step, ...] = ()
    if b is not None:
        stages = micro_batches(dep)
        steps = (*dense_ridge_steps(dep),
                 step("share of the arithmetic in use",
                      "min(1, (2 × batch ÷ bytes per weight) ÷ ridge)" if stages == 1 else
                      f"min(1, (2 × ⌈batch ÷ {stages} micro-batches⌉ ÷ bytes per weight) ÷ "
                      "ridge)",
                      q("fraction", report.fraction or 0.0),
                      q("batch", b, "", obs.batch_source),
                      *([q("micro-batch", report.stage_batch or 0, "",
                           f"one in each of {stages} pipeline stages")] if stages > 1 else []),
                      q("bytes per weight", dep.bytes_per_weight_split[0], "B",
                        "the weights every token reads" + (" (all but the routed experts)"
                                                           if dep.model.moe else "")),
                      q("ridge", report.ridge, "FLOP/byte")),
                 _context_step(obs, dep, context, source, read, settings),
                 step("sequences the pool holds", "the pool's tokens ÷ the context (vLLM: "
                      "whole blocks a sequence in each KV-cache group; at most its seats)",
                      q("pool batch", report.pool_batch),
                      *_pool_operands(report, context)))
        predicted = report.plain_step_ms
        # with drafts priced, the plain step is the verify step's starting point, not the ITL
        label = "predicted ITL" if report.spec_step is None else "step without drafts"
        if predicted is not None and report.prompt_steps:
            steps += (_prompt_steps_step(report, predicted, label),)
        elif predicted is not None:
            steps += (step("the engine's step at this batch", "step_cost(the batch's decodes at "
                           "the context + the prompt tokens a step carries), one micro-batch",
                           q(label, predicted, "ms", f"{profile.engine} profile"),
                           q("batch", b, "", obs.batch_source),
                           q("context", context, "tokens"),
                           q("prompt tokens per step", report.prompt_tokens_per_step, "",
                             (report.prompt_ratio[1] if report.prompt_ratio else
                              "no prompt rate or mean lengths in the source: none")
                             + " × batch" + (" × tokens per step" if report.spec_step
                                              else "")
                             + ", less prefix-cache hits, within the step budget"
                             + (f"; each chunk after {report.chunk_context:,} tokens of its "
                                "prompt" if report.prompt_tokens_per_step else ""))),)
        if report.spec_step is not None:
            steps += (verify_step(report),)
    return ObserveReport(obs, dep, profile, context, source, settings, spec, steps, unheld,
                         fill_over, fill_over_mean)


SHOWN_CHUNKS = 3  # a prompt's steps --explain lists one by one; past it, their sum


def _tokens(chunk: tuple[Seq, ...]) -> str:
    cached = chunk[0].context_tokens
    return (f"{sum(s.new_tokens for s in chunk):,} prompt tokens"
            + (f" after {cached:,} before them" if cached else ""))


def _prompt_steps_step(report: ObserveReport, predicted: float,
                       label: str = "predicted ITL") -> Step:
    """The mean step with each prompt in its own steps, with the times it is built from."""
    decode_ms, mixed_ms = report.step_times_ms()
    chunks = report.prompt_steps
    tokens = sum(s.new_tokens for step in chunks for s in step)
    ratio = report.prompt_ratio
    kept = " × tokens per step" if report.spec_step is not None else ""
    return step("the engine's mean step at this batch",
                "decode alone + prompts per step × Σ over a prompt's steps (step_cost(the "
                "decodes + its chunk) − decode alone), one micro-batch",
                q(label, predicted, "ms", f"{report.profile.engine} profile"),
                q("batch", report.batch or 0.0, "", report.obs.batch_source),
                q("context", report.context, "tokens"),
                q("decode alone", decode_ms, "ms", "step_cost(the batch's decodes)"),
                *((q("beside a prompt" if len(chunks) == 1 else f"beside chunk {i + 1}", ms,
                     "ms", f"step_cost(the decodes + {_tokens(chunk)})")
                   for i, (ms, chunk) in enumerate(zip(mixed_ms, chunks, strict=True)))
                  if len(chunks) <= SHOWN_CHUNKS else
                  [q(f"beside its {len(chunks):,} chunks", sum(mixed_ms), "ms",
                     "Σ step_cost(the decodes + each chunk)")]),
                q("prompt tokens", tokens, "", "the mean prompt, less prefix-cache hits"
                  + (f"; in chunks of the {report.step_budget:,}-token step budget the "
                     "decodes leave" if len(chunks) > 1 else "")),
                q("prompts per step", report.prompts_per_step or 0.0, "",
                  f"batch{kept} ÷ mean output: a prompt as each request finishes"
                  if ratio is None or ratio[1].startswith("mean prompt") else
                  f"{ratio[1]} × batch{kept} ÷ mean prompt"))


def _context_step(obs: Observation, dep: Deployment, context: int, source: str,
                  read: str, settings: EngineSettings) -> Step:
    """The tokens each running request holds, with the inputs it was read from: the counters'
    mean prompt and output (each a total over the finished requests), the KV fill (usage ×
    the pool ÷ running), or --context."""
    label = "tokens each running request holds"
    result = q("context", context, "tokens", source)
    if read == "counters":
        prompt, output = obs.mean_prompt_tokens or 0.0, obs.mean_output_tokens or 0.0
        n = obs.finished_requests
        over = ("finished in the window (the counters' increases)" if obs.duration_s
                else "finished in the server's lifetime (one scrape)")
        if obs.kind == "bench":
            over = "completed in the run"

        def of(mean: float, what: str) -> str:
            return (f"{mean * n:,.0f} {what} tokens ÷ {n:,.0f} requests {over}" if n
                    else f"the source's mean {what} length")

        return step(label, "mean prompt + mean output ÷ 2 (a request's decode steps average "
                    "half its output)", result, q("mean prompt", prompt, "tokens",
                                                  of(prompt, "prompt")),
                    q("mean output", output, "tokens", of(output, "output")))
    if read == "fill" and obs.kv_usage and obs.running and not obs.kv_tokens:
        filled = fill_at_context(obs, dep, settings)
        if filled is not None:
            pool, whose, _ = filled
            groups = pool.groups is not None
            return step(label, "KV usage × the pool's tokens ÷ running requests" + (
                            ": the longest context whose blocks in each KV-cache group fit that "
                            "share" if groups else ""), result,
                        q("KV usage", statistics.fmean(obs.kv_usage), "", "mean of the readings"),
                        q("pool", pool.tokens, "tokens",
                          f"{whose} pool" + (f": {pool.shown}" if groups else "")),
                        q("running", statistics.fmean(obs.running), "",
                          "mean of the readings"))
    return step(label, "--context" if read == "given" else "as its source says", result)


def _pool_operands(report: ObserveReport, context: int) -> tuple[Quantity, ...]:
    """The pool, the context and the seats the pool batch divides and caps: the engine's
    reported pool, else the modelled one; llama-server with no -np given, the pool decode
    sizes for a slot each and its count of slots (ObservedPool.slot_batch), as utilization
    shows them."""
    from ridgeline.capacity import decode_pool, held_apart_words

    reported = report.engine_pool
    if report.slots_unstated:
        engine = report.deployment.engine
        return (q("pool", decode_pool(report.deployment, context).tokens, "tokens",
                  "modelled: a slot of the context each, as decode sizes it"),
                q("context", context, "tokens"),
                q("seats", report.seats, "", f"llama-server's slots (-np), not given: "
                  f"{held_apart_words(engine)}"))
    return (q("pool", reported.tokens if reported is not None else report.modelled_pool.tokens,
              "tokens", f"as the engine reports it: {reported.shown}" if reported is not None
              else "modelled: the engine's defaults on this deployment"),
            q("context", context, "tokens"),
            q("seats", report.seats, "", report.seats_label))

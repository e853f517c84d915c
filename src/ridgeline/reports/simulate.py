"""`ridgeline simulate`: what users see under a load — percentiles, rates, goodput, batch."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ridgeline.deployment import Deployment
from ridgeline.explain import Step
from ridgeline.render import table
from ridgeline.sim.config import SimConfig
from ridgeline.sim.metrics import SimResult


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1e3:,.1f}"


@dataclass(frozen=True)
class SimulateReport:
    deployment: Deployment
    config: SimConfig
    result: SimResult
    requests: int
    load: str
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    steps: tuple[Step, ...] = field(default=())
    cautions: tuple[str, ...] = ()  # what the step times leave out

    def to_dict(self) -> dict[str, Any]:
        r, c, d = self.result, self.config, self.deployment
        return {
            "settings": {"model": d.model.name, "accelerator": d.accelerator.id,
                         "num_gpus": d.num_gpus, "engine": d.engine, "weights": d.weights.label,
                         "kv_dtype": d.kv.id, "load": self.load,
                         "num_blocks": c.num_blocks, "block_size": c.block_size,
                         "overhead_blocks_per_request": c.overhead_blocks,
                         "max_num_seqs": c.max_num_seqs,
                         "max_num_batched_tokens": c.max_num_batched_tokens,
                         "max_model_len": c.max_model_len, "prefix_caching": c.prefix_caching,
                         "spec_tokens": c.spec_tokens, "spec_acceptance": c.spec_acceptance,
                         "slo_ttft_ms": None if self.slo_ttft_s is None else self.slo_ttft_s * 1e3,
                         "slo_tpot_ms": None if self.slo_tpot_s is None else self.slo_tpot_s * 1e3},
            "requests": self.requests, "completed": r.completed, "rejected": r.rejected,
            "rejected_reasons": dict(r.rec.rejected),
            "cautions": list(self.cautions),
            "duration_s": r.duration_s, "steps": r.steps,
            "ttft_s": r.percentiles("ttft"), "tpot_s": r.percentiles("tpot"),
            "itl_s": r.percentiles("itl"), "e2e_s": r.percentiles("e2e"),
            "queue_s": r.percentiles("queue"),
            "request_rate": r.request_rate, "output_tok_s": r.output_tok_s,
            "output_tok_s_per_gpu": r.output_tok_s / d.num_gpus,
            "goodput_req_s": r.goodput,
            "running_batch": r.running_batch, "preemptions": r.preemptions,
            "prefix_cache_hit_blocks": r.prefix_hit_blocks,
            "time_series": [{"t_s": t, "running": n, "waiting": w, "kv_usage": u,
                             "preemptions": p} for t, n, w, u, p in r.rec.series.points],
        }

    def text_lines(self) -> list[str]:
        r, c, d = self.result, self.config, self.deployment
        lines = [f"{d.model.name} on {d.num_gpus} x {d.accelerator.id} ({d.engine}, weights "
                 f"{d.weights.label}, KV {d.kv.id}): {self.load}",
                 f"engine: {c.num_blocks:,} KV blocks of {c.block_size}, max_num_seqs "
                 f"{c.max_num_seqs}, max_num_batched_tokens {c.max_num_batched_tokens:,}", ""]
        rows = []
        for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"),
                            ("e2e", "end-to-end"), ("queue", "queueing")):
            p = r.percentiles(name)
            rows.append([label, _ms(p["mean"]), _ms(p["p50"]), _ms(p["p90"]), _ms(p["p95"]),
                         _ms(p["p99"])])
        lines += table(rows, ["ms", "mean", "p50", "p90", "p95", "p99"])
        batch = r.running_batch
        lines += [
            "",
            f"completed {r.completed:,} of {self.requests:,} requests in {r.duration_s:,.1f} s "
            f"({r.steps:,} steps): {r.request_rate:,.2f} req/s, {r.output_tok_s:,.0f} output "
            f"tok/s ({r.output_tok_s / d.num_gpus:,.0f} per GPU)",
            f"running batch{_running_metric(d.engine)}: mean {batch['mean']:,.1f}, max "
            f"{batch['max']:,.0f}; preemptions {r.preemptions:,}; prefix-cache hits "
            f"{r.prefix_hit_blocks:,} blocks",
        ]
        if self.slo_ttft_s is not None or self.slo_tpot_s is not None:
            good = r.goodput
            share = good / r.request_rate if r.request_rate else 0.0
            lines.append(f"goodput: {good:,.2f} req/s meet the SLO ({share:.0%} of completed)")
        for reason, n in r.rec.rejected.items():
            lines.append(f"rejected {n:,}: {reason}")
        return lines + [f"caution: {c}" for c in self.cautions]


def _running_metric(engine: str) -> str:
    """The engine's own gauge of the running batch, as `observe` reads it, or ""."""
    from ridgeline.observe import RUNNING

    prefix = "llamacpp" if engine.startswith("llama.cpp") else engine
    name = next((m for m in RUNNING if m.startswith(prefix + ":")), None)
    return f" ({name})" if name else ""

"""What `ridgeline plan` says of a cheaper deployment its checks turned down on the second draw
alone (``PlanResult.second_draw``): which, at what price, by how much it missed, and the simulate
commands that reproduce each draw, since plan's own check command reruns the first."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ridgeline.candidate import Candidate
from ridgeline.plan_checks import CONFIRM_DRAW, CheckRun, SecondDraw
from ridgeline.reports.plan_lists import devices, pct
from ridgeline.serving_load import Slo


def _over_ms(latency_s: float, limit_s: float) -> str:
    """How far ``latency_s`` is past ``limit_s``, in ms: "0.04", "1,250"."""
    over_ms = (latency_s - limit_s) * 1e3
    return f"{over_ms:,.0f}" if over_ms >= 10 else f"{over_ms:.2g}"


def latencies(run: CheckRun, slo: Slo) -> list[tuple[str, float, float]]:
    """(name, latency, SLO) of the latencies ``slo`` judges, in seconds; a TPOT or ITL of NaN
    (1-token outputs) left out."""
    named = [("TTFT", run.ttft_s, slo.ttft_s), ("TPOT", run.tpot_s, slo.tpot_s)]
    if slo.itl_s is not None:
        named.append(("ITL", run.itl_s, slo.itl_s))
    return [(name, v, limit) for name, v, limit in named if not math.isnan(v)]


def _figures(run: CheckRun, slo: Slo) -> str:
    """A run's latencies at the SLO's percentile: "p90 TTFT 2,292 ms, TPOT 58.3 ms"."""
    parts = [f"{name} {v * 1e3:,.0f} ms" if name == "TTFT" else f"{name} {v * 1e3:,.1f} ms"
             for name, v, _ in latencies(run, slo)]
    return f"{pct(slo.percentile)} " + ", ".join(parts)


def _why(run: CheckRun, slo: Slo) -> str:
    """Why the second draw missed: each latency past its SLO and by how much ("TPOT past its
    60 ms SLO by 0.04 ms"), or, with every one within it, that its queue grew or the engine
    refused requests."""
    over = [f"{name} past its {limit * 1e3:,g} ms SLO by {_over_ms(v, limit)} ms"
            for name, v, limit in latencies(run, slo) if v > limit]
    return "; ".join(over) if over else ("its latencies within the SLO, but its queue grew "
                                         "or the engine refused requests")


def drawn(edge: SecondDraw, run: CheckRun) -> Candidate:
    """``edge``'s deployment as a check that ran ``run`` leaves it, for plan_commands'
    check_line: its requests and window that run's."""
    window = run.window_s if math.isfinite(run.window_s[0]) else None
    return replace(edge.candidate, verified=True, sim_requests=run.requests,
                   sim_window_s=window, sim_ttft_s=run.ttft_s, sim_tpot_s=run.tpot_s)


def second_draw_lines(edge: SecondDraw, label: str, seed: int, slo: Slo,
                      second_command: str, cheaper_than: float | None) -> list[str]:
    """The text's lines: "1 replica of 4 x a100-sxm-40gb (TP4, …) = 4 GPUs, $5.16/h held on
    the load's requests (seed 0: …) but not on a second draw (seed 1: …; TPOT past its 60 ms
    SLO by 0.04 ms): at the capacity edge …", then the command that reruns the second draw."""
    c = edge.candidate
    price = f"${c.cost_per_hour or 0.0:,.2f}/h"
    than = f", under the winner's ${cheaper_than:,.2f}/h" if cheaper_than is not None else ""
    lines = [f"  held on one draw only: {label} = {devices(c.gpus, c.accelerator)}, {price}"
             f"{than}, held on the load's requests (seed {seed}: "
             f"{_figures(edge.first, slo)}) but not on a second draw of them (seed "
             f"{seed + CONFIRM_DRAW}: {_figures(edge.second, slo)}; {_why(edge.second, slo)}):"
             " at the capacity edge, where one run's percentile swings; plan keeps a count "
             f"only where both draws hold, so simulate with --seed {seed} passes it"]
    if second_command:
        lines.append(f"    the second draw: {second_command}")
    return lines


def second_draw_dict(edge: SecondDraw, label: str, seed: int, slo: Slo, first_command: str,
                     second_command: str) -> dict[str, Any]:
    """--json's ``second_draw_miss``: the deployment at the count that held on one draw, its
    price, each draw's seed and latencies at the SLO's percentile (seconds; null where there
    are none), which missed on the second and by how much, and the commands for each."""
    c = edge.candidate

    def draw(run: CheckRun, at: int) -> dict[str, Any]:
        return {"seed": at, "held": run.held, "sim_ttft_s": run.ttft_s,
                "sim_tpot_s": None if math.isnan(run.tpot_s) else run.tpot_s,
                **({} if slo.itl_s is None else {
                    "sim_itl_s": None if math.isnan(run.itl_s) else run.itl_s}),
                "sim_requests": run.requests}

    return {"label": label, "accelerator": c.accelerator, "tensor_parallel_size": c.tp,
            "pipeline_parallel_size": c.pp, "data_parallel_size": c.data_parallel,
            "replicas": c.replicas, "num_gpus": c.gpus, "cost_per_hour_usd": c.cost_per_hour,
            "first_draw": draw(edge.first, seed),
            "second_draw": draw(edge.second, seed + CONFIRM_DRAW),
            "missed_by_s": {name: v - limit for name, v, limit in latencies(edge.second, slo)
                       if v > limit},
            "check_command": first_command or None,
            "second_draw_command": second_command or None}

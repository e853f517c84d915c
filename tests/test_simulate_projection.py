"""`ridgeline simulate --num-requests 10000000` at 2 req/s ran for minutes to the step cap (50
million steps) before refusing; a seeded workload's run is now projected from its first
requests and refused at once where it would take over twice the cap, naming the cap and a
--num-requests that runs under it. A run that finishes under the cap is never refused."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.sim.config import SimConfig, sim_config
from ridgeline.sim.pipeline import run_replica
from ridgeline.sim.run import (
    CHECK_STEPS,
    MIN_PROJECTION_REQUESTS,
    PROJECTION_MARGIN,
    CountedRequests,
)
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")


def run_counted(work: Workload, config: SimConfig, closed_loop: int = 0) -> int:
    """The steps of ``work``'s whole run, projected as simulate projects it."""
    return run_replica(DEP, profile_for("vllm"), config,
                       CountedRequests(work, work.num_requests), closed_loop=closed_loop).steps


def test_ten_million_requests_at_2_per_second_are_refused_at_once_with_a_count_that_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2")
    started = time.monotonic()
    code, _, err = run_cli(capsys, *argv, "--num-requests", "10000000")
    assert code == 2 and len(err.splitlines()) == 1 and time.monotonic() - started < 30
    cap = SimConfig.max_steps
    assert f"past the simulator's cap of {cap / 1e6:,.0f} million" in err
    suggested = int(err.split("give --num-requests ")[1].split(" ")[0].replace(",", ""))
    projected = float(err.split("about ")[1].split(" million")[0].replace(",", "")) * 1e6
    # the steps a request takes over a whole run of 3,000 at this load
    each = run_counted(Workload(3000, rate=2.0), sim_config(DEP)) / 3000
    assert projected == pytest.approx(10_000_000 * each, rel=0.05)
    assert projected > PROJECTION_MARGIN * cap and suggested * each < cap


@pytest.mark.parametrize(("work", "closed_loop"), [  # open and closed loops (an open loop
    # of fixed lengths, Workload(6000, rate=2.0), projects as the lognormal one does, the
    # ten-million test's own path; each run at least 150,000 steps, so that a third of them
    # is past the first check: 6,000 open-loop requests take 209,000, and 1,381 are done
    # at the check)
    (Workload(6000, "lognormal:1000,0.8", "lognormal:250,0.8", rate=3.0, seed=3), 0),
    (Workload(8000, "lognormal:1000,0.8", "lognormal:250,0.8"), 16)])
def test_a_run_under_the_cap_runs_and_one_far_past_it_is_refused_before_it(
        work: Workload, closed_loop: int) -> None:
    """With the cap set at the steps the whole run takes, it runs; at a third of them it is
    refused by the projection, before the cap's own error."""
    steps = run_counted(work, sim_config(DEP), closed_loop)
    assert run_counted(work, replace(sim_config(DEP), max_steps=steps), closed_loop) == steps
    with pytest.raises(InputError, match=rf"^--num-requests {work.num_requests:,} would take"):
        run_counted(work, replace(sim_config(DEP), max_steps=steps // 3), closed_loop)


def test_pipeline_lanes_each_draw_their_share_of_a_counted_workload(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's pipeline stages run as lanes, each iterating the workload afresh for its share:
    the counted workload is iterated afresh too, so no lane finds it drawn dry."""
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "sglang", "--pipeline-parallel-size", "2", "--rate", "5",
                           "--num-requests", "200", "--json")
    data = json.loads(out)
    assert code == 0 and data["completed"] == data["requests"] == 200


def test_a_rare_long_output_drawn_early_is_counted_once_not_projected_over_the_run(
        tmp_path: Path) -> None:
    """One output in 5,000 of 100,000 tokens, the rest 16: seed 153 draws exactly one, 43rd.
    Projected as a sample of the rest it read over twice the run's steps at the first check;
    counted once, the run finishes under a cap set at its own steps."""
    lengths = tmp_path / "outputs.txt"
    lengths.write_text("16\n" * 4999 + "100000\n")
    work = Workload(5000, "512", f"file:{lengths}", rate=1.0, seed=153)
    long_ones = [r.id for r in work if r.output_tokens > 16]
    assert len(long_ones) == 1 and long_ones[0] < MIN_PROJECTION_REQUESTS
    steps = run_counted(work, sim_config(DEP))
    assert steps > CHECK_STEPS  # a projection is read
    assert run_counted(work, replace(sim_config(DEP), max_steps=steps)) == steps

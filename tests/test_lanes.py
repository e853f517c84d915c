"""A pipeline-parallel engine simulated as lanes of micro-batches, their outcomes merged."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import sim_config
from ridgeline.sim.histogram import Histogram
from ridgeline.sim.lanes import closed_loop_shares, lane_requests, pipeline_lane, run_lanes
from ridgeline.sim.simulator import Simulator
from ridgeline.sim.time_series import TimeSeries, summed_series
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli


def test_users_and_requests_are_dealt_evenly() -> None:
    assert closed_loop_shares(7, 2) == [4, 3] and closed_loop_shares(1, 3) == [1, 0, 0]
    work = Workload(9, "100", "10", 5.0, seed=3)
    lanes = [[r.id for r in lane_requests(work, lane, 2)] for lane in range(2)]
    assert lanes == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]
    arrivals = [r.arrival_s for r in lane_requests(work, 1, 2)]
    assert arrivals == sorted(arrivals)  # each lane's share still in arrival order
    # a closed loop of 6 users over 4 lanes: 2, 2, 1, 1 users, and requests in that proportion
    dealt = [[r.id for r in lane_requests(Workload(12, "100", "10", 5.0), lane, 4, users=6)]
             for lane in range(4)]
    assert dealt == [[0, 4, 6, 10], [1, 5, 7, 11], [2, 8], [3, 9]]
    assert [r.id for r in lane_requests(work, 0, 4, users=1)] == list(range(9))


def test_histograms_and_series_add_up() -> None:
    a, b = Histogram(), Histogram()
    for v in (1.0, 2.0, 3.0):
        a.add(v)
    b.add(10.0, 2.0)
    a.absorb(b)
    assert a.total == 5.0 and a.sum == 26.0 and a.percentile(90) == pytest.approx(10.0, rel=0.01)
    s1, s2 = TimeSeries(), TimeSeries()
    s1.add(0.0, 4, 1, 0.5, 0)
    s1.add(2.0, 6, 0, 0.7, 1)
    s2.add(1.0, 3, 2, 0.3, 0)
    merged = summed_series([s1, s2]).points
    # before the second lane's first sample it adds nothing; then each lane's last sample holds
    assert merged == [(0.0, 4, 1, 0.25, 0), (1.0, 7, 3, 0.4, 0), (2.0, 9, 2, 0.5, 1)]


def test_lanes_merge_into_one_engine() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), None,
                           None, 8, 2)
    lane = pipeline_lane(sim_config(dep, EngineSettings(max_model_len=4096)), 2)
    work = Workload(200, "500", "50", 4.0, seed=1)
    results = []

    def one(requests: object, users: int) -> object:
        results.append(Simulator(dep, profile_for("vllm"), lane).run(requests, closed_loop=users,
                                                                      keep_rows=True))
        return results[-1]

    whole = run_lanes(one, work, 2)
    assert len(results) == 2 and whole.completed == 200
    assert [row[0] for row in whole.rec.rows] == list(range(200))
    assert whole.rec.hist["ttft"].total == 200
    assert whole.duration_s == max(r.duration_s for r in results)
    assert whole.running_batch["max"] <= 2 * lane.max_num_seqs


def test_simulate_runs_vllm_v1_as_one_pool_and_the_others_as_lanes(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "-pp", "2",
            "--num-requests", "120", "--input-len", "800", "--output-len", "60",
            "--max-model-len", "4096"]
    code, out, _ = run_cli(capsys, *argv, "--rate", "3", "--json")
    report = json.loads(out)
    assert code == 0 and report["completed"] == 120
    assert (report["settings"]["pipeline_lanes"], report["settings"]["micro_batches_in_flight"]) \
        == (1, 2) and "per_lane" not in report
    code, out, _ = run_cli(capsys, *argv, "--concurrency", "3")
    assert code == 0 and "completed 120 of 120" in out
    assert "one pool and scheduler for up to 2 micro-batches in flight" in out
    assert "micro-batches)" in out and "pipeline lanes" not in out
    code, out, _ = run_cli(capsys, *argv, "--concurrency", "3", "--engine", "trtllm")
    assert code == 0 and "in each of 2 pipeline lanes" in out and "completed 120 of 120" in out
    code, _, err = run_cli(capsys, *argv, "--engine", "llama.cpp-cuda", "--rate", "1")
    assert code == 2 and "splits the layers over --num-gpus" in err


def test_a_closed_loop_that_does_not_divide_over_the_lanes_keeps_its_users_busy(
        capsys: pytest.CaptureFixture[str]) -> None:
    """6 users over 4 lanes (TensorRT-LLM) run 2, 2, 1, 1: dealt requests by users, no lane
    runs dry early, so throughput sits between 4 and 8 users' rather than below 4's."""
    def tokens_per_s(users: int) -> float:
        code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "-pp", "4",
                               "--engine", "trtllm", "--concurrency", str(users),
                               "--num-requests", "240", "--input-len", "200", "--output-len",
                               "100", "--json")
        assert code == 0 and json.loads(out)["settings"]["pipeline_lanes"] == 4
        return float(json.loads(out)["output_tok_s"])

    four, six, eight = tokens_per_s(4), tokens_per_s(6), tokens_per_s(8)
    assert four < six < eight
    assert six == pytest.approx((four + eight) / 2, rel=0.15)


def test_a_closed_loop_of_fewer_users_than_lanes_runs_every_request(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One user keeps one micro-batch in flight: one lane busy, and it gets every request."""
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                           "4", "-pp", "2", "--engine", "trtllm", "--concurrency", "1",
                           "--num-requests", "10", "--input-len", "300", "--output-len", "10",
                           "--max-model-len", "4096", "--json")
    assert code == 0 and json.loads(out)["completed"] == 10
    assert closed_loop_shares(1, 4) == [1, 0, 0, 0]


def test_vllm_v1_runs_from_its_whole_pool_where_v0s_lanes_hold_half(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on 2 H100s, one stage each, at 12,000 tokens: vLLM V1 runs 10,000-token
    prompts from its one pool (0.34: 676 blocks of 64 tokens); vLLM 0.6.3's
    V0 virtual engines each hold half of its 1,118 blocks of 16 (627 a request), so it
    refuses them, and says why."""
    argv = ["simulate", "llama-3.1-70b", "--gpu", "h100", "-pp", "2", "--rate", "1",
            "--num-requests", "4", "--output-len", "20", "--max-model-len", "12000"]
    code, out, _ = run_cli(capsys, *argv, "--input-len", "10000", "--json")
    report = json.loads(out)
    assert code == 0 and report["completed"] == 4 and report["settings"]["num_blocks"] == 676
    assert not any("pipeline lanes" in c for c in report["cautions"])
    v0 = [*argv, "--engine-version", "0.6.3"]
    code, _, err = run_cli(capsys, *v0, "--input-len", "10000")
    assert code == 2 and "each of the 2 pipeline lanes is simulated with 1/2 of the 1,118" in err
    assert "V0 virtual engines each hold 1/2" in err and "627 blocks" in err
    assert "its pool's 559" in err
    code, out, _ = run_cli(capsys, *v0, "--input-len", "2000", "--json")
    assert code == 0
    assert any("1/2 of the pool" in c and "refused here" in c for c in json.loads(out)["cautions"])

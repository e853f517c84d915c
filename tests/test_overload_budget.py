"""An overload held back by the step's token budget (vLLM's --max-num-batched-tokens): its
steps run the whole budget, decodes and prompt chunks together, while requests wait, and a
step twice the size computes nearly twice the tokens a second; simulate names the budget as
the limit, not the GPU's compute (sim/overload.py ``budget_bound``)."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.reports.simulate_overload import COMPUTE_BOUND
from ridgeline.sim.blocks import BlockPool
from ridgeline.sim.overload import BUDGET_GAIN, budget_bound, budget_gain
from ridgeline.sim.request import Request
from ridgeline.sim.scheduler import FULL_BUDGET, Scheduler, SchedulerConfig
from tests.test_sim_overload import simulate_both

DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
TINY = ["llama-3.1-8b", "--gpu", "h100", "--num-requests", "40", "--rate", "4",
        "--max-num-batched-tokens", "10"]


def test_a_step_of_decodes_and_a_prompt_chunk_filling_the_budget_is_budget_full() -> None:
    """Four decodes and a 6-token chunk of a 512-token prompt take a 10-token budget whole
    while the next prompt waits: budget-full. The same step with nobody waiting is not."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=10),
                  BlockPool(1000, 16))
    for i in range(6):
        s.add(Request(i, 0.0, 512, 4))
    batch = s.schedule(0.0)
    assert sum(b.tokens for b in batch) == 10 and s.waiting
    assert s.budget_full(batch)
    s.waiting.clear()
    assert not s.budget_full(batch)


def test_twice_a_small_budget_computes_twice_the_tokens_and_a_large_one_no_more() -> None:
    """Llama-3.1-8B on one H100: a 10-token step reads the weights, so 20 tokens take about
    as long (gain ~2); an 8,192-token step is compute-bound, so twice the tokens take twice as
    long (gain ~1). Only the first is budget-bound, however many steps ran the budget whole."""
    small, large = budget_gain(DEP, profile_for("vllm"), 10), \
        budget_gain(DEP, profile_for("vllm"), 8192)
    assert small > 1.8 and large < 1.1
    assert budget_bound(100, 90, small) and not budget_bound(100, 90, large)
    assert not budget_bound(100, 40, small)  # most steps must have run it whole
    assert large < BUDGET_GAIN <= small


def test_a_ten_token_budget_overload_names_the_budget_and_its_flag() -> None:
    """10 tokens a step, 512-token prompts at 4 req/s: the engine serves about 1.4 req/s,
    nearly every step its whole budget with prompts waiting. It had said "compute-bound: no
    step found its … token budget full"; --json's limit is now "token_budget" and the line
    says to raise --max-num-batched-tokens."""
    out, text = simulate_both(*TINY)
    flag = out["overloaded"]
    assert flag["limit"] == FULL_BUDGET != COMPUTE_BOUND
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert "token-budget-bound" in line and "raise --max-num-batched-tokens" in line
    assert "no step found" not in line and "compute-bound" not in line


def test_a_budget_bound_overload_serves_more_with_a_larger_budget() -> None:
    """The claim behind the verdict: the same load with twice the budget serves more."""
    small = simulate_both(*TINY)[0]["request_rate_req_s"]
    larger = simulate_both(*TINY[:-1], "20")[0]["request_rate_req_s"]
    assert larger > 1.5 * small


# -- a short run far behind its arrivals (sim/overload.py ``backlog_floor``) ------------------

LONG_PROMPTS = ["llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--input-len", "50000",
                "--output-len", "200"]


def test_the_backlog_floor_is_twenty_or_a_short_runs_noise() -> None:
    from ridgeline.sim.metrics import OVERLOAD_BACKLOG, OVERLOAD_DEVIATIONS
    from ridgeline.sim.overload import backlog_floor

    assert backlog_floor(2000) == OVERLOAD_BACKLOG  # a long run's floor is unchanged
    assert backlog_floor(30) == pytest.approx(OVERLOAD_DEVIATIONS * 30 ** 0.5)
    assert backlog_floor(30) < OVERLOAD_BACKLOG


def test_a_short_run_three_times_over_capacity_is_overloaded() -> None:
    """30 requests of 50,000 tokens at 1 req/s to one H100, which serves about 0.33 req/s of
    them: the mean request queued 25 s of a 30 s span, yet no OVERLOADED line came (a backlog
    had to be 20 requests), only the caution that the latencies "read lighter"."""
    out, text = simulate_both(*LONG_PROMPTS, "--num-requests", "30")
    flag = out["overloaded"]
    assert flag is not None and flag["offered_req_s"] > 2 * flag["saturated_req_s"]
    assert flag["grew"] == "queue"
    assert any(x.startswith("OVERLOADED") for x in text.splitlines())
    assert "read lighter" not in text


def test_a_short_run_under_capacity_is_not_overloaded() -> None:
    """The same 30 requests at 0.3 req/s, under the 0.33 it serves: no verdict."""
    out, text = simulate_both(*LONG_PROMPTS[:4], "0.3", *LONG_PROMPTS[5:], "--num-requests",
                              "30")
    assert out["overloaded"] is None and "OVERLOADED" not in text

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


def test_a_run_of_decode_steps_that_fill_the_budget_counts_them_as_the_plain_steps_do() -> None:
    """A 4-token budget, 20 + 400-token requests at 40/s to one H100: most steps are four
    decodes, the budget whole, the queue waiting. The fast path's runs of decode steps
    (sim/fast_path.py) counted none of them budget-full (298 of 2,125 steps against the
    plain steps' 1,700): the same count either way now, and most steps."""
    from dataclasses import replace

    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.simulator import Simulator
    from ridgeline.sim.workload import Workload

    config = sim_config(DEP, EngineSettings(max_model_len=4096, max_num_batched_tokens=4))
    counts = []
    for fast in (True, False):
        sim = Simulator(DEP, profile_for("vllm"), replace(config, fast_path=fast))
        result = sim.run(iter(Workload(20, "20", "400", 40.0, seed=3)))
        assert (sim.bulk_steps > result.steps / 2) is fast  # most steps in runs
        counts.append((result.rec.budget_full_steps, result.steps))
    assert counts[0] == counts[1]
    assert counts[0][0] > 0.5 * counts[0][1]


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


# -- data-parallel ranks: the same rule, rank by rank ----------------------------------------

QWEN = ["qwen3-30b-a3b", "--gpu", "h100", "--input-len", "1000", "--output-len", "100"]
LLAMA = ["llama-3.1-8b", "--gpu", "h100", "--input-len", "512", "--output-len", "128"]
DP2 = ["--num-gpus", "1", "--data-parallel-size", "2"]


@pytest.mark.parametrize(("one", "ranks"), [
    # a MoE's ranks step together (sim/data_parallel.py): they counted no budget-full step
    # and blamed compute; the budget's gain read one rank's chunk beside idle ranks
    ([*QWEN, "--num-requests", "300", "--rate", "6", "--max-num-batched-tokens", "64"],
     [*QWEN, *DP2, "--enable-expert-parallel", "--num-requests", "600", "--rate", "12",
      "--max-num-batched-tokens", "64"]),
    # a dense model's ranks step each on its own clock (sim/independent_ranks.py)
    ([*LLAMA, "--num-requests", "40", "--rate", "4", "--max-num-batched-tokens", "10"],
     [*LLAMA, *DP2, "--num-requests", "80", "--rate", "8", "--max-num-batched-tokens", "10"]),
])
def test_two_ranks_held_by_their_budget_name_it_as_one_rank_at_half_the_rate_does(
        one: list[str], ranks: list[str]) -> None:
    """One rank offered half the rate names its token budget; two such ranks offered the
    whole rate name it too, with the same advice, the share read over the ranks' steps."""
    alone, alone_text = simulate_both(*one)
    both, text = simulate_both(*ranks)
    assert alone["overloaded"]["limit"] == FULL_BUDGET
    assert both["overloaded"]["limit"] == FULL_BUDGET
    for words in (alone_text, text):
        line = next(x for x in words.splitlines() if x.startswith("OVERLOADED"))
        assert "token-budget-bound" in line and "raise --max-num-batched-tokens" in line
        assert "compute-bound" not in line
    assert "of its ranks' steps ran their whole" in line  # (the two ranks' line)


def test_two_lock_step_ranks_held_by_their_compute_do_not_name_the_budget() -> None:
    """Qwen3-30B-A3B on DP2 with expert parallelism, a 2,048-token budget, 3,000-token
    prompts at 40 req/s: most ranks' steps run the budget whole with requests waiting, but a
    step of 4,096 tokens a rank computes about no more a second: compute-bound."""
    out, text = simulate_both("qwen3-30b-a3b", "--gpu", "h100", *DP2,
                              "--enable-expert-parallel", "--max-num-batched-tokens", "2048",
                              "--rate", "40", "--num-requests", "600", "--input-len", "3000",
                              "--output-len", "100")
    assert out["overloaded"]["limit"] == COMPUTE_BOUND
    line = next(x for x in text.splitlines() if x.startswith("OVERLOADED"))
    assert "compute-bound" in line and "of its ranks' steps ran their whole 2,048" in line
    assert "token-budget-bound" not in line


def test_lock_step_ranks_budget_gain_prices_every_rank_running_its_budget() -> None:
    """Under data parallelism a MoE's step takes every rank's tokens through the experts, and
    an engine its budget holds back has every rank's batch at its budget: the gain is of such
    a step (the simulator's, ``DataParallelSimulator.step_s``), not of one rank's chunk beside
    idle ranks. Qwen3-30B-A3B on DP2 with expert parallelism at 512 tokens a rank: 1.15,
    under BUDGET_GAIN, where the lone chunk read 1.35, over it."""
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.data_parallel import DataParallelSimulator
    from ridgeline.sim.scheduler import Scheduled

    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100"),
                           engine="vllm", expert_parallel=True, data_parallel_size=2)
    profile = profile_for("vllm")
    sim = DataParallelSimulator(dep, profile, sim_config(dep, EngineSettings()))

    def step_s(tokens: int, busy: int) -> float:  # ``busy`` ranks each a chunk of ``tokens``
        chunks = [[Scheduled(Request(i, 0.0, tokens, 1), tokens, 0)] if i < busy else []
                  for i in range(2)]
        return sim.step_s(chunks)

    gain = budget_gain(dep, profile, 512)
    assert gain == pytest.approx(2 * step_s(512, 2) / step_s(1024, 2), rel=1e-12)
    lone = 2 * step_s(512, 1) / step_s(1024, 1)
    assert gain < BUDGET_GAIN < lone


def test_sglang_ranks_budget_gain_is_of_a_ranks_share_of_the_servers_chunk() -> None:
    """SGLang divides --chunked-prefill-size over its DP-attention ranks (8,192 over 8:
    1,024 each): the gain is of a rank's share. Qwen3-30B-A3B on DP2 with expert
    parallelism, --chunked-prefill-size 1,024: 512 a rank, 1.15, as vLLM's ranks at 512
    each (the engines' exchanges differ by a few parts in a thousand), not 1.07 at 1,024."""
    model, gpu = resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100")
    sglang = Deployment.build(model, gpu, engine="sglang", expert_parallel=True,
                              data_parallel_size=2)
    vllm = Deployment.build(model, gpu, engine="vllm", expert_parallel=True,
                            data_parallel_size=2)
    profile = profile_for("vllm")  # the same profile: the budgets and exchanges differ
    server = budget_gain(sglang, profile, 1024)
    assert server == pytest.approx(budget_gain(vllm, profile, 512), rel=0.01)
    assert server > budget_gain(vllm, profile, 1024) * 1.05

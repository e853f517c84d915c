"""fit's levers where the seats, not the pool, cap the batch: as many seats as the pool then
holds, in the engine's own flag, checked by re-running fit with it."""

from __future__ import annotations

import json

import pytest

from ridgeline.cli import main

FLAGS = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests",
         "trtllm": "--max_batch_size"}


def fit_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
                 "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("engine", sorted(FLAGS))
def test_a_seat_capped_batch_is_offered_the_seats_its_pool_holds(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    capped = fit_json(capsys, "--engine", engine, "--max-num-seqs", "2")
    assert capped["engine_max_batch"] == 2 < capped["conversations"]
    [lever] = [v for v in capped["levers"] if v["name"].startswith(FLAGS[engine])]
    seats = int(lever["name"].split()[-1].replace(",", ""))
    # the seats' own memory (vLLM's graph sizes, sampler rows) moves the pool a little, so
    # the seats are the most it holds: one more and it holds fewer than they
    assert lever["engine_max_batch"] == seats <= lever["conversations"] and seats > 2
    rerun = fit_json(capsys, "--engine", engine, "--max-num-seqs", str(seats))
    assert rerun["engine_max_batch"] == seats  # the lever is what fit then says
    assert rerun["conversations"] == lever["conversations"]
    more = fit_json(capsys, "--engine", engine, "--max-num-seqs", str(seats + 1))
    assert more["conversations"] < seats + 1


def test_a_pool_capped_batch_gets_no_seats_lever(capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys)
    assert plain["engine_max_batch"] == plain["conversations"]
    assert not [v for v in plain["levers"] if v["name"].startswith("--max-num-seqs")]



def test_no_seats_lever_past_what_the_engine_starts_with(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--target-concurrency searches contexts down to a few tokens, where the default 1,024
    seats cap a pool of tens of thousands of conversations; vLLM refuses more seats than its
    step's tokens (max_num_batched_tokens 8,192), so no lever offers them, and fit answers
    (it had stopped on that refusal: 'must be at least --max-num-seqs (47,142)'). At 16
    tokens the pool holds more than 8,192 conversations, but not once as many seats take
    their sampler rows: the lever offers the most seats all held, within the budget; at 256
    it holds fewer, and the lever offers them, within the budget."""
    assert main(["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                 "--target-concurrency", "32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] >= 32
    budget = 8192  # vLLM's default max_num_batched_tokens on an H100
    found = {}
    for context in (16, 256):
        assert main(["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                     "--max-model-len", str(context), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["engine_max_batch"] == report["max_num_seqs"] < report["conversations"]
        found[context] = report["conversations"], [
            int(lever["name"].split()[-1].replace(",", "")) for lever in report["levers"]
            if lever["name"].startswith("--max-num-seqs")]
    held, (seats,) = found[16]
    assert held > budget > seats
    held, (seats,) = found[256]
    assert held < budget and seats <= held


def test_more_seats_than_the_smaller_budget_lever_leave_it_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-num-seqs 9,000 under --max-num-batched-tokens 65,536 is a vLLM start-up; the
    smaller-step lever (--max-num-batched-tokens 2,048) would hold fewer tokens than those
    seats, which vLLM refuses, so fit leaves the lever out (it had refused the whole command,
    blaming a 2,048-token budget the user never gave). At 2,048 seats the lever stays."""
    from ridgeline.reports.fit_levers import SMALLER_PROFILE_TOKENS

    smaller = f"--max-num-batched-tokens {SMALLER_PROFILE_TOKENS}"
    for seats in (9000, SMALLER_PROFILE_TOKENS):
        report = fit_json(capsys, "--max-num-batched-tokens", "65536", "--max-num-seqs",
                          str(seats))
        assert report["max_num_seqs"] == seats
        offered = any(v["name"] == smaller for v in report["levers"])
        assert offered is (seats <= SMALLER_PROFILE_TOKENS)


def test_the_seats_lever_at_a_short_context_is_the_most_seats_all_held(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 64 tokens: the default 1,024 seats cap a pool of about
    7,600 conversations, and each seat's sampler rows shrink the pool, so the lever's count
    is where seats and conversations held cross. One step of seats := held stopped at 4,673
    seats beside 5,951 conversations (seats still the cap); the lever now gives the most
    seats whose conversations all fit, and fit given one more seat holds fewer than them."""
    base = ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "64", "--json"]
    assert main(base) == 0
    report = json.loads(capsys.readouterr().out)
    [lever] = [v for v in report["levers"] if v["name"].startswith("--max-num-seqs")]
    seats = int(lever["name"].split()[-1].replace(",", ""))
    assert lever["engine_max_batch"] == seats <= lever["conversations"]
    assert main([*base, "--max-num-seqs", str(seats)]) == 0
    rerun = json.loads(capsys.readouterr().out)
    assert rerun["engine_max_batch"] == seats == lever["engine_max_batch"]
    assert main([*base, "--max-num-seqs", str(seats + 1)]) == 0
    more = json.loads(capsys.readouterr().out)
    assert more["conversations"] < seats + 1  # one more seat is no longer all held


def test_a_data_parallel_seats_lever_gives_each_ranks_flag_that_the_pools_hold(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s, DP8 with expert parallelism, at 4,096 tokens with
    --max-num-seqs 16: the flag is each rank's, so the lever's value × 8 must be held when
    fit runs with it (not the pool's all-rank count as a rank's value), and a target past the
    seats is met only with values from its share of a rank to the lever's."""
    argv = ["fit", "deepseek-v3", "--gpu", "h200", "-dp", "8", "--enable-expert-parallel",
            "--max-model-len", "4096", "--json"]

    def run(*extra: str) -> dict:
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    capped = run("--max-num-seqs", "16", "--target-concurrency", "200")
    [lever] = [v for v in capped["levers"] if v["name"].startswith("--max-num-seqs")]
    each = int(lever["name"].split()[-1].replace(",", ""))
    raised = run("--max-num-seqs", str(each))
    assert raised["engine_max_batch"] == each * 8 <= raised["conversations"]
    assert capped["target_met"] is False
    assert capped["target_met_with"] == {"flag": "--max-num-seqs", "min_value": -(-200 // 8),
                                         "max_value": each}

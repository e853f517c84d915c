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
    assert capped["batch"] == 2 < capped["conversations"]
    [lever] = [v for v in capped["levers"] if v["name"].startswith(FLAGS[engine])]
    seats = int(lever["name"].split()[-1].replace(",", ""))
    assert lever["batch"] == lever["conversations"] == seats > 2
    rerun = fit_json(capsys, "--engine", engine, "--max-num-seqs", str(seats))
    assert rerun["batch"] == rerun["conversations"] == seats  # the lever is what fit then says


def test_a_pool_capped_batch_gets_no_seats_lever(capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys)
    assert plain["batch"] == plain["conversations"]
    assert not [v for v in plain["levers"] if v["name"].startswith("--max-num-seqs")]



def test_no_seats_lever_past_what_the_engine_starts_with(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--target-concurrency searches contexts down to a few tokens, where the default 1,024
    seats cap a pool of tens of thousands of conversations; vLLM refuses more seats than its
    step's tokens (max_num_batched_tokens 8,192), so no lever offers them, and fit answers
    (it had stopped on that refusal: 'must be at least --max-num-seqs (47,142)')."""
    assert main(["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                 "--target-concurrency", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["conversations"] >= 32
    for lever in report["levers"]:
        if lever["name"].startswith("--max-num-seqs"):
            assert int(lever["name"].split()[-1].replace(",", "")) <= 8192

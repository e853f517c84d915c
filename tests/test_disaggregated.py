"""xPyD pools: a TTFT chained through two pools is the percentile of the sum, not the sum of
the percentiles; the pools are sized in either KV cache format."""

from __future__ import annotations

import math
import random

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.disaggregated import GRID, chained_percentile_s, disaggregated_candidates, quantile_grid
from ridgeline.serving_load import Load, Slo


def test_percentiles_do_not_add() -> None:
    """Two waits each 0.2 s nine times in ten and 1 s the tenth (0.91 / 0.09): each p90 is
    0.2 s, so their p90s add to 0.4 s, but one request in six waits the long one somewhere,
    and the sum's p90 is 1.2 s."""
    wait = [0.2] * round(0.91 * GRID) + [1.0] * round(0.09 * GRID)
    assert sorted(wait)[int(0.9 * GRID) - 1] == 0.2
    assert chained_percentile_s((wait, wait), 90) == pytest.approx(1.2)
    assert chained_percentile_s((wait, wait), 50) == pytest.approx(0.4)


def test_the_chained_percentile_matches_sampled_sums() -> None:
    """Three independent exponential waits (means 0.1, 0.02 and 0.05 s): the grid's p90 of
    their sum against 200,000 sampled sums."""
    rng = random.Random(7)
    means = (0.1, 0.02, 0.05)
    grids = [quantile_grid(lambda q, m=m: -m * math.log(1 - q / 100)) for m in means]
    sums = sorted(sum(rng.expovariate(1 / m) for m in means) for _ in range(200_000))
    assert chained_percentile_s(grids, 90) == pytest.approx(sums[int(0.9 * len(sums))],
                                                            rel=0.02)


def test_the_pools_may_keep_an_fp8_cache() -> None:
    """On a card with fp8, the split is sized in whichever cache format needs fewer GPUs,
    and its line names the format."""
    model = resolve_model("llama-3.1-70b")
    load = Load(10.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    slo = Slo(1.0, 0.05, 90)
    found = disaggregated_candidates(model, load, slo, ["mi300x"], 64, {"mi300x": 1.85})
    assert found and found[0].kv == "fp8"  # half the cache a token: one decode replica, not 2
    bf16_only = disaggregated_candidates(model, load, slo, ["a100-sxm-80gb"], 64, {},
                                         engine="trtllm")
    assert bf16_only and all(c.kv == "bf16" for c in bf16_only)  # TRT-LLM: no fp8 cache on Ampere
    assert f"KV {found[0].kv}" in found[0].label_for("vllm")


def test_plan_says_when_a_split_undercuts_the_winner(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A verified xPyD split cheaper than the co-located winner is named as such, with the
    hand-off it needs."""
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "plan", "llama-3.1-70b", "--rate", "10", "--input-len",
                           "lognormal:1000,0.8", "--output-len", "lognormal:250,0.8",
                           "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--gpus", "mi300x")
    assert code == 0
    win = float(out.split("winner: ")[1].split("$")[1].split("/h")[0])
    splits = [line for line in out.splitlines() if line.startswith("disaggregated, ")
              and "simulated" in line]
    costs = [float(line.split("$")[1].split("/h")[0]) for line in splits]
    cheaper = [c for c in costs if c < win]
    assert ("costs less than the winner" in out) == bool(cheaper)


def test_a_latency_summed_with_itself_thrice_is_carried_in_quantiles() -> None:
    """Three draws of the same wait (one list passed three times): the p90 of their sum, where
    a third of the draws take the long wait at least once."""
    wait = [0.2] * round(0.91 * GRID) + [1.0] * round(0.09 * GRID)
    assert chained_percentile_s((wait, wait, wait), 90) == pytest.approx(1.4)
    assert chained_percentile_s((wait,), 90) == pytest.approx(0.2)

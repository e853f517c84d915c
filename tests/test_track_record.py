"""The step-cost model's record on a card (track_record.py, data/track_record.json): the
bundled file is what validate says today, and a prediction carries the record's figure where
its card's rows lean one way."""

from __future__ import annotations

import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import bundled_twins, profile_for
from ridgeline.track_record import (
    AS_FACTOR,
    LEANING,
    MIN_ROWS,
    RecordRow,
    bundled_record,
    how_far,
    leaning,
    phase_of,
    track_record_caution,
)

ROOT = Path(__file__).resolve().parent.parent


def test_the_bundled_record_is_what_validate_says_today() -> None:
    """A refit or a catalog change that moves a prediction leaves the record stale until
    scripts/track_record.py is run again: this fails until then. A fresh interpreter, as a
    user runs the script: scripts that patch the step cost (fit_offload.py) leave caches
    behind in this one."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "track_record.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_phases_split_the_metrics_and_leave_capacity_out() -> None:
    assert phase_of("decode_tok_s_per_user") == "decode"
    assert phase_of("output_throughput_tok_s_per_gpu") == "decode"
    assert phase_of("ttft_ms") == "prefill"
    assert phase_of("kv_cache_gib") is None


def test_the_serving_engines_speak_for_each_other_and_llamacpp_alone() -> None:
    serving = twins("vllm")
    assert {"vllm", "sglang", "trtllm"} <= serving
    assert "llama.cpp-cuda" not in serving
    assert twins("llama.cpp-cuda") == frozenset({"llama.cpp-cuda"})


def twins(engine: str) -> frozenset[str]:
    return frozenset(bundled_twins(profile_for(engine)))


def _row(i: int, optimism: float, moe: bool = True, engine: str = "sglang",
         excess_ms: float | None = None) -> RecordRow:
    return RecordRow(f"r{i}", "b300", engine, "decode", moe, "deepseek-r1", optimism, "x.csv",
                     excess_ms)


def test_a_leaning_of_twice_as_fast_or_more_reads_as_a_factor() -> None:
    """A caution's "278% faster" reads as 2.8x as readily as the 3.8x it means: from
    AS_FACTOR on, the median and range are factors; below it, percentages as before."""
    far = leaning([_row(i, 1.0 + i) for i in range(MIN_ROWS)], "b300",
                  frozenset({"sglang"}), "decode", True)
    near = leaning([_row(i, -0.2 + 0.01 * i) for i in range(MIN_ROWS)], "b300",
                   frozenset({"sglang"}), "decode", True)
    assert far is not None and near is not None
    assert far.median_optimism >= AS_FACTOR > near.median_optimism
    said = how_far(far, "here")
    assert f"priced {1 + far.median_optimism:.1f}x as fast as measured at the median" in said
    assert f"({1 + far.low:.1f}x to {1 + far.high:.1f}x; here)" in said
    assert f"priced {abs(near.median_optimism):.0%} slower than measured" in how_far(near, "here")


def test_ttft_rows_give_their_excess_in_ms_and_mixed_rows_do_not() -> None:
    """Where every row is a TTFT, the caution says the measured times over the priced ones
    and by how many ms; one row of another metric (no excess recorded) takes that out."""
    excess = [10.0 * (i + 1) for i in range(MIN_ROWS)]
    rows = [_row(i, 0.5 + i, excess_ms=ms) for i, ms in enumerate(excess)]
    found = leaning(rows, "b300", frozenset({"sglang"}), "decode", True)
    assert found is not None and found.excess_ms == tuple(excess)
    said = how_far(found, "here")
    assert f"measured {1 + found.median_optimism:.1f}x the priced time at the median" in said
    assert (f"{statistics.median(excess):+,.0f} ms over it ({excess[0]:+,.0f} to "
            f"{excess[-1]:+,.0f} ms; here)") in said
    mixed = leaning([*rows, _row(MIN_ROWS, 0.5)], "b300", frozenset({"sglang"}), "decode", True)
    assert mixed is not None and mixed.excess_ms == ()
    assert "ms over it" not in how_far(mixed, "here")


def test_fewer_rows_than_the_minimum_say_nothing_and_the_median_is_the_rows() -> None:
    rows = [_row(i, -0.2 + 0.01 * i) for i in range(MIN_ROWS)]
    found = leaning(rows, "b300", frozenset({"sglang"}), "decode", True)
    assert found is not None
    assert found.median_optimism == pytest.approx(statistics.median(r.optimism for r in rows))
    assert (found.low, found.high) == (rows[0].optimism, rows[-1].optimism)
    assert leaning(rows[1:], "b300", frozenset({"sglang"}), "decode", True) is None
    # another kind, engine or phase is another record
    assert leaning(rows, "b300", frozenset({"sglang"}), "decode", False) is None
    assert leaning(rows, "b300", frozenset({"vllm"}), "decode", True) is None
    assert leaning(rows, "b300", frozenset({"sglang"}), "prefill", True) is None


def _dep(model: str, gpu: str, n: int, engine: str) -> Deployment:
    """The checkpoint as stored, tensor parallel over ``n`` GPUs."""
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n, 1,
                            engine)


def test_deepseek_r1_on_b300_carries_its_rows_figure_under_any_serving_engine() -> None:
    """The B300's published DeepSeek-R1 decode rows (SGLang) lean slow: vLLM's prediction on
    the same card shares their profile, so it says the same."""
    found = leaning(bundled_record(), "b300", twins("sglang"), "decode", True)
    assert found is not None and abs(found.median_optimism) >= LEANING
    for engine in ("sglang", "vllm"):
        caution = track_record_caution(_dep("deepseek-r1", "b300", 8, engine), "decode",
                                       profile_for(engine))
        assert f"{abs(found.median_optimism):.0%} slower" in caution
        assert f"the {found.rows} published decode rows of MoE models" in caution
    # no dense model was measured there: nothing to say of one
    assert track_record_caution(_dep("llama-3.1-70b", "b300", 2, "vllm"), "decode",
                                profile_for("vllm")) == ""


def test_a_card_whose_rows_sit_near_the_mark_gets_no_caution() -> None:
    found = leaning(bundled_record(), "h100-sxm", twins("vllm"), "decode", False)
    assert found is not None and abs(found.median_optimism) < LEANING
    assert track_record_caution(_dep("llama-3.1-70b", "h100-sxm", 2, "vllm"),
                                "decode", profile_for("vllm")) == ""


def test_the_cdna3_moe_caution_is_not_said_twice() -> None:
    """MI325X's DeepSeek-R1 rows lean far optimistic, but the CDNA3 MoE caution already
    speaks for them."""
    found = leaning(bundled_record(), "mi325x", twins("sglang"), "decode", True)
    assert found is not None and found.median_optimism >= LEANING
    assert track_record_caution(_dep("deepseek-r1", "mi325x", 8, "sglang"), "decode",
                                profile_for("sglang")) == ""


def test_decode_and_simulate_print_it(capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main

    main(["decode", "deepseek-r1", "--gpu", "b300", "--num-gpus", "8", "--engine", "sglang",
          "--batch", "1", "--context", "2000"])
    assert "published decode rows of MoE models under SGLang" in capsys.readouterr().out
    main(["simulate", "deepseek-r1", "--gpu", "b300", "--num-gpus", "8", "--engine", "sglang",
          "--concurrency", "4", "--num-requests", "40", "--input-len", "1000",
          "--output-len", "100"])
    assert "published decode rows of MoE models under SGLang" in capsys.readouterr().out


def test_plan_says_it_of_its_winner(capsys: pytest.CaptureFixture[str]) -> None:
    """plan prices its candidates through the same step cost, so its B300 winner carries the
    same record as decode's."""
    from ridgeline.cli import main

    main(["plan", "deepseek-r1", "--gpus", "b300", "--rate", "2", "--input-len", "1000",
          "--output-len", "500", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--engine",
          "sglang"])
    caution = track_record_caution(_dep("deepseek-r1", "b300", 8, "sglang"), "decode",
                                   profile_for("sglang"))
    assert caution and f"caution: {caution}" in capsys.readouterr().out


def test_a_users_own_calibration_carries_no_record_of_the_bundled_one() -> None:
    """The record scores the bundled profiles: under a profile of the user's own (here the
    bundled one with another bandwidth share), it has nothing to say."""
    mine = replace(profile_for("sglang"), bandwidth_efficiency=0.5)
    assert bundled_twins(mine) == ()
    dep = _dep("deepseek-r1", "b300", 8, "sglang")
    assert track_record_caution(dep, "decode", profile_for("sglang"))
    assert track_record_caution(dep, "decode", mine) == ""

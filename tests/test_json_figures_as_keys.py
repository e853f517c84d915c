"""--json gives as keys what the text gives only in words, and spells an absent value null:
plan's closest miss and Pareto points, observe's "implies 40.9 ms a token: -26%", llama.cpp's
layers in host memory under decode and prefill; hardware's and plan's undated prices, a
single-pool row's split, observe's missing latencies and its preemption count, the model
card's parameter figure (h_json's findings 10, 11 and 14)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.closest_miss import simulated_miss
from ridgeline.plan import plan
from ridgeline.plan_checks import CheckRun
from ridgeline.serving_load import Load, Slo
from tests.conftest import cli_json, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
MISS = ("plan", "llama-3.1-70b", "--gpus", "l40s", "--rate", "4", "--slo-ttft-ms", "200",
        "--slo-tpot-ms", "10", "--max-gpus", "2", "--workers", "1")
PLAN = ("plan", "llama-3.1-8b", "--rate", "5", "--input-len", "1000", "--output-len", "200",
        "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--gpus", "l40s,h200", "--workers", "1")
OFFLOAD = ("qwen3-30b-a3b", "--gpu", "rtx4090", "--engine", "llama.cpp-cuda", "--weights",
           "q4_k_m", "-ngl", "30", "--host-bandwidth-gbs", "76.8")


def _answer(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict[str, Any], str]:
    """One command's --json object and its text, whatever its exit code (plan's no is 1)."""
    _, out, err = run_cli(capsys, *argv, "--json")
    assert out, err
    _, text, _ = run_cli(capsys, *argv)
    return json.loads(out), text


# -- plan -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("plan_shared")
def test_plans_closest_miss_gives_its_group_and_latencies_as_keys(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on at most 2 L40S, SLOs of 200 ms and 10 ms: NO DEPLOYMENT, and the
    sentence's group and unloaded latencies are keys, each the sentence's figure."""
    data, _ = _answer(capsys, *MISS)
    miss, figures = data["closest_miss"], data["closest_miss_figures"]
    assert data["verdict"] == "none" and figures["kind"] == "unloaded"
    assert miss.startswith(f"{figures['num_gpus']} x {figures['accelerator']} "
                           f"(TP{figures['tensor_parallel_size']})")
    assert figures["num_gpus"] == (figures["tensor_parallel_size"]
                                   * figures["pipeline_parallel_size"])
    assert (f"TTFT ≥ {figures['ttft_s'] * 1e3:,.0f} ms, TPOT ≥ {figures['tpot_s'] * 1e3:,.1f} ms"
            in miss)
    over = [name for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"))
            if figures[key] > data["slo"][key]]
    assert figures["missed"] == over and figures["itl_s"] is None  # no ITL SLO given
    assert figures["gpus_needed"] is None


# PLAN unsimulated (its rows as the search settles them), once for the three tests reading it
@pytest.mark.usefixtures("plan_shared", "unsimulated")
def test_a_winning_plan_has_no_closest_miss_figures(capsys: pytest.CaptureFixture[str]) -> None:
    data = cli_json(capsys, *PLAN)
    assert data["winner"] is not None
    assert data["closest_miss"] is None and data["closest_miss_figures"] is None


def test_a_miss_past_max_gpus_gives_the_gpus_it_needs() -> None:
    """3,000 req/s of Llama-3.1-8B: one card meets the SLO unloaded; the load is the miss, and
    the GPUs the sentence says it needs are ``gpus_needed``."""
    result = plan(resolve_model("llama-3.1-8b"), Load(3000, "1000", "250"), Slo(0.5, 0.04),
                  gpus=["l40s", "h100-sxm"], workers=1)
    figures = result.closest_miss_figures
    assert figures is not None and figures.kind == "load" and figures.missed == ()
    found = re.search(r"needs about ([\d,]+) GPUs", result.closest_miss)
    assert found and figures.gpus_needed == int(found.group(1).replace(",", ""))
    assert result.closest_miss.startswith(f"{figures.num_gpus} x {figures.accelerator} ")


def test_a_model_no_group_holds_has_no_group_in_its_figures() -> None:
    result = plan(resolve_model("deepseek-v3"), Load(1.0, "1000", "200"), Slo(2.0, 0.1),
                  gpus=["rtx-4090"], max_gpus=2, workers=1)
    figures = result.closest_miss_figures
    assert result.closest_miss.startswith("does not fit") and figures is not None
    assert figures.kind == "does_not_fit" and figures.accelerator is None
    assert figures.to_dict()["ttft_s"] is None and "text" not in figures.to_dict()


def test_a_simulated_miss_names_the_itl_that_missed_as_a_key() -> None:
    """Two checks that missed only the ITL SLO: the nearer one's figures, ITL the miss."""
    model = resolve_model("llama-3.1-8b")
    slo = Slo(0.5, 0.05, 90, itl_s=0.02)
    c = Candidate("l40s", 1, 1, "fp8", "fp8", None, 16, 0.02, 0.05, 1.0, 1, 1.86, True, "",
                  (1.0, 1.0))
    near, far = (CheckRun(False, 0.1, 0.03, 1600, 0, (1.0, 9.0), itl_s=slo.itl_s * f)
                 for f in (1.2, 1.5))
    miss = simulated_miss(model, [(c, far), (c, near)], slo, 1, "vllm")
    assert miss is not None and miss.kind == "simulated"
    assert (miss.accelerator, miss.tensor_parallel_size) == (c.accelerator, c.tp)
    assert (miss.ttft_s, miss.tpot_s, miss.itl_s) == (near.ttft_s, near.tpot_s, near.itl_s)
    assert miss.missed == ("ITL",) and f"ITL {near.itl_s * 1e3:,.1f} ms" in miss.text


@pytest.mark.usefixtures("plan_shared", "unsimulated")  # PLAN, as the first reader asks it
def test_pareto_points_name_what_their_label_says(capsys: pytest.CaptureFixture[str]) -> None:
    """Each point's card, TP, formats and batch are keys, each in the label the text prints."""
    data, text = _answer(capsys, *PLAN)
    # the text shows the first point and the last 11
    assert data["pareto"][0]["point"] in text and data["pareto"][-1]["point"] in text
    for p in data["pareto"]:
        assert p["point"].startswith(f"{p['accelerator']} TP{p['tensor_parallel_size']} ")
        assert p["point"].endswith(f" {p['weights']}, KV {p['kv_dtype']}, b{p['batch']}")
        assert p["pipeline_parallel_size"] == 1 and p["data_parallel_size"] == 1


@pytest.mark.usefixtures("plan_shared", "unsimulated")  # PLAN, as the first reader asks it
def test_plan_rows_and_prices_spell_absent_as_null(capsys: pytest.CaptureFixture[str]) -> None:
    """A single-pool row's split is null (a split row's "1P1D"); an undated price is null."""
    data = cli_json(capsys, *PLAN)
    assert data["winner"]["disaggregated"] is None
    assert all(r["disaggregated"] is None for r in data["runners_up"])
    assert all(r["label"].startswith(f"{r['disaggregated']} pools of ")
               for r in data["disaggregated"])
    dates = {c["accelerator"]: c["price"]["date"] for c in data["cards"]}
    assert dates["l40s"] is None and dates["h200-sxm"]


# -- hardware -------------------------------------------------------------------------------
def test_an_undated_card_price_is_null_and_reads_back(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    record = cli_json(capsys, "hardware", "l40s")
    assert record["price_date"] is None and record["price_per_hour_usd"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**record, "id": "my-l40s", "aliases": []}), "utf-8")
    again = cli_json(capsys, "hardware", "--gpu-file", str(path))
    assert again["id"] == "my-l40s" and again["price_date"] is None


# -- observe --------------------------------------------------------------------------------
def test_observe_gives_the_rate_s_implied_itl_and_its_gap_as_keys(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM log with no ITL histogram: "implies 40.9 ms a token: -26%" is gap.rate_itl_s
    and gap.rate_itl; no latencies is null, not {}; its preemptions are a whole count."""
    argv = ("observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
            "--gpu", "h100")
    data, text = _answer(capsys, *argv)
    gap = data["gap"]
    assert "itl" not in gap
    assert (f"implies {gap['rate_itl_s'] * 1e3:,.1f} ms a token: {gap['rate_itl']:+.0%} "
            f"({gap['output_tok_s']:+.0%} in tok/s)") in text
    assert gap["rate_itl"] == pytest.approx(data["predicted_itl_s"] / gap["rate_itl_s"] - 1)
    assert data["latency_s"] is None
    assert isinstance(data["preemptions"], int)
    assert f"preemptions {data['preemptions']:,}" in text


def test_observe_with_a_measured_itl_gives_no_rate_gap(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = cli_json(capsys, "observe", str(FIXTURES / "vllm_bench.json"), "--model",
                    "llama-3.1-8b", "--gpu", "h100")
    assert "itl" in data["gap"] and "rate_itl" not in data["gap"]
    assert data["latency_s"]["itl"]["mean"] > 0


# -- model ----------------------------------------------------------------------------------
def test_the_model_card_s_parameters_are_a_count_beside_its_label(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, text = _answer(capsys, "model", "llama-3.1-70b")
    label = data["card_total_params_label"]
    assert f"card: {label}" in text
    assert data["card_total_params"] == pytest.approx(float(label[:-1]) * 1e9)
    assert isinstance(data["card_total_params"], int)
    listed = cli_json(capsys, "model")["models"]
    scale = {"B": 1e9, "T": 1e12}
    for m in listed:
        for key in ("card_total_params", "card_active_params"):
            shown = m[f"{key}_label"]
            assert m[key] == (None if shown is None else
                              pytest.approx(float(shown[:-1]) * scale[shown[-1]]))


# -- decode, prefill: llama.cpp's layers in host memory ------------------------------------
@pytest.mark.parametrize("command", [("decode",), ("prefill", "--prompt-len", "512")])
def test_llamacpp_s_layers_on_the_host_are_an_object(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """-ngl 30 of Qwen3-30B-A3B on an RTX 4090: the deployment line's "29 of 48 layers on the
    GPU; host memory 76.8 GB/s" as keys; vLLM's deployment has none."""
    data = cli_json(capsys, command[0], *OFFLOAD, *command[1:])
    o = data["offload"]
    assert o["placement"] in data["deployment"]
    assert f"{o['layers_on_gpu']} of {o['num_layers']} layers on the GPU" in o["placement"]
    assert f"-ngl {o['gpu_layers']}" in o["placement"] and o["output_on_gpu"] is True
    assert f"host memory {o['host_bandwidth_bytes_per_s'] / 1e9:,.1f} GB/s" in data["deployment"]
    assert o["host_weight_bytes"] > 0 and o["link_bytes_per_s"] > 0
    assert data["cpu_offload"] is None
    plain = cli_json(capsys, command[0], "llama-3.1-8b", "--gpu", "h100", *command[1:])
    assert plain["offload"] is None

"""Three limits a serving engineer sets on `plan` that it refused (session 62): the engine's
--max-model-len every launch starts with (each pool sized there as `fit --max-model-len`
sizes it), a ceiling on what a deployment costs an hour (--max-cost-per-hour-usd), and a
card record of one's own (--gpu-file), which the candidate workers receive whole."""

from __future__ import annotations

import functools
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import ridgeline.plan as planning
from ridgeline.catalog import resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import (
    Accelerator,
    catalog_id_named,
    load_accelerator_file,
    resolve_accelerator,
)
from ridgeline.plan import _evaluate
from ridgeline.plan_constraints import PlanConstraints
from ridgeline.serving_load import Load, Slo
from tests.conftest import cli_json, refused_line, run_cli
from tests.plan_memo import PlanMemo

SLO_8B = ["--slo-ttft-ms", "1000", "--slo-tpot-ms", "30"]
# two H100s, six L40Ss: cards of different prices, each within 8 GPUs
LOAD_8B = ["--rate", "40", "--max-gpus", "8", *SLO_8B]
# a card of one's own beside the catalog's H100: two of them hold it
ON_H100 = ["--rate", "40", "--max-gpus", "2", *SLO_8B]
LOAD_70B = ["--rate", "1", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100"]
ONE_H100 = ["--gpus", "h100", "--max-gpus", "1", *LOAD_70B]  # one H100 holds it
# this module's searches, each question once (`plan`'s among them)
PLANS = PlanMemo()


@pytest.fixture(autouse=True)
def _one_search_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "plan", PLANS)


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every priced single-pool row a plan's --json lists, and its splits."""
    return [r for r in (data["winner"], *data["runners_up"], *data["disaggregated"]) if r]


def test_plan_at_a_max_model_len_sizes_each_pool_as_fit_does_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on one H100 launched at the longest its pool starts with (34,560);
    --max-model-len 8192 launches every row at 8,192, and the winner's pool, conversations and
    seats are fit's at 8,192 for the same layout and knobs; its launch and check carry it."""
    with pytest.MonkeyPatch.context() as patch:  # the free length, as the search settles it
        patch.setattr(planning, "plan", functools.partial(planning.plan, verify=0))
        free = cli_json(capsys, "plan", "llama-3.1-70b", *ONE_H100)
    data = cli_json(capsys, "plan", "llama-3.1-70b", *ONE_H100,
                    "--max-model-len", "8192")
    assert free["winner"]["max_model_len"] != 8192
    assert data["constraints"]["max_model_len"] == 8192 == data["max_model_len"]
    assert all(r["max_model_len"] == 8192 for r in _rows(data))
    win = data["winner"]
    knobs = [flag for key, flag in (("max_num_seqs", "--max-num-seqs"),
                                    ("max_num_batched_tokens", "--max-num-batched-tokens"))
             for flag in ((flag, str(win[key])) if win[key] else ())]
    fit = cli_json(capsys, "fit", "llama-3.1-70b", "--gpu", win["accelerator"],
                   "--tensor-parallel-size", str(win["tensor_parallel_size"]),
                   "--pipeline-parallel-size", str(win["pipeline_parallel_size"]),
                   "--weights", win["weights_format"], "--kv-dtype", win["kv_dtype"],
                   "--max-model-len", "8192", *knobs)
    assert win["pool"] == {k: fit[k] for k in ("max_model_len", "tokens", "conversations",
                                                "max_num_seqs", "engine_max_batch")}
    assert "--max-model-len 8192 " in data["commands"]["vllm"]
    assert "--max-model-len 8192 " in data["check_command"]
    code, text, err = run_cli(capsys, "plan", "llama-3.1-70b", *ONE_H100,
                              "--max-model-len", "8192")
    assert code == 0, err
    assert "only launches at --max-model-len 8,192" in text.splitlines()[0]
    assert "the longest its KV pool starts with" not in text  # the length was given


@pytest.mark.usefixtures("unsimulated")  # the pools and launch lengths the search sizes
def test_a_layout_whose_pool_holds_no_request_of_the_length_is_left_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At the longest length one fp8 H100's pool starts with (its fewest seats), TP1
    launches; one step longer it does not (fit: no conversation), so every row is wider."""
    free = cli_json(capsys, "plan", "llama-3.1-70b", *ONE_H100)
    longest = free["winner"]["max_model_len"]
    assert free["winner"]["tensor_parallel_size"] == 1
    past = longest + 256  # replica_sizing.MODEL_LEN_STEP
    win = free["winner"]
    fit = cli_json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights",
                   win["weights_format"], "--kv-dtype", win["kv_dtype"], "--max-model-len",
                   str(past), *(("--max-num-seqs", str(win["max_num_seqs"]))
                                if win["max_num_seqs"] else ()))
    assert fit["conversations"] == 0
    data = cli_json(capsys, "plan", "llama-3.1-70b", "--gpus", "h100", "--max-gpus", "2",
                    *LOAD_70B, "--max-model-len", str(past), "--weights", win["weights_format"],
                    "--kv-dtype", win["kv_dtype"])
    assert all(r["tensor_parallel_size"] * r["pipeline_parallel_size"] > 1 for r in _rows(data))
    assert all(r["pool"]["conversations"] >= 1 for r in (data["winner"], *data["runners_up"]))


@pytest.mark.usefixtures("unsimulated")  # the pools and launch lengths the search sizes
def test_the_closest_miss_judges_each_group_at_the_max_model_len(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Within one H100, Llama-3.1-70B plans at its own length; at --max-model-len 65,536 no
    format's pool holds one request (fit: 0 conversations at each), so the closest miss is
    that no group fits at that length, not TP1's latencies or the load (as it said when it
    judged each group at the load's mean length)."""
    one = ONE_H100
    assert cli_json(capsys, "plan", "llama-3.1-70b", *one)["winner"]["num_gpus"] == 1
    for weights in ("fp8", "bf16"):
        fit = cli_json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights", weights,
                       "--kv-dtype", "fp8", "--max-num-seqs", "1", "--max-model-len", "65536")
        assert fit["conversations"] == 0
    code, out, _ = run_cli(capsys, "plan", "llama-3.1-70b", *one, "--max-model-len",
                             "65536", "--json")
    miss = json.loads(out)["closest_miss_figures"]
    assert code == 1 and miss["kind"] == "does_not_fit" and miss["accelerator"] is None
    assert "at --max-model-len 65,536" in json.loads(out)["closest_miss"]


def test_a_request_longer_than_the_max_model_len_is_refused_naming_both(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every request of 1,000 + 250 tokens past --max-model-len 1,200: one line with the
    request's length and the limit; a spread load names its share past it and its longest."""
    base = ["plan", "llama-3.1-8b", "--gpus", "h100", *LOAD_8B]
    load = Load(40.0, "1000", "250")
    line = refused_line(capsys, *base, "--max-model-len", "1200")
    assert f"{load.longest_request():,} tokens" in line and "--max-model-len 1,200" in line
    spread = Load(40.0, "lognormal:1000,0.5", "250")
    line = refused_line(capsys, *base, "--input-len", "lognormal:1000,0.5",
                        "--max-model-len", "1500")
    assert f"{spread.refused_share(1500):.1%}" in line
    assert f"{spread.longest_request():,} tokens" in line and "1,500" in line
    assert "past llama-3.1-8b's 131,072-token context" in refused_line(
        capsys, *base, "--max-model-len", "200000")
    assert "shorter than --min-context 16,384" in refused_line(
        capsys, *base, "--max-model-len", "8192", "--min-context", "16384")


@pytest.mark.parametrize("flag", ["--max-model-len", "--max-cost-per-hour-usd"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "ten"])
def test_a_bad_limit_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], flag: str,
                                            value: str) -> None:
    line = refused_line(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", *LOAD_8B,
                        f"{flag}={value}")
    assert flag in line


def test_a_price_ceiling_drops_the_deployments_above_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Between the H100s' best and the L40Ss' best, the ceiling keeps the winner and drops
    every deployment above it; the L40S is named as past it, at its cheapest price."""
    argv = ["plan", "llama-3.1-8b", "--gpus", "h100,l40s", *LOAD_8B]
    free = cli_json(capsys, *argv)
    best = {c["accelerator"]: c["cost_per_hour_usd"] for c in free["cards"]}
    low, high = sorted(best.values())
    assert low < high
    ceiling = (low + high) / 2
    data = cli_json(capsys, *argv, "--max-cost-per-hour-usd", f"{ceiling}")
    assert data["winner"]["label"] == free["winner"]["label"]
    assert all(r["cost_per_hour_usd"] <= ceiling for r in _rows(data))
    # the single pools within it keep their places, cheapest first
    kept = [r["label"] for r in (free["winner"], *free["runners_up"])
            if r["cost_per_hour_usd"] <= ceiling]
    assert [r["label"] for r in (data["winner"], *data["runners_up"])][:len(kept)] == kept
    assert {c["accelerator"]: c["status"] for c in data["cards"]} == {
        gpu: "priced" if cost <= ceiling else "over ceiling" for gpu, cost in best.items()}
    assert data["constraints"]["max_cost_per_hour_usd"] == ceiling
    assert data["over_ceiling"] is None


def test_a_ceiling_under_every_deployment_names_the_cheapest_that_meets_the_slo(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Below the cheapest priced row: NO DEPLOYMENT within it, exit 1, and the winner the plan
    finds without the ceiling named with its price (--json: over_ceiling, closest_miss_figures
    kind over_ceiling)."""
    argv = ["plan", "llama-3.1-8b", "--gpus", "h100,l40s", *LOAD_8B]
    free = cli_json(capsys, *argv)
    ceiling = min(r["cost_per_hour_usd"] for r in _rows(free)) * 0.9
    code, out, err = run_cli(capsys, *argv, "--max-cost-per-hour-usd", f"{ceiling}", "--json")
    assert code == 1, err
    data = json.loads(out)
    assert data["verdict"] == "none" and data["winner"] is None
    assert data["over_ceiling"]["label"] == free["winner"]["label"]
    assert data["over_ceiling"]["cost_per_hour_usd"] == free["winner"]["cost_per_hour_usd"]
    assert data["closest_miss_figures"]["kind"] == "over_ceiling"
    code, text, _ = run_cli(capsys, *argv, "--max-cost-per-hour-usd", f"{ceiling}")
    assert code == 1
    assert f"NO DEPLOYMENT within ${ceiling:,.2f}/h" in text
    assert f"{free['winner']['label']} = " in text
    assert f"${free['winner']['cost_per_hour_usd']:,.2f}/h" in text


def _record(capsys: pytest.CaptureFixture[str], tmp_path: Path, ident: str,
            price: float | None) -> Path:
    """The catalog's H100 (`hardware h100 --json`) as a user's record named ``ident``, at
    ``price`` a GPU-hour (None: none)."""
    data = cli_json(capsys, "hardware", "h100")
    data.update(id=ident, aliases=[], price_per_hour_usd=price)
    path = tmp_path / f"{ident}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.usefixtures("unsimulated")  # the layouts, prices and launches the search settles
def test_a_gpu_file_card_is_planned_and_priced(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """An H100's figures under a record of one's own at $2.00 a GPU-hour: plan lays it out as
    it lays out the catalog's H100 at --price h100=2, and prices it at its own record's price;
    a record without a price is refused, naming the key and --price, and --price prices it."""
    path = _record(capsys, tmp_path, "lab-h100-s62", 2.0)
    mine = cli_json(capsys, "plan", "llama-3.1-8b", "--gpu-file", str(path), *ON_H100)
    ours = cli_json(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", "--price", "h100=2",
                    *ON_H100)
    win, twin = mine["winner"], ours["winner"]
    assert win["accelerator"] == "lab-h100-s62"
    assert win["label"] == twin["label"].replace("h100-sxm", "lab-h100-s62")
    assert win["cost_per_hour_usd"] == pytest.approx(win["num_gpus"] * 2.0) == \
        twin["cost_per_hour_usd"]
    assert [c["accelerator"] for c in mine["cards"]] == ["lab-h100-s62"]  # alone without --gpus
    beside = cli_json(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", "--gpu-file",
                      str(path), *ON_H100)
    assert [c["accelerator"] for c in beside["cards"]] == ["h100-sxm", "lab-h100-s62"]
    unpriced = _record(capsys, tmp_path, "lab-free-s62", None)
    line = refused_line(capsys, "plan", "llama-3.1-8b", "--gpu-file", str(unpriced), *ON_H100)
    assert "price_per_hour_usd" in line and "--price lab-free-s62=USD" in line
    priced = cli_json(capsys, "plan", "llama-3.1-8b", "--gpu-file", str(unpriced), "--price",
                      "lab-free-s62=1.5", *ON_H100)
    assert priced["winner"]["price"]["price_per_gpu_hour_usd"] == 1.5


def test_a_gpu_file_that_is_not_a_card_record_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "rows.json"
    bad.write_text(json.dumps({"rows": []}))
    for path in (bad, tmp_path / "missing.json"):
        assert str(path) in refused_line(capsys, "plan", "llama-3.1-8b", "--gpu-file",
                                         str(path), *LOAD_8B)


def test_a_worker_sizes_the_record_it_receives_not_an_id(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    """A spawned worker has read no --gpu-file: it sizes the job's record as this process
    does (the job carries the record; the worker registers it for the lookups by id)."""
    record = load_accelerator_file(str(_record(capsys, tmp_path, "lab-h100-spawn", 2.0)))
    assert isinstance(record, Accelerator) and catalog_id_named(record.id) is None
    job = (resolve_model("llama-3.1-8b"), record, 1, 1, "fp8", "fp8", (None, None), False,
           Load(40.0, "1000", "250"), Slo(1.0, 0.03), 2.0, None, "vllm", profile_for("vllm"),
           1, PlanConstraints(max_model_len=8192))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        remote = pool.submit(_evaluate, job).result()
    here = _evaluate(job)
    assert remote is not None and remote == here
    assert remote.accelerator == "lab-h100-spawn" and remote.max_model_len == 8192


def test_the_plan_api_takes_a_card_record_as_a_card() -> None:
    """A library caller hands `plan` the record itself, registering nothing: the H100's
    figures under an id of its own at $2.00 a GPU-hour plan as the catalog's H100 priced at
    $2.00; the catalog's own record stands for its id; the catalog's id on other figures is
    refused, as `hardware.check_record_id` refuses it to a --gpu-file."""
    model, load, slo = resolve_model("llama-3.1-8b"), Load(40.0, "1000", "250"), Slo(1.0, 0.03)
    h100 = resolve_accelerator("h100")
    mine = replace(h100, id="api-h100-s62", aliases=(), price_per_hour_usd=2.0)
    assert catalog_id_named(mine.id) is None
    # within 2 GPUs and unsimulated (verify=0: the layout and price the search settles), as
    # the --gpu-file test asks: its H100 at $2.00 is this one
    ours = PLANS(model, load, slo, ["h100"], 2, prices={"h100-sxm": 2.0}, workers=1, verify=0)
    theirs = PLANS(model, load, slo, [mine], 2, workers=1, verify=0)
    win, twin = theirs.winner, ours.winner
    assert win is not None and twin is not None
    assert win.accelerator == mine.id and [c.gpu for c in theirs.cards] == [mine.id]
    assert (win.tp, win.pp, win.replicas, win.weights, win.kv, win.batch) == \
        (twin.tp, twin.pp, twin.replicas, twin.weights, twin.kv, twin.batch)
    assert win.cost_per_hour == pytest.approx(twin.cost_per_hour)
    assert PLANS(model, load, slo, [h100], 2, workers=1, verify=1).winner == \
        PLANS(model, load, slo, ["h100-sxm"], 2, workers=1, verify=1).winner
    with pytest.raises(InputError, match="catalog's id"):
        PLANS(model, load, slo, [replace(h100, price_per_hour_usd=2.0)], 2, workers=1)

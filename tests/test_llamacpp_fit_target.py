"""llama.cpp's --fit leaves --fit-target free on each device (common/fit.cpp: a device's
target is its free memory less the margin, and --fit keeps the most layers whose projected
use stays under it). Where it moved weights to the host, `fit` prints that margin as a line of
its own, and the KV cache, the cells held, the verdict and the levers are what a run at that
placement allocates, not the margin read as cache."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.hardware import device_memory_bytes
from ridgeline.llamacpp_fit import default_fit_target_bytes, fit_placement, fit_pool
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.offload import HostOffload
from ridgeline.reports.fit import fit_report
from ridgeline.units import GIB, MIB
from tests.conftest import run_cli

SETTINGS = EngineSettings()
REPRO = ("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp")


def whole(model: str, gpu: str, weights: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, 1,
                            engine="llama.cpp-cuda")


def place(dep: Deployment, context: int, margin: float) -> Deployment:
    return fit_placement(dep, replace(SETTINGS, max_model_len=context), context, 1,
                         HostOffload(dep.model.num_layers + 1), margin)


def fit_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *REPRO, *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def test_the_margin_is_its_own_ledger_line_and_the_ledger_adds_up(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--fit-target 16000 moves layers to the host to keep 16,000 MiB free: the ledger takes
    that margin before the cache, and the card's memory less what is taken is the cache."""
    d = fit_json(capsys, "--fit-target", "16000")
    taken = d["taken_bytes_per_gpu"]
    assert taken["left_free_by_fit"] == 16000 * MIB
    assert d["memory_bytes_per_gpu"] - sum(taken.values()) == pytest.approx(
        d["kv_cache_bytes_per_gpu"])
    assert d["kv_cache_bytes_per_gpu"] < 1 * GIB  # not the 15.8 GiB the margin would be
    _code, out, _ = run_cli(capsys, *REPRO, "--fit-target", "16000")
    margin_line = next(line for line in out.splitlines() if "left free by --fit" in line)
    assert "--fit-target 16,000 MiB" in margin_line
    assert margin_line.split()[-2] == f"{16000 * MIB / GIB:,.2f}"
    assert f"holds {d['tokens']:,} cells (-c up to {d['tokens']:,}" in out
    _code, explained, _ = run_cli(capsys, *REPRO, "--fit-target", "16000", "--explain")
    assert f"left free by --fit = {16000 * MIB / GIB:.4g} GiB" in explained
    assert "− compute buffer − left free by --fit" in explained


def test_the_cells_held_are_those_the_placement_keeps() -> None:
    """The cells the report holds at the --fit placement are a run's: -c that many keeps the
    same -ngl with the margin free, one cell more makes --fit move another layer."""
    margin = 16000 * MIB
    dep = whole("llama-3.1-8b", "rtx-4090")
    placed = place(dep, 4096, margin)
    assert placed.offload is not None and placed.offload.chosen_by_fit
    report = fit_report(placed, 4096, SETTINGS, fit_margin_bytes=margin)
    cells = report.pool.tokens
    assert cells >= 4096 and report.pool.fit_free_bytes == margin
    kept = place(dep, cells, margin).offload
    moved = place(dep, cells + 1, margin).offload
    assert kept is not None and kept.gpu_layers == placed.offload.gpu_layers
    assert moved is not None and moved.gpu_layers < placed.offload.gpu_layers


@pytest.mark.parametrize(("model", "gpu", "target_mib"), [
    ("llama-3.1-70b", "rtx-4090", None), ("llama-3.1-70b", "rtx-3090", 4096),
    ("llama-3.1-70b", "l40s", None), ("qwen3-30b-a3b", "rtx-4090", 4096)])
def test_realistic_targets_leave_their_margin_out_of_the_cache(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str,
        target_mib: int | None) -> None:
    """The default 1024 MiB and a 4096 MiB target, on cards --fit offloads a 70B or an MoE
    model on: the cache is the card less what is taken, the margin among it, and the cells it
    holds are no more than that cache's."""
    flags = [] if target_mib is None else ["--fit-target", str(target_mib)]
    code, out, err = run_cli(capsys, "fit", model, "--gpu", gpu, "--engine", "llama.cpp",
                             *flags, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["offload"] is not None
    taken = d["taken_bytes_per_gpu"]
    assert taken["left_free_by_fit"] == (target_mib or 1024) * MIB
    assert d["memory_bytes_per_gpu"] - sum(taken.values()) == pytest.approx(
        d["kv_cache_bytes_per_gpu"])
    assert d["conversations"] >= 1


def test_the_half_context_lever_is_the_run_fit_prints_at_that_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A lever is priced as `fit` prices its run: at half the context under the same
    --fit-target, as many conversations as `fit --max-model-len` half prints, not the
    margin's worth of cells read as cache."""
    for target in ("8000", "16000"):
        d = fit_json(capsys, "--fit-target", target)
        rerun = fit_json(capsys, "--fit-target", target, "--max-model-len",
                         str(d["max_model_len"] // 2))
        half = [lv for lv in d["levers"] if lv["name"].startswith("half the context")]
        assert (rerun["conversations"] > d["conversations"]) == (target == "8000")
        if rerun["conversations"] > d["conversations"]:
            assert [(lv["conversations"], lv["engine_max_batch"]) for lv in half] == \
                [(rerun["conversations"], rerun["engine_max_batch"])]
        else:  # at 16000 MiB no layer-kept slot fits: -c 2048 holds the one it did at 4096
            assert half == []


def test_a_placement_not_chosen_by_fit_keeps_the_whole_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl N stops --fit, so no margin is kept: its JSON names none, and the pool is the card
    less weights, runtime and buffer; a model --fit leaves whole keeps the margin free."""
    d = fit_json(capsys, "--max-model-len", "8192", "-ngl", "20", "--host-bandwidth-gbs", "80")
    assert "left_free_by_fit" not in d["taken_bytes_per_gpu"]
    assert d["memory_bytes_per_gpu"] == device_memory_bytes(resolve_accelerator("rtx-4090"))
    d = fit_json(capsys, "--max-model-len", "8192")
    assert d["offload"] is None and d["taken_bytes_per_gpu"]["left_free_by_fit"] == default_fit_target_bytes()


def test_fit_pool_is_the_pool_of_the_card_less_the_margin() -> None:
    """fit_pool is kv_pool at the card's memory less the margin, with the margin put back as a
    line: the same cells, compute buffer and room, over the whole card."""
    dep = place(whole("llama-3.1-70b", "rtx-4090"), 8192, 1024 * MIB)
    s = replace(SETTINGS, max_model_len=8192)
    pool = fit_pool(dep, s, 1024 * MIB)
    less = kv_pool(dep, s, total_bytes=device_memory_bytes(dep.accelerator) - 1024 * MIB)
    assert pool.total_bytes == device_memory_bytes(dep.accelerator)
    assert (pool.tokens, pool.activation_bytes) == (less.tokens, less.activation_bytes)
    assert pool.rest_bytes == pytest.approx(less.rest_bytes)


@pytest.mark.parametrize("target_mib", [0, 4096, 16000])
def test_the_printed_command_carries_a_margin_other_than_the_default(
        capsys: pytest.CaptureFixture[str], target_mib: int) -> None:
    """The -c `fit` prints is sized for the --fit-target it was given: started without it,
    llama-server's --fit keeps its default 1024 MiB free instead, and at --fit-target 0 the
    printed -c 74240 is past the 66,340 cells that margin leaves, so --fit would move weights
    to the host. The command names the margin; at the default it needs no flag."""
    argv = (*REPRO, "--fit-target", str(target_mib))
    _code, out, _ = run_cli(capsys, *argv)
    command = out.split("start it with:")[1].splitlines()[0]
    assert f" --fit-target {target_mib} " in command + " "
    _code, out, _ = run_cli(capsys, *REPRO)
    assert "--fit-target" not in out.split("start it with:")[1].splitlines()[0]


def test_one_memory_says_fit_has_nowhere_to_move_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    """On Apple's unified memory --fit keeps the margin free but cannot move a weight off the
    GPU (fit_placement refuses it), so the cells line does not promise it: a -c past them is
    no placement, and -ngl auto typed (llama.cpp's own default, -1) warns and loads every
    layer as given, as the build's default does: the answer of -ngl all, with its caution."""
    argv = ("fit", "llama-3.1-8b", "--gpu", "apple-m2-ultra-76c", "--engine", "llama.cpp-metal")
    code, out, _ = run_cli(capsys, *argv, "--max-model-len", "8192", "--fit-target", "120000")
    assert code == 0
    cells = next(line for line in out.splitlines() if line.startswith("holds "))
    assert "moves weights" not in cells and "nowhere to move weights" in cells
    cells_held = int(cells.split()[1].replace(",", ""))
    past = ("--max-model-len", str(cells_held + 1), "--target-concurrency", "1", "--json")
    answers = []
    for flags in (("--fit-target", "120000", "-ngl", "auto"), ("--fit-target", "120000"),
                  ("-ngl", "all")):
        code, out, err = run_cli(capsys, *argv, *past, *flags)
        assert code == 0, err
        answers.append(json.loads(out))
    typed, default, every = answers
    assert typed["conversations"] == default["conversations"] == every["conversations"] >= 1
    (said,) = [c for c in typed["cautions"] if "finds no placement" in c]
    assert "nowhere to move weights" in said and said in default["cautions"]


@pytest.mark.parametrize("slots", ["9", "16"])
def test_more_slots_than_fit_share_the_cells_that_keep_every_layer(
        capsys: pytest.CaptureFixture[str], slots: str) -> None:
    """-np past the conversations that fit: -c is the context × those that fit with every
    layer on the GPU and the margin free (cli_offload.launch_fitted), the other slots sharing
    its cells, so --fit moves no weight. Counting them on the whole card had started
    llama-3.1-8b's 8K slots on an RTX 4090 at -c 9 × 8192, which --fit makes room for by
    moving weights to the host."""
    argv = ("--max-model-len", "8192")
    four = fit_json(capsys, *argv)
    d = fit_json(capsys, *argv, "-np", slots)
    assert d["offload"] is None
    assert d["llama_server_c"] == four["conversations"] * 8192 <= d["tokens"]
    code, out, err = run_cli(capsys, "simulate", *REPRO[1:], *argv, "-np", slots,
                             "--host-bandwidth-gbs", "60", "--concurrency", "1",
                             "--num-requests", "2", "--input-len", "100", "--output-len", "10",
                             "--json")
    assert code == 0, err
    sim = json.loads(out)["settings"]  # simulate starts the run fit prints
    assert (sim["offload"], sim["num_blocks"]) == (None, d["llama_server_c"])

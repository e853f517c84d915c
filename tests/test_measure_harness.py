"""`ridgeline measure`'s harness where the audit of session 61 found it wrong: the GPU it
times (cuda:N current throughout), the rows a crash keeps, AMD's fp8, the room read after the
probes' blocks go back, rows carded to a catalog accelerator, the dry run, the ids of config
files' rows and the install line; PyTorch stood in for, except where marked."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.measure import card_rows_path
from tests.test_measure import (
    TINY,
    needs_torch,
    next_step,
    refused,
    stand_in_for_measuring,
    stand_in_measure,
    tiny_config,
)

ROOT = Path(__file__).resolve().parent.parent


class Log(list[str]):
    """What the stand-in torch was asked, in order."""


def fake_torch(log: Log, count: int = 2, hip: str | None = None, arch: str = "gfx942",
               capability: tuple[int, int] = (9, 0)) -> Any:
    """A CUDA (or, with ``hip``, ROCm) torch with ``count`` GPUs that logs entering and
    leaving torch.cuda.device, and empty_cache."""
    class Current:
        def __init__(self, dev: Any) -> None:
            self.index = dev.index

        def __enter__(self) -> None:
            log.append(f"enter cuda:{self.index}")

        def __exit__(self, *exc: object) -> None:
            log.append(f"exit cuda:{self.index}")

    def device(text: str) -> Any:
        kind, _, index = text.partition(":")
        return SimpleNamespace(type=kind, index=int(index) if index else None)

    cuda = SimpleNamespace(
        is_available=lambda: True, device_count=lambda: count, device=Current,
        get_device_name=lambda dev: "stand-in GPU", mem_get_info=lambda dev: (60e9, 80e9),
        empty_cache=lambda: log.append("empty_cache"),
        get_device_capability=lambda dev: capability,
        get_device_properties=lambda dev: SimpleNamespace(gcnArchName=f"{arch}:sramecc+"))
    return SimpleNamespace(device=device, cuda=cuda, version=SimpleNamespace(hip=hip),
                           __version__="stand-in")


def test_cuda_n_is_the_current_device_while_it_is_measured_and_room_follows_the_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--device cuda:1: the probes run inside torch.cuda.device(cuda:1) (events, syncs and
    graphs use the current device), left after; the room for the grid is read after the
    probes' cached blocks are handed back (empty_cache), not before."""
    from ridgeline import measure as m

    log = Log()
    monkeypatch.setattr(m, "import_torch", lambda: fake_torch(log))

    def probes(torch: Any, dev: Any, quick: bool, skipped: list[str], dtype: str) -> list[Any]:
        log.append(f"probes on cuda:{dev.index}")
        return []

    def room(torch: Any, dev: Any) -> float:
        log.append("room read")
        raise InputError("stop here")

    monkeypatch.setattr(m, "probe_device", probes)
    monkeypatch.setattr(m.RandomModel, "build", classmethod(
        lambda cls, *a, **k: SimpleNamespace(grouped=False)))
    monkeypatch.setattr(m, "device_memory_bytes", room)
    with pytest.raises(InputError, match="stop here"):
        m.measure("cuda:1", True, tiny_config(tmp_path))
    assert log == ["enter cuda:1", "probes on cuda:1", "empty_cache", "room read",
                   "exit cuda:1"]


@pytest.mark.parametrize(("hip", "arch", "capability", "dtype"), [
    ("6.2", "gfx942", (9, 4), "float8_e4m3fnuz"),  # MI300X
    ("6.5", "gfx950", (9, 5), "float8_e4m3fn"),  # MI350
    ("6.2", "gfx90a", (9, 0), None),  # MI250: passes an sm_89 test, has no fp8
    (None, "", (9, 0), "float8_e4m3fn"),  # H100
    (None, "", (8, 0), None),  # A100
])
def test_fp8_takes_the_e4m3_each_gpu_runs(hip: str | None, arch: str,
                                          capability: tuple[int, int],
                                          dtype: str | None) -> None:
    """A ROCm torch is asked its gfx arch, not a capability (gfx9.x reads as ≥ sm_89); a card
    without fp8 gets the reason for its own vendor."""
    from ridgeline.device_probes import fp8_format

    torch = fake_torch(Log(), hip=hip, arch=arch, capability=capability)
    found, why = fp8_format(torch, torch.device("cuda"))
    assert found == dtype and (why == "") == (dtype is not None)
    if dtype is None:
        assert ("sm_89" in why) == (hip is None)
        assert not hip or arch in why


def test_fp8_on_an_amd_card_without_it_is_refused_before_the_probes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An MI250 under --fp8: one line naming its arch, exit 2, nothing written (it ended in
    'internal error' after the probes, asking the cuBLAS dtype of a card with no fp8)."""
    from ridgeline import measure as m

    log = Log()
    monkeypatch.setattr(m, "import_torch", lambda: fake_torch(log, hip="6.2", arch="gfx90a"))
    rows = tmp_path / "rows.csv"
    refused(["measure", "--device", "cuda", "--fp8", "--model", tiny_config(tmp_path), "-o",
             str(rows)], "--fp8 needs an AMD MI300 (gfx94x)", capsys)
    assert not rows.exists() and log == ["enter cuda:None", "exit cuda:None"]


def failing_after(rows: int, error: BaseException) -> Any:
    """A stand-in measure that times ``rows`` rows (handed to its sink) then raises."""
    def run(*args: Any, sink: Any = None) -> Any:
        timed = stand_in_measure(*args).rows[:rows]
        for row in timed:
            sink(row)
        raise error

    return run


@pytest.mark.parametrize(("error", "code"), [
    (RuntimeError("CUDA error: an illegal memory access"), 1),
    (KeyboardInterrupt(), 130),
])
def test_a_run_that_stops_mid_grid_keeps_the_rows_it_timed(
        error: BaseException, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A crash or Ctrl-C after two points: the two rows are in -o (and --card's copy), and
    stderr says so; they were lost before, written only once the grid was done."""
    from ridgeline import measure as m

    monkeypatch.setattr(m, "measure", failing_after(2, error))
    rows = tmp_path / "rows.csv"
    assert main(["measure", "--device", "cuda", "--model", tiny_config(tmp_path), "--card",
                 "h200", "-o", str(rows)]) == code
    err = capsys.readouterr().err
    assert f"the 2 rows measured before it are in {rows}" in err
    kept = list(csv.DictReader(rows.open()))
    assert [r["metric"] for r in kept] == ["decode_tok_s_per_user", "output_throughput_tok_s"]
    carded = list(csv.DictReader((tmp_path / "rows.h200-sxm.csv").open()))
    assert [r["gpu"] for r in carded] == ["h200-sxm"] * 2
    # the next run measures over them: they are measure's own rows
    stand_in_for_measuring(monkeypatch)
    assert main(["measure", "--model", tiny_config(tmp_path), "-o", str(rows)]) == 0


def test_a_refusal_mid_grid_is_one_line_that_names_the_rows_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline import measure as m

    monkeypatch.setattr(m, "measure", failing_after(1, InputError("does not fit: …")))
    rows = tmp_path / "rows.csv"
    refused(["measure", "--model", tiny_config(tmp_path), "-o", str(rows)],
            f"(the 1 rows measured before it are in {rows})", capsys)
    assert len(list(csv.DictReader(rows.open()))) == 1


@needs_torch
def test_a_real_run_that_crashes_keeps_its_timed_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's case on the CPU: the model's 13th step raises a non-OOM error."""
    from ridgeline.torch_model import RandomModel

    step, calls = RandomModel.step, []

    def thirteenth_fails(self: Any, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 13:
            raise RuntimeError("a kernel failed")
        return step(self, *args)

    monkeypatch.setattr(RandomModel, "step", thirteenth_fails)
    rows = tmp_path / "rows.csv"
    assert main(["measure", "--quick", "--skip-probes", "--model", tiny_config(tmp_path),
                 "-o", str(rows)]) == 1
    assert "internal error" in capsys.readouterr().err
    # each eager decode point runs 4 steps (1 warm-up, 3 timed): 3 points before the 13th
    assert len(list(csv.DictReader(rows.open()))) == 3


def test_rows_carded_to_a_catalog_card_validate_against_its_spec_sheet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--card h200: the same rows naming h200-sxm beside -o, the next step their validate
    (no --gpu-file: the card is the catalog's), the probes' validate on the line before;
    its rated figures beside the probes; --json the same. A file in the copy's place that
    measure did not write is refused before measuring."""
    stand_in_for_measuring(monkeypatch)
    rows, config = tmp_path / "rows.csv", tiny_config(tmp_path)
    argv = ["measure", "--device", "cuda", "--model", config, "--card", "h200", "-o", str(rows)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    card = tmp_path / "rows.h200-sxm.csv"
    validate = next_step(out)
    assert validate == ["validate", str(card)]
    measured, carded = (list(csv.DictReader(p.open())) for p in (rows, card))
    assert [r["gpu"] for r in carded] == ["h200-sxm"] * len(measured)
    for mine, theirs in zip(measured, carded, strict=True):
        assert theirs["id"] == mine["id"].replace("measure-measured-cuda-", "measure-h200-sxm-")
        assert {k: v for k, v in theirs.items() if k not in ("id", "gpu")} == \
            {k: v for k, v in mine.items() if k not in ("id", "gpu")}
    probes_line = next(line for line in out.splitlines() if "against the probes" in line)
    assert probes_line.endswith(f"--gpu-file {tmp_path / 'rows.accelerator.json'}")
    assert "rated 4,800 GB/s" in out  # --card stands for --rated-gpu
    assert main([*validate, "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)["rows"]
    assert len(scored) == len(carded) and all(r["predicted"] for r in scored)
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["next"] == " ".join(["ridgeline", *validate])
    assert data["card"] == {"id": "h200-sxm", "rows": str(card)}
    assert data["validate_against_probes"] == " ".join(["ridgeline", *next_step(
        probes_line.replace("against the probes (how near each step came to what they "
                            "reached): ", "next: "))])
    card.write_text("id,model\nmine,x\n")
    refused(argv, "(--card's copy of the rows, beside -o", capsys)
    refused([*argv[:-2], "--card", "h2000", "-o", str(rows)], "unknown accelerator", capsys)


def test_a_gpus_rows_without_a_card_say_what_the_probed_record_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    stand_in_for_measuring(monkeypatch)
    for device, hinted in (("cuda", True), ("cpu", False)):
        assert main(["measure", "--device", device, "--model", tiny_config(tmp_path), "-o",
                     str(tmp_path / f"{device}.csv")]) == 0
        out = capsys.readouterr().out
        assert ("--card names the catalog card" in out) == hinted
        assert next_step(out)[2] == "--gpu-file"


def test_a_dry_run_touches_no_device_and_imports_no_torch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--dry-run: the grid and its skips from the flags; torch never imported (it is made
    unimportable), nothing written. The memory known without the device skips what it
    cannot hold; a card prices a floor, a faster one a lower floor, none no floor."""
    monkeypatch.setitem(sys.modules, "torch", None)
    rows = tmp_path / "rows.csv"
    base = ["measure", "--dry-run", "--device", "cuda", "--model", "llama-3.2-1b", "-o",
            str(rows), "--json"]
    plans = {}
    for card in ("h100", "h200", None):
        assert main([*base, *(["--card", card] if card else [])]) == 0
        plans[card] = json.loads(capsys.readouterr().out)
    assert not rows.exists() and not (tmp_path / "rows.accelerator.json").exists()
    same = []  # one grid (the same memory) priced on each card: the faster card's floor lower
    for card in ("h100", "h200"):
        assert main([*base, "--card", card, "--memory-gib", "60"]) == 0
        same.append(json.loads(capsys.readouterr().out))
    assert same[0]["points"] == same[1]["points"]
    assert same[0]["floor_s"] > same[1]["floor_s"] > 0
    assert plans[None]["floor_s"] is None and plans[None]["memory_bytes"] is None
    # the two files a run with --card writes: -o, and the rows again naming the card
    assert plans["h200"]["would_write_card"] == str(card_rows_path(rows, "h200-sxm"))
    assert plans[None]["would_write_card"] is None
    assert plans[None]["skipped"] == []  # only the device can say
    assert plans["h100"]["skipped"]  # its 80 GB cannot hold batch 256 at 32,768 tokens
    skips = plans["h100"]["skipped"]

    def skipped(p: dict[str, Any]) -> bool:
        said = (f"prefill of {p['context_len']:,} tokens" if p["kind"] == "prefill" else
                f"batch {p['batch']} x context {p['context_len']}:")
        return any(s.startswith(said) for s in skips)

    assert plans["h100"]["points"] == [p for p in plans[None]["points"] if not skipped(p)]
    assert all(p["engines"] == ["torch-eager", "torch-cudagraph"] for p in
               plans["h200"]["points"] if p["kind"] == "decode")
    assert main([*base[:-1], "--memory-gib", "1", "--card", "h200"]) == 2  # 2.5 GB of weights
    assert "does not fit" in capsys.readouterr().err
    refused(["measure", "--device", "cuda", "-o", str(rows)], "measuring needs PyTorch",
            capsys)  # the same flags without --dry-run: a run, which needs torch


@needs_torch
def test_a_dry_run_lists_the_rows_a_run_writes_and_the_skips_it_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """On the CPU with room for part of the grid (its RAM stood in for): the dry run's
    points are the rows the run writes, and its skips the run's."""
    from ridgeline import measure as m
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.measure_plan import ROOM_SHARE
    from ridgeline.torch_model import RandomModel

    spec = spec_from_hf_config(TINY, "tiny")
    weights = m.weight_bytes_at(m.count_params(spec).total, 4)
    memory = weights + RandomModel.cache_bytes(spec, 8, 4096, 4) * 1.1 / ROOM_SHARE
    config, rows = tiny_config(tmp_path), tmp_path / "rows.csv"
    argv = ["measure", "--batches", "1,8,64", "--contexts", "1024,4096", "--skip-probes",
            "--model", config, "-o", str(rows)]
    from ridgeline import device_probes

    monkeypatch.setattr(device_probes, "host_ram_bytes", lambda: memory)  # a CPU's memory
    assert main([*argv, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(m, "device_memory_bytes", lambda torch, dev: memory - weights)
    assert main([*argv, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert [(r["batch"], r["context_len"] - (r["metric"] != "prefill_tok_s"))
            for r in run["rows"]] == [(p["batch"], p["context_len"]) for p in plan["points"]]
    assert run["skipped"] == plan["skipped"] and plan["skipped"]


def test_config_files_rows_are_told_apart_by_their_folder(tmp_path: Path) -> None:
    """Two config.json models in one file had ids measure-<gpu>-config.json-…, the same for
    both: each is now named for its folder (a file not named config.json, for its stem)."""
    from ridgeline.measure import row_label

    paths = []
    for name in ("qwen-a", "qwen-b"):
        (tmp_path / name).mkdir()
        paths.append(tiny_config(tmp_path / name))
    ids = [stand_in_measure("cpu", True, p, None, None, (), (), False, False).rows[0]["id"]
           for p in paths]
    assert ids[0] != ids[1] and "-qwen-a-" in ids[0] and "-qwen-b-" in ids[1]
    other = tmp_path / "tiny.json"
    other.write_text(json.dumps(TINY))
    assert row_label(str(other)) == "tiny"
    assert row_label("meta-llama/Llama-3.2-1B") == "Llama-3.2-1B"


def test_without_torch_the_hint_is_the_install_line_the_docs_give(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No `ridgeline` on PyPI is ours: the hint names the checkout's extra (docs/measure.md's
    line) or torch itself."""
    from ridgeline.torch_model import TORCH_EXTRA

    monkeypatch.setitem(sys.modules, "torch", None)
    refused(["measure", "--model", tiny_config(tmp_path), "-o", str(tmp_path / "r.csv")],
            f"measuring needs PyTorch: {TORCH_EXTRA}", capsys)
    docs = (ROOT / "docs" / "measure.md").read_text()
    assert "pip install -e '.[measure]'" in TORCH_EXTRA
    assert "pip install -e '.[measure]'" in docs and "ridgeline[measure]" not in TORCH_EXTRA


@pytest.mark.parametrize(("device", "card", "words"), [
    ("cpu", "h100", "--device cpu measures no catalog card"),
    ("mps", "h100", "--card h100-sxm is an NVIDIA card, but --device mps measures an Apple"),
    ("cuda:1", "apple-m3-max-40c", "measures an NVIDIA or an AMD card"),
])
def test_a_card_of_another_kind_of_device_is_refused(
        device: str, card: str, words: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--card prices the rows against a catalog card's spec sheet: a CPU's rows are no
    card's, an H100 is not measured under mps, an Apple card not under cuda (before any
    device is touched: under --dry-run too); a matching pair is planned."""
    rows = str(tmp_path / "rows.csv")
    refused(["measure", "--dry-run", "--device", device, "--card", card, "-o", rows], words,
            capsys)
    for ok_device, ok_card in (("cuda", "mi300x"), ("mps", "apple-m3-max-40c")):
        assert main(["measure", "--dry-run", "--device", ok_device, "--card", ok_card,
                     "-o", rows]) == 0
        capsys.readouterr()

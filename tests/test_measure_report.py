"""What `ridgeline measure` says: the CPU it measured by its model's name, and --json as one
structured object (the probes, the device record, the rows, the next step), without PyTorch."""

from __future__ import annotations

import csv
import json
import platform
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.device_probes import arm_core_names, host_cpu_name
from ridgeline.hardware import resolve_accelerator
from tests.test_measure import needs_torch, next_step, stand_in_for_measuring, tiny_config

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model name\t: Intel(R) Xeon(R)   CPU E5-2686 v4 @ 2.30GHz
cpu MHz\t\t: 2300.000
"""
PI = """processor\t: 0
CPU implementer\t: 0x41
CPU part\t: 0xd08

Hardware\t: BCM2835
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""

# an arm64 kernel's /proc/cpuinfo, one block a core (a GH200's Grace: 72 of these), no name
GRACE_CORE = """processor\t: {n}
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve sve2 i8mm bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0
"""
GRACE = "\n".join(GRACE_CORE.format(n=n) for n in range(4))


def test_an_arm64_cpu_without_a_model_name_is_named_by_its_core() -> None:
    """A GH200's cpuinfo names no model, only its cores' ids (implementer 0x41, part 0xd4f):
    they read "Neoverse-V2", as lscpu reads them, not "aarch64"; so does cpu0's MIDR_EL1 from
    sysfs where cpuinfo lacks the ids (0x410fd4f0). A big.LITTLE board names each core kind
    once; a part the table lacks, by its implementer; an unknown implementer, nothing."""
    assert host_cpu_name("Linux", GRACE) == "Neoverse-V2"
    assert host_cpu_name("Linux", "processor\t: 0\n", midr_el1="0x00000000410fd4f0\n") \
        == "Neoverse-V2"
    little, big = (GRACE_CORE.format(n=0).replace("0xd4f", part) for part in ("0xd05", "0xd0b"))
    assert arm_core_names(little + big + little) == "Cortex-A55 + Cortex-A76"
    assert arm_core_names(GRACE.replace("0xd4f", "0xfff")) == "ARM part 0xfff"
    assert arm_core_names(GRACE.replace("0x41", "0x7e")) == ""
    assert arm_core_names("processor\t: 0\n") == arm_core_names("", "not hex") == ""
    assert host_cpu_name("Linux", PI) == "Raspberry Pi 4 Model B Rev 1.4"  # a board's own name


def test_a_cpu_is_named_by_its_model_not_its_instruction_set() -> None:
    """Linux: /proc/cpuinfo's "model name" (runs of spaces closed up), else a board's
    "Model"; macOS: sysctl's brand string; with neither, what platform knows."""
    assert host_cpu_name("Linux", XEON) == "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz"
    assert host_cpu_name("Linux", PI) == "Raspberry Pi 4 Model B Rev 1.4"
    assert host_cpu_name("Darwin", brand_string="Apple M2 Pro\n") == "Apple M2 Pro"
    fallback = platform.processor() or platform.machine() or "unknown CPU"
    assert host_cpu_name("Linux", "processor\t: 0\nCPU part\t: 0xd08\n") == fallback
    assert host_cpu_name("Darwin", brand_string="") == fallback
    assert host_cpu_name("Windows") == fallback


def test_this_machine_is_named_by_what_its_cpuinfo_says() -> None:
    if platform.system() != "Linux":
        pytest.skip("/proc/cpuinfo is Linux's")
    named = host_cpu_name(cpuinfo=Path("/proc/cpuinfo").read_text(errors="replace"))
    assert host_cpu_name() == named
    if "model name" in Path("/proc/cpuinfo").read_text(errors="replace"):
        assert named != platform.machine()


@needs_torch
def test_a_cpu_measurement_names_the_cpu_in_its_result_and_rows(tmp_path: Path) -> None:
    from ridgeline import measure as m

    result = m.measure("cpu", True, tiny_config(tmp_path), batches=(1,), contexts=(8,),
                       probes=False)
    assert result.device_name == host_cpu_name()
    assert all(f", {host_cpu_name()}, float32" in r["notes"] for r in result.rows)


def test_measure_json_is_the_measurement_not_its_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--json: the device, each probe under its unit (bytes/s, FLOP/s) beside --rated-gpu's
    figure and the share reached, the record written, the rows as the CSV holds them (counts
    and value as numbers), what was skipped and the next step; the text report unchanged."""
    stand_in_for_measuring(monkeypatch)
    rows = tmp_path / "rows.csv"
    argv = ["measure", "--model", tiny_config(tmp_path), "--rated-gpu", "h200", "-o", str(rows)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    record = json.loads((tmp_path / "rows.accelerator.json").read_text())
    assert data["device"]["name"] == record["name"] and data["device"]["torch_device"] == "cpu"
    assert data["device"]["recorded_memory_bytes"] == record["memory_bytes"]
    assert data["device_record"] == {"path": str(tmp_path / "rows.accelerator.json"), **record}
    h200 = resolve_accelerator("h200")
    copy, square = data["probes"]
    assert copy["bytes_per_s"] == record["memory_bandwidth_bytes_per_s"]
    assert copy["share_of_rated"] == copy["bytes_per_s"] / h200.memory_bandwidth_bytes_per_s
    assert square["flop_per_s"] == record["peak_flops"][square["dtype"]]
    assert square["rated_flop_per_s"] == h200.peak(square["dtype"])
    written = list(csv.DictReader(rows.open()))
    assert [r["id"] for r in data["rows"]] == [r["id"] for r in written]
    for mine, theirs in zip(data["rows"], written, strict=True):
        assert mine["batch"] == int(theirs["batch"]) and mine["value"] == float(theirs["value"])
        assert mine["unit"] == theirs["unit"] == "tok/s"
    assert data["wrote"] == str(rows) and data["cautions"] == []
    assert data["next"] == " ".join(["ridgeline", *next_step(text)])
    assert data["skipped"] == [line.split("skipped: ", 1)[1] for line in text.splitlines()
                               if line.startswith("  skipped: ")]


def test_measure_json_without_a_record_says_how_to_validate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--skip-probes and no record of the rows' device anywhere near: no next step, and the
    caution says what validate needs; once a probed run has written one in the folder, that
    record is the next step's, in the text and the JSON alike."""
    stand_in_for_measuring(monkeypatch)
    config = tiny_config(tmp_path)
    steps = ["measure", "--model", config, "--skip-probes", "--gpu-id", "lab-1", "-o",
             str(tmp_path / "steps.csv")]
    assert main([*steps, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["next"] is None and data["device_record"] is None and data["probes"] == []
    (caution,) = data["cautions"]
    assert "give --gpu-file a record of lab-1" in caution
    assert main(["measure", "--model", config, "--gpu-id", "lab-1", "-o",
                 str(tmp_path / "probed.csv")]) == 0
    capsys.readouterr()
    assert main(steps) == 0
    validate = next_step(capsys.readouterr().out)
    assert validate[-1] == str(tmp_path / "probed.accelerator.json")
    assert main([*steps, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["next"] == " ".join(["ridgeline", *validate])
    assert main([*validate, "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["rows"] and all(r["predicted"] for r in checked["rows"])
    assert not any("not used" in note for note in checked["notes"])

"""The --json contract: every top-level key a command prints is listed in docs/json.md (so the
page cannot go stale), every object carries ridgeline_version and notes, a refusal that is an
answer prints JSON while bad input prints none, simulate's policy and load say what its text
says, and the launch line's notes reach the JSON."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ridgeline import __version__
from ridgeline.cli import build_parser
from ridgeline.errors import DoesNotFit, EveryRequestRefused
from tests.conftest import ROOT, run_cli

DOC = ROOT / "docs" / "json.md"
OFFLOAD = str(ROOT / "validation" / "offload.csv")
FIXTURES = ROOT / "tests" / "fixtures"
SIM = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--input-len", "256",
       "--output-len", "32", "--num-requests", "20"]
# the plan whose keys are checked, and whose lengths are read as numbers: one search
# (plan_shared) for both
PLAN = ["plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "2", "--input-len", "1k",
        "--output-len", "uniform:50,150", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100"]


def doc_tables() -> dict[str, set[str]]:
    """docs/json.md's keys, per heading: a `## \\`command\\`` section's (its nested tables'
    too, as `command.settings.workload` where a line names them), and the plain sections'
    ("Every object", "A refusal that is an answer")."""
    tables: dict[str, set[str]] = {}
    section = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## (?:`(\w+)`|(.+))$", line)
        if heading:
            section = heading.group(1) or heading.group(2)
            continue
        nested = re.match(r"`settings\.(\w+)`:$", line)
        if nested:
            section = f"{section.split('.')[0]}.{nested.group(1)}"
            continue
        key = re.match(r"\| `(\w+)` \|", line)
        if key and section:
            tables.setdefault(section, set()).add(key.group(1))
    return tables


# (command, argv): each command on a small input, and the other shapes its keys take
RUNS = [
    ("hardware", ["hardware"]), ("hardware", ["hardware", "h100"]),
    ("model", ["model"]), ("model", ["model", "llama-3.1-8b"]),
    ("roofline", ["roofline", "--gpu", "h100", "--model", "llama-3.1-8b"]),
    ("roofline", ["roofline", "--gpu", "h100,a100"]),
    ("moe", ["moe", "qwen3-30b-a3b", "--gpu", "h100"]),
    ("kv", ["kv", "llama-3.1-8b", "--gpu", "h100", "--context", "8000"]),
    ("decode", ["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,8"]),
    ("decode", ["decode", "llama-3.1-8b", "--gpu", "h100,h200", "--batch", "1"]),
    ("decode", ["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--batch", "1"]),
    ("prefill", ["prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "1000"]),
    ("prefill", ["prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len", "8"]),
    ("utilization", ["utilization", "--gpu", "h100", "--running", "8"]),
    ("utilization", ["utilization", "--gpu", "h100", "--running", "8", "--model",
                     "qwen3-30b-a3b", "--context", "4000"]),
    ("fit", ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"]),
    ("fit", ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192", "--engine",
             "vllm,sglang"]),
    ("simulate", SIM),
    ("simulate", [*SIM, "--num-gpus", "2", "--pipeline-parallel-size", "2", "--engine",
                  "sglang", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--slo-itl-ms", "50"]),
    ("plan", PLAN),
    ("observe", ["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "h100"]),
    ("observe", ["observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                 "--gpu", "h100"]),
    ("page", ["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "1"]),
    ("validate", ["validate", OFFLOAD]),
    ("calibrate", ["calibrate", OFFLOAD]),
    ("profile", ["profile"]), ("profile", ["profile", "--engine", "vllm", "--gpu", "mi300x"]),
    ("amdahl", ["amdahl", "--fraction", "0.3", "--speedup", "2", "--target", "1.2"]),
    ("amdahl", ["amdahl", "--model", "llama-3.1-8b", "--gpu", "h100", "--speedup", "2"]),
    ("evalstats", ["evalstats", "--pct-a", "40", "--pct-b", "47", "--n", "164"]),
    ("evalstats", ["evalstats", "--discordant", "10,20"]),
    ("prefix", ["prefix", "--tokens-a", "1,2,3,4", "--tokens-b", "1,2,3,5"]),
    ("attention", ["attention", "--model", "llama-3.1-8b", "--context", "8k"]),
]

# the commands whose answers name their deployment with identity_json's keys
IDENTITY_COMMANDS = {"fit", "decode", "prefill", "kv", "roofline", "moe", "utilization"}

# the answer no where the command needs the deployment running: (argv, error code)
REFUSALS = [
    (["simulate", "llama-3.1-70b", "--gpu", "h100", "--rate", "1", "--num-requests", "10"],
     DoesNotFit.code),
    (["utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.1-70b"],
     DoesNotFit.code),
    (["amdahl", "--model", "llama-3.1-70b", "--gpu", "h100", "--op", "attention", "--speedup",
      "2"], DoesNotFit.code),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--num-requests", "10",
      "--input-len", "100000", "--max-model-len", "8192"], EveryRequestRefused.code),
]


def _answer(capsys: pytest.CaptureFixture[str], argv: list[str],
            tmp_path: Path) -> tuple[int, Any]:
    """One command's --json, its files written under tmp_path."""
    written = {"page": ["-o", str(tmp_path / "page.html")],
               "calibrate": ["-o", str(tmp_path / "profile.json")]}.get(argv[0], [])
    code, out, err = run_cli(capsys, *argv, *written, "--json")
    assert out, err
    return code, json.loads(out)


@pytest.mark.parametrize(("command", "argv"), RUNS,
                         ids=[" ".join(argv[:2]) + f"#{i}" for i, (_, argv) in enumerate(RUNS)])
def test_every_top_level_key_a_command_prints_is_in_docs_json(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str,
        argv: list[str], plan_shared: None) -> None:
    code, data = _answer(capsys, argv, tmp_path)
    assert code == 0
    tables = doc_tables()
    listed = tables[command] | tables["Every object"]
    if command in IDENTITY_COMMANDS:
        listed |= tables["Every deployment answer"]
    assert not set(data) - listed, f"docs/json.md's {command} lacks {set(data) - listed}"
    assert data["ridgeline_version"] == __version__ and next(iter(data)) == "ridgeline_version"
    # a list on every object but a card record, whose note is its own string (--gpu-file)
    assert isinstance(data["notes"], str if argv == ["hardware", "h100"] else list)
    if command == "simulate":  # its load in numbers, each listed too
        assert set(data["settings"]["workload"]) <= tables["simulate.workload"]


def test_docs_json_has_a_section_for_every_command() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) <= set(doc_tables())
    assert {c for c, _ in RUNS} | {"measure"} == set(sub.choices)  # measure needs torch


@pytest.mark.parametrize(("argv", "code_word"), REFUSALS)
def test_a_refusal_that_is_an_answer_prints_json_and_keeps_exit_2(
        capsys: pytest.CaptureFixture[str], argv: list[str], code_word: str) -> None:
    code, out, err = run_cli(capsys, *argv, "--json")
    data = json.loads(out)
    assert code == 2 and data["fits"] is False and data["error"]["code"] == code_word
    assert f"`{code_word}`" in DOC.read_text(encoding="utf-8")  # each code documented
    assert f"ridgeline: error: {data['error']['message']}" == err.strip()  # the same line
    assert set(data) <= doc_tables()["A refusal that is an answer"] | \
        doc_tables()["Every object"]
    code, out, err = run_cli(capsys, *argv)  # as text: nothing on stdout, as before
    assert code == 2 and not out and err.startswith("ridgeline: error: ")


def test_bad_input_under_json_prints_nothing_on_stdout(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "nosuch", "--gpu", "h100", "--json")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "llama.cpp-cuda"])
def test_simulate_json_capacity_policy_is_what_its_engine_line_says(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, text, _ = run_cli(capsys, *SIM, "--engine", engine)
    line = next(x for x in text.splitlines() if x.startswith("engine: "))
    code, out, _ = run_cli(capsys, *SIM, "--engine", engine, "--json")
    policy = json.loads(out)["settings"]["capacity_policy"]
    assert code == 0 and f"; {policy}" in line


def test_simulate_json_gives_its_load_in_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4",
                           "--input-len", "512", "--output-len", "lognormal:100,0.5",
                           "--num-requests", "30", "--seed", "3", "--json")
    settings = json.loads(out)["settings"]
    load = settings["workload"]
    assert code == 0 and settings["load"].startswith("30 requests, input 512")
    assert (load["num_requests"], load["rate_req_s"], load["arrival"], load["seed"]) == \
        (30, 4.0, "poisson", 3)
    assert (load["prompt_len"], load["prompt_len_spec"]) == (512, "512")
    assert (load["output_len"], load["output_len_spec"]) == (None, "lognormal:100,0.5")
    code, out, _ = run_cli(capsys, *SIM[:4], "--concurrency", "8", "--num-requests", "20",
                           "--input-len", "2k", "--json")
    load = json.loads(out)["settings"]["workload"]
    assert (load["arrival"], load["rate_req_s"], load["max_concurrency"], load["prompt_len"]) \
        == ("closed_loop", None, 8, 2000)


def test_plan_json_gives_plain_lengths_as_numbers(capsys: pytest.CaptureFixture[str],
                                                  plan_shared: None) -> None:
    code, out, _ = run_cli(capsys, *PLAN, "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["prompt_len"], data["prompt_len_spec"]) == (1000, "1k")
    assert (data["output_len"], data["output_len_spec"]) == (None, "uniform:50,150")


def test_launch_line_notes_reach_the_json_as_well_as_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp-cuda", "-np", "4",
            "-c", "8192"]
    code, out, err = run_cli(capsys, *argv, "--json")
    notes = json.loads(out)["notes"]
    said = [line.removeprefix("ridgeline: note: ") for line in err.splitlines()
            if line.startswith("ridgeline: note: ")]
    assert code == 0 and said and notes == said and "-np 4" in notes[0]
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                             "8192", "--trust-remote-code", "--json")
    assert any("--trust-remote-code" in n for n in json.loads(out)["notes"])


def test_the_deployment_keys_listed_are_the_ones_every_deployment_answer_builds() -> None:
    """docs/json.md's "Every deployment answer" table lists exactly identity_json's keys."""
    from ridgeline.reports.identity import IDENTITY_KEYS

    assert doc_tables()["Every deployment answer"] == set(IDENTITY_KEYS)

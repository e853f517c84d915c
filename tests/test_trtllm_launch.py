"""plan's TensorRT-LLM launch: the trtllm-serve command (PyTorch backend) and the YAML it
names reproduce the replica ridgeline priced, read back by ridgeline's own reader of pasted
launch lines; fp8 weights of a 16-bit checkpoint name a checkpoint quantized beforehand, and
a layout trtllm-serve cannot be told gets one line instead of a command."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import resolve_model
from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.reports.launch_commands import command_line
from ridgeline.reports.trtllm_command import trtllm_launch
from tests.conftest import run_cli

TRTLLM = engine_defaults("trtllm")
CLI = TRTLLM["cli"]
LLAMA = resolve_model("llama-3.1-8b")
QWEN_MOE = resolve_model("qwen3-30b-a3b")


def _replica(tp: int = 1, pp: int = 1, kv: str = "bf16", weights: str = "bf16",
             ep: bool = False, seats: int | None = 96, tokens: int | None = None) -> Candidate:
    return Candidate("h100-sxm", tp, pp, weights, kv, seats, 64, 0.02, 0.1, 5.0, 1, 2.99,
                     False, "", (1.0, 1.0), expert_parallel=ep, max_num_batched_tokens=tokens)


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "fit", *argv, "--json")
    assert code == 0, (argv, err)
    data: dict[str, object] = json.loads(out)
    return data


def _pasted(command: str, config: Path | None = None) -> list[str]:
    """The trtllm-serve line's MODEL and flags, as they would be pasted after `ridgeline
    fit`, its YAML's name pointing at ``config``."""
    tokens = shlex.split(command)
    assert tokens[0] == CLI["launch"]
    if config is not None:
        tokens[tokens.index(CLI["config"]) + 1] = str(config)
    return tokens[1:]


def _own_flags(model: str, c: Candidate, max_len: int) -> list[str]:
    """The same replica in ridgeline's own flags, the plan's defaults spelled out."""
    argv = [model, "--num-gpus", str(c.tp), "--pipeline-parallel-size", str(c.pp),
            "--max-num-seqs", str(c.max_num_seqs or TRTLLM["max_batch_size"]),
            "--max-num-batched-tokens", str(c.max_num_batched_tokens or TRTLLM["max_num_tokens"]),
            "--max-model-len", str(max_len),
            "--gpu-memory-utilization", str(TRTLLM["kv_cache_free_gpu_mem_fraction"]),
            "--kv-dtype", c.kv, "--weights", c.weights]
    return argv + (["--enable-expert-parallel"] if c.expert_parallel else [])


@pytest.mark.parametrize(("model", "c"), [
    ("meta-llama/Llama-3.1-8B", _replica()),
    ("meta-llama/Llama-3.1-8B", _replica(tp=2, kv="fp8", seats=None, tokens=2048)),
    ("Qwen/Qwen3-30B-A3B", _replica(tp=4, pp=2, ep=True)),
])
def test_the_trtllm_serve_line_read_back_is_the_replica_plan_priced(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str, c: Candidate) -> None:
    spec = QWEN_MOE if "Qwen" in model else LLAMA
    launch = trtllm_launch(model, c, 8192, spec)
    assert launch.command and not launch.note
    config = None
    if launch.config:  # the file it names, written as plan prints it
        config = tmp_path / launch.config_name
        config.write_text(launch.config_text)
    place = ("--gpu", c.accelerator, "--engine", "trtllm")
    pasted = _fit(capsys, *_pasted(launch.command, config), *place)
    assert pasted == _fit(capsys, *_own_flags(model, c, 8192), *place)
    assert pasted["tensor_parallel_size"] == c.tp and pasted["pipeline_parallel_size"] == c.pp
    assert pasted["max_num_seqs"] == (c.max_num_seqs or TRTLLM["max_batch_size"])
    assert pasted["backend"] == TRTLLM["backend"]


def test_an_fp8_kv_cache_puts_the_memory_fraction_in_the_yaml_beside_it() -> None:
    """The file's kv_cache_config replaces the one trtllm-serve builds from its flags, so the
    fraction goes in the file, and the flag for it is left out (ridgeline's reader refuses a
    file that would drop it)."""
    fp8 = trtllm_launch("meta-llama/Llama-3.1-8B", _replica(kv="fp8"), 8192, LLAMA)
    assert fp8.config["kv_cache_config"] == {
        "dtype": "fp8", "free_gpu_memory_fraction": TRTLLM["kv_cache_free_gpu_mem_fraction"]}
    assert CLI["memory"] not in fp8.command.split()
    plain = trtllm_launch("meta-llama/Llama-3.1-8B", _replica(), 8192, LLAMA)
    assert not plain.config and CLI["config"] not in plain.command.split()
    words = plain.command.split()
    assert words[words.index(CLI["memory"]) + 1] == str(TRTLLM["kv_cache_free_gpu_mem_fraction"])


def test_fp8_weights_of_a_16_bit_checkpoint_name_a_checkpoint_quantized_beforehand(
        capsys: pytest.CaptureFixture[str]) -> None:
    c = _replica(weights="fp8")
    launch = trtllm_launch("meta-llama/Llama-3.1-8B", c, 8192, LLAMA)
    assert launch.command.split()[1] == CLI["quantized_checkpoint"]
    assert "meta-llama/Llama-3.1-8B" in launch.note and "on load" in launch.note
    # that checkpoint, served with these flags, is the replica priced at --weights fp8
    argv = _pasted(launch.command)
    argv[0] = "meta-llama/Llama-3.1-8B"
    place = ("--gpu", c.accelerator, "--engine", "trtllm")
    assert _fit(capsys, *argv, "--weights", "fp8", *place) == _fit(
        capsys, *_own_flags("meta-llama/Llama-3.1-8B", c, 8192), *place)


def test_a_layout_trtllm_serve_cannot_be_told_gets_a_line_and_no_command() -> None:
    c = replace(_replica(tp=2, ep=True), data_parallel=4)
    launch = trtllm_launch("Qwen/Qwen3-30B-A3B", c, 4096, QWEN_MOE)
    assert not launch.command and "enable_attention_dp" in launch.note
    assert command_line("trtllm", "Qwen/Qwen3-30B-A3B", c, 4096, model=QWEN_MOE) == ""


def test_plan_prints_the_winners_trtllm_serve_line_at_its_batch_and_tp(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms",
                             "1000", "--slo-tpot-ms", "50", "--gpus", "h100", "--engine",
                             "trtllm", "--workers", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    win = data["winner"]
    command = data["commands"]["trtllm"]
    words = command.split()
    assert words[:2] == [CLI["launch"], "meta-llama/Llama-3.1-8B"]
    assert words[words.index(CLI["tp"]) + 1] == str(win["tp"])
    assert words[words.index(CLI["max_len"]) + 1] == str(win["max_model_len"] or data["max_model_len"])
    seats = win["max_num_seqs"] or TRTLLM["max_batch_size"]
    assert words[words.index(CLI["max_num_seqs"]) + 1] == str(seats)
    pasted = _fit(capsys, *_pasted(command), "--gpu", win["accelerator"], "--engine", "trtllm")
    assert pasted["tensor_parallel_size"] == win["tp"] and pasted["max_num_seqs"] == seats
    code, text, _ = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms",
                            "1000", "--slo-tpot-ms", "50", "--gpus", "h100", "--engine",
                            "trtllm", "--workers", "1")
    lines = text.splitlines()
    assert lines[lines.index("run it with:") + 1] == f"  {command}"
    assert "not modelled" not in text


def test_plan_cautions_where_its_trtllm_line_would_not_run_the_loads_prompts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """12,000-token prompts outrun the winner's --max_num_tokens: its check chunked them, as
    TensorRT-LLM without enable_chunked_prefill would not, so plan says so with simulate's
    caution, naming the budget its printed line sets."""
    argv = ("plan", "llama-3.1-8b", "--rate", "2", "--input-len", "12000", "--output-len",
            "100", "--slo-ttft-ms", "3000", "--slo-tpot-ms", "100", "--gpus", "h100",
            "--engine", "trtllm", "--workers", "1")
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    words = data["commands"]["trtllm"].split()
    budget = int(words[words.index(CLI["max_num_batched_tokens"]) + 1])
    assert budget < 12000
    said = [c for c in data["cautions"] if "enable_chunked_prefill" in c]
    assert len(said) == 1 and f"max_num_tokens {budget:,}:" in said[0]
    requests = data["winner"]["sim_requests"]
    assert said[0].startswith(f"{requests:,} prompts")  # every prompt of its check
    # the check it prints cautions the same, worded by the same function
    code, text, err = run_cli(capsys, *shlex.split(data["check_command"])[1:])
    assert code == 0, err
    assert said[0].split(" (or ")[0] in text


def test_plan_gives_no_such_caution_where_the_prompts_fit_the_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms",
                             "1000", "--slo-tpot-ms", "50", "--gpus", "h100", "--engine",
                             "trtllm", "--workers", "1", "--json")
    assert code == 0, err
    assert not [c for c in json.loads(out)["cautions"] if "enable_chunked_prefill" in c]

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
             ep: bool = False, seats: int | None = 96, tokens: int | None = None,
             chunked: bool = False) -> Candidate:
    return Candidate("h100-sxm", tp, pp, weights, kv, seats, 64, 0.02, 0.1, 5.0, 1, 2.99,
                     False, "", (1.0, 1.0), expert_parallel=ep, max_num_batched_tokens=tokens,
                     enable_chunked_prefill=chunked)


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
    return argv + (["--enable-expert-parallel"] if c.expert_parallel else []) + (
        ["--enable_chunked_prefill"] if c.enable_chunked_prefill else [])


@pytest.mark.parametrize(("model", "c"), [
    ("meta-llama/Llama-3.1-8B", _replica()),
    ("meta-llama/Llama-3.1-8B", _replica(tp=2, kv="fp8", seats=None, tokens=2048)),
    ("Qwen/Qwen3-30B-A3B", _replica(tp=4, pp=2, ep=True)),
    ("meta-llama/Llama-3.1-8B", _replica(tokens=2048, chunked=True)),
    ("meta-llama/Llama-3.1-8B", _replica(kv="fp8", chunked=True)),
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
    assert ("enable_chunked_prefill: true\n" in launch.config_text) == c.enable_chunked_prefill


def test_a_chunked_trtllm_line_read_back_simulates_as_the_check_ran(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The line and its YAML with enable_chunked_prefill pasted after `ridgeline simulate`
    run the replica as ridgeline's own flags with --enable_chunked_prefill do: its prompts
    past max_num_tokens chunked with no caution, where the same line without it refuses
    them, as TensorRT-LLM does (exit 2: every prompt is past it)."""
    c = _replica(tokens=2048, chunked=True)
    launch = trtllm_launch("meta-llama/Llama-3.1-8B", c, 8192, LLAMA)
    config = tmp_path / launch.config_name
    config.write_text(launch.config_text)
    load = ("--gpu", c.accelerator, "--engine", "trtllm", "--rate", "1", "--num-requests",
            "4", "--input-len", "3000", "--output-len", "5", "--json")

    def simulate(*argv: str) -> tuple[str, list[str]]:
        """The report, and its cautions that name enable_chunked_prefill."""
        code, out, err = run_cli(capsys, "simulate", *argv, *load)
        assert code == 0, err
        return out, [x for x in json.loads(out)["cautions"] if "enable_chunked_prefill" in x]

    pasted, said = simulate(*_pasted(launch.command, config))
    assert pasted == simulate(*_own_flags("meta-llama/Llama-3.1-8B", c, 8192))[0]
    assert not said
    whole = replace(c, enable_chunked_prefill=False)
    code, _, err = run_cli(capsys, "simulate", *_own_flags("meta-llama/Llama-3.1-8B", whole,
                                                            8192), *load[:-1])
    assert code == 2 and "enable_chunked_prefill is off" in err


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


# one search for its text and --json; its claims are the co-located winner's line (split
# pools' checks left out: they are not it)
@pytest.mark.usefixtures("splits_unchecked", "plan_once")
def test_plan_prints_the_winners_trtllm_serve_line_at_its_batch_and_tp(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms",
                             "1000", "--slo-tpot-ms", "50", "--gpus", "h100", "--engine",
                             "trtllm", "--workers", "1", "--max-gpus", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    win = data["winner"]
    command = data["commands"]["trtllm"]
    words = command.split()
    # the winner is fp8 (at one price, the most headroom): trtllm-serve takes a checkpoint
    # quantized beforehand, named by its placeholder
    model = "meta-llama/Llama-3.1-8B" if win["weights"] == "bf16" else CLI["quantized_checkpoint"]
    assert words[:2] == [CLI["launch"], model]
    assert words[words.index(CLI["tp"]) + 1] == str(win["tensor_parallel_size"])
    assert words[words.index(CLI["max_len"]) + 1] == str(win["max_model_len"] or data["max_model_len"])
    seats = win["max_num_seqs"] or TRTLLM["max_batch_size"]
    assert words[words.index(CLI["max_num_seqs"]) + 1] == str(seats)
    files = data["config_files"] or {}
    config = None
    if CLI["config_file"] in files:  # an fp8 cache has no flag: the YAML carries it
        config = tmp_path / CLI["config_file"]
        config.write_text(files[CLI["config_file"]])
    line = _pasted(command, config)
    if line[0] == CLI["quantized_checkpoint"]:  # a checkpoint quantized beforehand: its format
        line = ["meta-llama/Llama-3.1-8B", *line[1:], "--weights", win["weights"]]
    pasted = _fit(capsys, *line, "--gpu", win["accelerator"], "--engine", "trtllm")
    assert pasted["tensor_parallel_size"] == win["tensor_parallel_size"] and pasted["max_num_seqs"] == seats
    # the load's prompts fit its max_num_tokens: no chunked-prefill word, setting or flag
    assert not [c for c in data["cautions"] if "enable_chunked_prefill" in c]
    assert not [n for n in data["notes"] if "chunked" in n] and not win["enable_chunked_prefill"]
    assert "enable_chunked_prefill" not in (data["config_files"] or {}).get(CLI["config_file"], "")
    assert "--enable_chunked_prefill" not in data["check_command"]
    code, text, _ = run_cli(capsys, "plan", "llama-3.1-8b", "--rate", "5", "--slo-ttft-ms",
                            "1000", "--slo-tpot-ms", "50", "--gpus", "h100", "--engine",
                            "trtllm", "--workers", "1", "--max-gpus", "2")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("run it with"))  # "(FP8_…)"
    assert lines[at + 1] == f"  {command}"
    assert "not modelled" not in text


# one search for its text and --json; its claims are the co-located winner's line (split
# pools' checks left out: they are not it)
@pytest.mark.usefixtures("splits_unchecked", "plan_once")
def test_plans_trtllm_line_turns_chunked_prefill_on_where_the_loads_prompts_outrun_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """12,000-token prompts outrun the winner's --max_num_tokens: TensorRT-LLM runs a context
    whole by default and would not run them, so the check ran with enable_chunked_prefill on
    and the printed YAML turns it on; the check command it prints reruns it so, with no
    whole-context caution, and the line and YAML pasted after `fit` are the replica."""
    argv = ("plan", "llama-3.1-8b", "--rate", "2", "--input-len", "12000", "--output-len",
            "100", "--slo-ttft-ms", "3000", "--slo-tpot-ms", "100", "--gpus", "h100",
            "--engine", "trtllm", "--workers", "1", "--max-gpus", "2")  # its winner's 1 GPU
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    win = data["winner"]
    command = data["commands"]["trtllm"]
    words = command.split()
    budget = int(words[words.index(CLI["max_num_batched_tokens"]) + 1])
    assert budget < 12000 and win["enable_chunked_prefill"] and not win["sim_over_budget"]
    name = words[words.index(CLI["config"]) + 1]
    assert "enable_chunked_prefill: true\n" in data["config_files"][name]
    said = [n for n in data["notes"] if "enable_chunked_prefill" in n]  # what the plan did:
    assert len(said) == 1 and f"reach 12,000 tokens, past max_num_tokens {budget:,}:" in said[0]
    assert not [c for c in data["cautions"] if "enable_chunked_prefill" in c]  # no warning
    assert "--enable_chunked_prefill" in data["check_command"].split()
    code, text, err = run_cli(capsys, *shlex.split(data["check_command"])[1:], "--json")
    assert code == 0, err
    check = json.loads(text)
    assert not [c for c in check["cautions"] if "enable_chunked_prefill is off" in c]
    assert check["ttft_s"]["p90"] == pytest.approx(win["sim_ttft_s"])
    config = tmp_path / name
    config.write_text(data["config_files"][name])
    place = ("--gpu", win["accelerator"], "--engine", "trtllm")
    c = _replica(kv=win["kv_dtype"], weights=win["weights"], seats=win["max_num_seqs"],
                 tokens=budget, chunked=True)
    pasted = _pasted(command, config)
    if pasted[0] == CLI["quantized_checkpoint"]:  # a checkpoint quantized beforehand: its
        pasted = ["meta-llama/Llama-3.1-8B", *pasted[1:], "--weights", win["weights"]]  # format
    assert _fit(capsys, *pasted, *place) == _fit(
        capsys, *_own_flags("meta-llama/Llama-3.1-8B", c, win["max_model_len"]), *place)
    lines = run_cli(capsys, *argv)[1].splitlines()  # the text prints the file under the line
    assert "    enable_chunked_prefill: true" in lines
    assert f"  note: {said[0]}" in lines  # a note, as other reports print theirs
    assert not [line for line in lines
                if line.lstrip().startswith("caution:") and "enable_chunked_prefill" in line]


def test_plan_cautions_where_tensorrt_llm_keeps_an_mla_models_prompts_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on L40Ss (SM 8.9): TensorRT-LLM turns enable_chunked_prefill off again for
    an MLA model there, so the line does not turn it on, no note says it did, and a caution
    says the 12,000-token prompts past its max_num_tokens would not run."""
    code, out, err = run_cli(capsys, "plan", "deepseek-v3", "--rate", "0.5", "--input-len",
                             "12000", "--output-len", "100", "--slo-ttft-ms", "20000",
                             "--slo-tpot-ms", "200", "--gpus", "l40s", "--engine", "trtllm",
                             "--workers", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    words = data["commands"]["trtllm"].split()
    budget = int(words[words.index(CLI["max_num_batched_tokens"]) + 1])
    assert budget < 12000 and not data["winner"]["enable_chunked_prefill"]
    assert "enable_chunked_prefill" not in "".join((data["config_files"] or {}).values())
    assert data["notes"] == []
    said = [c for c in data["cautions"] if "turns enable_chunked_prefill off" in c]
    assert len(said) == 1 and f"reach 12,000 tokens, past max_num_tokens {budget:,}" in said[0]

"""One pasted launch line runs in fit, decode, prefill and simulate: each takes every engine
flag the others take (the pool switches move decode's and prefill's pool as they move
fit's), or refuses it in one line saying why; the harmless flags recipes carry are read and
named; utilization takes -dcp; -dcp is named in every header and JSON; and under
speculative decoding its exchange is priced for every query token of a verify row."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import pytest

import ridgeline.cost as cost
from ridgeline.catalog import resolve_model
from ridgeline.cli import build_parser
from ridgeline.cost import Seq, batch_shape
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.roofline import first_whole_batch
from ridgeline.sim.timer import StepTimer
from tests.conftest import run_cli, same_answer

COMMANDS = ("fit", "decode", "prefill", "simulate")
# each command's own question, not an engine's launch flag: what it is asked, how it answers
OWN = {"--target-concurrency", "--batch", "--context", "--prompt-len", "--profile",
       "--plot", "--spec-tokens", "--spec-method", "--spec-acceptance", "--spec-draft-cost",
       "--arrival", "--burstiness", "--concurrency", "--dataset-name", "--export",
       "--ignore-eos", "--input-len", "--long-prefill-token-threshold", "--max-concurrency",
       "--num-prompts", "--num-requests", "--output-len", "--percentile", "--prefix-groups",
       "--prefix-len", "--random-input-len", "--random-output-len", "--random-range-ratio",
       "--rate", "--request-rate", "--slo-itl-ms", "--slo-tpot-ms", "--slo-ttft-ms", "--trace",
       "--window"}
LLAMA_LINE = ("llama-3.3-70b", "--gpu", "h100", "--tensor-parallel-size", "4",
              "--max-model-len", "65536", "--enable-prefix-caching", "--kv-cache-dtype", "fp8",
              "--quantization", "fp8", "--port", "8000")


def _spellings(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices[command]._option_string_actions)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _seats(capsys: pytest.CaptureFixture[str], *argv: str) -> int:
    """decode's seats at its one context (a list of them), or prefill's (one number)."""
    held = _json(capsys, *argv)["engine_max_batch"]
    return int(held if isinstance(held, int) else held[0]["engine_max_batch"])


def test_every_engine_flag_one_command_takes_the_other_three_take() -> None:
    """Spelling by spelling, hidden launch flags included: no pasted flag is 'unrecognized'
    in one command and read in another."""
    taken = {c: _spellings(c) for c in COMMANDS}
    every = set().union(*taken.values()) - OWN
    missing = {c: sorted(every - taken[c]) for c in COMMANDS if every - taken[c]}
    assert "--enable-prefix-caching" in every and "--disable-cuda-graph" in every
    assert not missing, missing


@pytest.mark.parametrize("question", [("fit",), ("decode", "--batch", "32"),
                                      ("prefill", "--prompt-len", "32000"),
                                      ("simulate", "--rate", "2", "--num-requests", "30")])
def test_a_vllm_launch_line_runs_in_each_command(capsys: pytest.CaptureFixture[str],
                                                 question: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, question[0], *LLAMA_LINE, *question[1:])
    assert code == 0 and out, err
    assert err.strip() == "ridgeline: note: ignored --port 8000 (it changes neither memory nor speed)"


@pytest.mark.parametrize("command", ["decode", "prefill"])
def test_prefix_caching_moves_decode_and_prefill_pools_as_it_moves_fits(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Qwen3-Next on vLLM 0.20: prefix caching off by default for a hybrid; with it, two
    state blocks a request, so fewer conversations fit."""
    line = ("qwen3-next-80b-a3b", "--gpu", "h100", "--tp", "4", "--max-model-len", "32768",
            "--engine-version", "0.20")
    asked = ("--batch", "8", "--context", "32768") if command == "decode" \
        else ("--prompt-len", "32768")
    counts = []
    for switch in ((), ("--enable-prefix-caching",)):
        fit = _json(capsys, "fit", *line, *switch)["conversations"]
        assert _seats(capsys, command, *line, *asked, *switch) == fit
        counts.append(fit)
    assert counts[1] < counts[0]


def test_language_model_only_moves_decodes_pool_as_it_moves_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = ("gemma-3-27b", "--gpu", "h100", "--max-model-len", "8192")
    counts = []
    for switch in ((), ("--language-model-only",), ("--limit-mm-per-prompt", '{"image":0}')):
        fit = _json(capsys, "fit", *line, *switch)["conversations"]
        assert _seats(capsys, "decode", *line, "--batch", "8", "--context", "8192",
                      *switch) == fit
        counts.append(fit)
    assert counts[1] > counts[0]  # no vision tower profiled
    assert counts[2] == counts[1]  # every modality at 0: vLLM's --language-model-only


def test_trtllm_backend_sizes_decodes_pool_as_fits(capsys: pytest.CaptureFixture[str]) -> None:
    line = ("llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--max-model-len", "32768",
            "--backend", "tensorrt")
    fit = _json(capsys, "fit", *line)["conversations"]
    assert _seats(capsys, "decode", *line, "--batch", "8", "--context", "32768") == fit
    err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--backend", "pytorch")[2]
    assert "--backend is TensorRT-LLM's" in err


def test_prefill_takes_eager_and_expert_parallel_and_data_parallel_attention(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = ("gpt-oss-120b", "--gpu", "h100", "--max-model-len", "28000")
    eager = _seats(capsys, "prefill", *line, "--prompt-len", "28000", "--enforce-eager")
    assert eager == _seats(capsys, "decode", *line, "--batch", "1", "--context", "28000",
                           "--enforce-eager")
    assert eager > _seats(capsys, "prefill", *line, "--prompt-len", "28000")
    ep = ("deepseek-r1", "--gpu", "h200", "--tensor-parallel-size", "8", "--prompt-len", "8000")
    assert _json(capsys, "prefill", *ep, "--enable-expert-parallel") \
        != _json(capsys, "prefill", *ep)
    code, out, err = run_cli(capsys, "prefill", "deepseek-v3", "--gpu", "h200", "--engine",
                             "sglang", "--tp", "8", "--dp", "8", "--enable-dp-attention",
                             "--prompt-len", "8000")
    assert code == 0, err  # one rank's prompt (test_dp_utilization_prefill.py)
    assert "attention DP8 × TP1" in out


def test_fit_takes_sglangs_disable_cuda_graph_with_the_pool_unchanged(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang reserved its graphs' memory by --cuda-graph-max-bs with graphs on or off
    through 0.5.13; from 0.5.14 (and the newest) the flag drops the graphs' reserve, so the
    pool grows: DeepSeek-V3 at TP8 on an H200, 1,536 MiB of prefill graphs (MLA) and
    2 × 512 MiB of decode graphs fewer."""
    line = ("fit", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8",
            "--context-length", "32768", "--json")
    old = ("--engine-version", "0.5.13")
    code, out, err = run_cli(capsys, *line, *old, "--disable-cuda-graph")
    plain = json.loads(run_cli(capsys, *line, *old)[1])
    got = json.loads(out)
    assert code == 0 and got["conversations"] == plain["conversations"]
    assert "--disable-cuda-graph" in err and "--disable-cuda-graph" in got["cautions"][0]
    code, out, err = run_cli(capsys, *line, "--disable-cuda-graph")
    newest, graphed = json.loads(out), json.loads(run_cli(capsys, *line)[1])
    assert code == 0 and newest["pool_bytes_per_gpu"] > graphed["pool_bytes_per_gpu"]
    assert "leaves out the CUDA graphs" in newest["cautions"][0]
    trtllm = ("fit", "deepseek-v3", "--gpu", "h200", "--engine", "trtllm", "--tp", "8",
              "--disable-cuda-graph")
    assert "--enforce-eager sizes vLLM's pool" in run_cli(capsys, *trtllm)[2]


@pytest.mark.parametrize("flags", [("--api-server-count", "4"), ("-asc", "2"),
                                   ("--load-format", "safetensors"),
                                   ("--load-format", "runai_streamer"),
                                   ("--served-model-name", "r1", "deepseek-r1")])
def test_more_harmless_recipe_flags_are_read_and_named(capsys: pytest.CaptureFixture[str],
                                                       flags: tuple[str, ...]) -> None:
    line = ("fit", "deepseek-r1", "--gpu", "h200", "--tensor-parallel-size", "8",
            "--max-model-len", "32768", "--json")
    code, out, err = run_cli(capsys, *line, *flags)
    assert code == 0 and same_answer(out, run_cli(capsys, *line)[1])
    assert err.startswith(f"ridgeline: note: ignored {' '.join(flags)} ")


def test_trtllm_postprocess_workers_are_read_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "trtllm", "--num_postprocess_workers", "2")
    assert code == 0 and "ignored --num_postprocess_workers 2" in err


@pytest.mark.parametrize("value", ["bitsandbytes", "GGUF"])
def test_a_load_format_that_changes_the_weights_is_refused_by_name(
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--load-format",
                             value)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"--load-format {value} is not modelled" in err


def test_utilization_reads_dcp_as_fit_sizes_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    held = re.compile(r"holds ([\d,]+) conversations")
    for dcp in ((), ("-dcp", "8")):
        fit = _json(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--tp", "8",
                    "--max-model-len", "32768", *dcp)["conversations"]
        code, out, err = run_cli(capsys, "utilization", "--gpu", "h200", "--running", "150",
                                 "--model", "deepseek-v3", "--tp", "8", "--context", "32768",
                                 *dcp)
        found = held.search(out)
        assert code == 0 and found is not None, err
        assert int(found.group(1).replace(",", "")) == fit
    assert "give --model" in run_cli(capsys, "utilization", "--gpu", "h200", "--running", "8",
                                     "-dcp", "8")[2]


def test_the_ridge_utilization_names_is_the_batch_fit_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "utilization", "--gpu", "h200", "--running", "10", "--model",
                  "deepseek-v3", "--tp", "8", "--context", "32768")[1]
    found = re.search(r"against a ridge batch of ([\d,]+) \(([\d,]+) FLOP per byte\)", out)
    fit = _json(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--tp", "8",
                "--max-model-len", "32768")
    # the first whole batch at or past fit's fractional one, as fit's verdict prints it
    assert found is not None and int(found.group(1)) == first_whole_batch(fit["batch_to_ridge"])
    assert int(found.group(1)) >= fit["batch_to_ridge"] > int(found.group(1)) - 1


@pytest.mark.parametrize("layout_flags", [("-dp", "2", "--enable-expert-parallel"),
                                          ("-pp", "2"), ()])
def test_dcp_is_named_inside_the_one_parenthesis_of_every_layout(
        capsys: pytest.CaptureFixture[str], layout_flags: tuple[str, ...]) -> None:
    line = ("deepseek-r1", "--gpu", "h200", "--tp", "8", "-dcp", "8", *layout_flags)
    fit = run_cli(capsys, "fit", *line, "--max-model-len", "32768")[1]
    sim = run_cli(capsys, "simulate", *line, "--max-model-len", "32768", "--rate", "2",
                  "--num-requests", "10")[1]
    for header in (next(ln for ln in fit.splitlines() if ln.startswith("deepseek-r1 on")),
                   sim.splitlines()[0]):
        layout = header.split(" on ", 1)[1].split(")", 1)[0]  # the GPUs' one parenthesis
        assert "KV dealt over DCP8" in layout and ") (" not in header, header
        assert ("TP8 × PP2" in layout) == ("-pp" in layout_flags)


def test_the_json_names_dcp_and_both_block_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    line = ("deepseek-r1", "--gpu", "h200", "--tp", "8", "--max-model-len", "32768")
    plain = _json(capsys, "fit", *line)
    dealt = _json(capsys, "fit", *line, "-dcp", "8")
    assert plain["decode_context_parallel_size"] == 1 and dealt["decode_context_parallel_size"] == 8
    assert plain["block_size"] == plain["block_size_per_dcp_rank"] == dealt["block_size_per_dcp_rank"]
    assert dealt["block_size"] == 8 * dealt["block_size_per_dcp_rank"]
    sim = _json(capsys, "simulate", *line, "-dcp", "8", "--rate", "2", "--num-requests", "10")
    settings = sim["settings"]
    assert settings["decode_context_parallel_size"] == 8
    assert settings["block_size"] == dealt["block_size"]
    assert settings["block_size_per_dcp_rank"] == dealt["block_size_per_dcp_rank"]
    # named for -dcp's ranks, apart from data_parallel.per_rank
    assert not any(key.endswith("_per_rank") for key in (*settings, *dealt))
    decode = _json(capsys, "decode", *line, "-dcp", "8", "--batch", "8")
    assert decode["decode_context_parallel_size"] == 8


def test_a_verify_steps_dcp_exchange_is_priced_for_every_query_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3 drafts: each of 64 verify rows sends 4 queries through the decode kernel, all
    gathered over the DCP ranks and their outputs scattered back."""
    asked: list[int] = []
    priced = cost.dcp_exchange_bytes

    def counted(dep: Deployment, tokens: int) -> float:
        asked.append(tokens)
        return priced(dep, tokens)

    monkeypatch.setattr(cost, "dcp_exchange_bytes", counted)
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8, engine="vllm", decode_context_parallel_size=8)
    rows, drafts = 64, 3
    verify = batch_shape(dep, [Seq(drafts + 1, 32768)] * rows)
    StepTimer(dep).time_s(verify, True)
    assert max(asked) == rows * (drafts + 1)
    asked.clear()
    StepTimer(dep).time_s(batch_shape(dep, [Seq(1, 32768)] * rows))  # a plain decode: a row each
    assert max(asked) == rows


def test_gqa_dcp_refusal_says_how_tp_places_the_heads(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_cli(capsys, "fit", "llama-3.3-70b", "--gpu", "h100", "--tensor-parallel-size",
                  "8", "-dcp", "2", "--max-model-len", "32768")[2]
    assert "which TP8 does not copy (one head a rank)" in err and "1 times" not in err


def test_decode_simulate_and_the_step_cost_price_one_dcp_verify_step_alike() -> None:
    """DeepSeek-R1 TP8 -dcp 8, 64 verify rows at 32K with 3 drafts: decode's expectation
    (spec_step), the simulator's step (passes_s), step_cost and the exact path's
    shape_time_s give one time, each with the exchange of every query token; priced a row
    each, as a plain decode's, it is cheaper."""
    from ridgeline.engines import profile_for
    from ridgeline.sim.config import sim_config
    from ridgeline.sim.simulator import Simulator
    from ridgeline.spec_decode import SpecDecode, spec_step

    vllm = profile_for("vllm")
    dep = Deployment.build(resolve_model("deepseek-r1"), resolve_accelerator("h200"),
                           num_gpus=8, engine="vllm", decode_context_parallel_size=8)
    rows, drafts, context = 64, 3, 32768
    batch = [Seq(drafts + 1, context)] * rows
    decode = spec_step(dep, SpecDecode(drafts, 0.7, 0.0), rows, context, vllm).verify_s
    simulate = Simulator(dep, vllm, sim_config(dep)).passes_s(batch, True)
    generic = cost.step_cost(dep, batch, vllm, verify=True)
    exact = cost.shape_time_s(dep, batch_shape(dep, batch)._replace(verify=True), vllm)
    assert decode == pytest.approx(simulate) == pytest.approx(generic.time_s)
    assert exact == pytest.approx(decode)

    def exchange_s(c: cost.StepCost) -> float:
        return next(op.time_s for op in c.ops if op.name == cost.DCP_EXCHANGE)

    assert exchange_s(generic) > exchange_s(cost.step_cost(dep, batch, vllm))


def test_several_served_names_before_model_are_refused_saying_put_model_first(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm serve's --served-model-name takes every word to the next flag, so before MODEL
    it would swallow MODEL: ridgeline refuses in one line and says to give MODEL first; one
    name before MODEL, and any number after it, are read and ignored."""
    tail = ("--gpu", "h100", "--max-model-len", "8192", "--json")
    code, out, err = run_cli(capsys, "fit", "--served-model-name", "a", "b", "llama-3.1-8b",
                             *tail)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "give MODEL first: ridgeline fit MODEL --served-model-name a b" in err
    plain = run_cli(capsys, "fit", "llama-3.1-8b", *tail)[1]
    for line in (("fit", "--served-model-name", "a", "llama-3.1-8b", *tail),
                 ("fit", "llama-3.1-8b", "--served-model-name", "a", "b", *tail)):
        code, out, _ = run_cli(capsys, *line)
        assert code == 0 and same_answer(out, plain)

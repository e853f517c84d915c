"""The flags ridgeline prints are ones the engines take, and the engines' own spellings are
ones ridgeline takes: llama.cpp's tensor split where its start-up refuses it and with -fit off;
the fp8-cache and context levers in each engine's words; vLLM's one-command-a-node launch from
v0.12 only; SGLang's expert-parallel switch before 0.5, and no expert parallelism on a release
before either engine had it; trtllm-serve's and the prefix-cache flags as aliases."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.reports.launch_commands import command_line, multi_node_note, node_commands
from ridgeline.vllm_memory import parse_version
from tests.conftest import run_cli

TENSOR = ("fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--num-gpus", "2", "--engine",
          "llama.cpp-cuda", "--weights", "q4_k_m", "--split-mode", "tensor", "--max-model-len",
          "8k")
TIGHT = ("fit", "llama-3.1-70b", "--gpu", "h200", "--num-gpus", "2", "--max-model-len", "32k",
         "--target-concurrency", "64")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def levers(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    lines = out.splitlines()
    return lines[lines.index("levers:") + 1:]


def test_a_tensor_split_with_flash_attention_off_is_refused_as_llama_server_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, *TENSOR, "--flash-attn", "off")
    assert "SPLIT_MODE_TENSOR requires flash_attn" in err
    refused(capsys, "decode", *TENSOR[1:-2], "--flash-attn", "off", "--batch", "1")
    code, out, _ = run_cli(capsys, *TENSOR[:-4], "--flash-attn", "off", "--max-model-len", "8k")
    assert code == 0 and "-fa off" in out  # a layer split runs without it


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2-instruct", "jamba-1.5-mini",
                                   "nemotron-h-56b-base-8k"])
def test_an_architecture_llama_cpp_has_no_tensor_split_for_is_refused(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    spec = resolve_model(model)
    arch = engine_defaults("llama.cpp")["tensor_split"]["refused_architectures"][
        spec.architecture]
    with pytest.raises(InputError, match=f"'{arch}'.*-sm layer"):
        Deployment.build(spec, resolve_accelerator("h200"), "q4_k_m", None, 8,
                         engine="llama.cpp-cuda", split_mode="tensor")
    Deployment.build(spec, resolve_accelerator("h200"), "q4_k_m", None, 8,
                     engine="llama.cpp-cuda")  # by layer it loads


def test_a_quantized_cache_under_a_tensor_split_needs_a_build_from_pr_23792(
        capsys: pytest.CaptureFixture[str]) -> None:
    since = engine_defaults("llama.cpp")["tensor_split"]["quantized_kv_since_build"]
    err = refused(capsys, *TENSOR, "--kv-dtype", "q8_0", "--engine-version", f"b{since - 1}")
    assert "KV cache quantization not implemented" in err
    for build in ([], ["--engine-version", f"b{since}"]):  # the newest modelled, and since
        code, out, _ = run_cli(capsys, *TENSOR, "--kv-dtype", "q8_0", *build)
        assert code == 0 and "-ctk q8_0 -ctv q8_0 -sm tensor" in out
    code, out, _ = run_cli(capsys, *TENSOR, "--engine-version", f"b{since - 1}")
    assert code == 0  # an f16 cache split by tensor starts on that build
    assert not any(line.strip().startswith("q8_0 KV cache") for line in out.splitlines())
    code, out, _ = run_cli(capsys, *TENSOR)
    assert any(line.strip().startswith("q8_0 KV cache") for line in out.splitlines())


def test_a_build_before_the_tensor_split_has_none() -> None:
    since = engine_defaults("llama.cpp")["tensor_split"]["since_build"]
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", None, 2, engine="llama.cpp-cuda", split_mode="tensor")
    with pytest.raises(InputError, match="has no -sm tensor"):
        kv_pool(dep, EngineSettings(max_model_len=8192, engine_version=f"b{since - 1}"))
    layer = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                             "q4_k_m", None, 2, engine="llama.cpp-cuda")
    assert kv_pool(layer, EngineSettings(max_model_len=8192,
                                         engine_version=f"b{since - 1}")).blocks > 0


def test_the_tensor_split_starts_with_fit_off_and_the_layer_split_without(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *TENSOR)
    start = next(line for line in out.splitlines() if line.startswith("start it with:"))
    flags = shlex.split(start.split("(")[0])
    assert code == 0 and flags[flags.index("-sm") + 1] == "tensor"
    assert flags[flags.index("-fit") + 1] == "off"
    code, out, _ = run_cli(capsys, *TENSOR[:-4], "--max-model-len", "8k")
    assert code == 0
    start = next(line for line in out.splitlines() if line.startswith("start it with:"))
    assert "-sm" not in start and "-fit off" not in start  # the layer split keeps --fit on


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_fp8_cache_lever_names_the_value_the_engine_takes(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    cli = engine_defaults(engine)["cli"]
    lever = next(line for line in levers(capsys, *TIGHT, "--engine", engine)
                 if line.strip().startswith("fp8 KV cache"))
    assert f"({cli['kv_dtype']} {cli['kv_fp8']})" in lever
    # SGLang's --kv-cache-dtype choices have no bare fp8 (auto, fp8_e5m2, fp8_e4m3, …)
    assert (cli["kv_fp8"] == "fp8") == (engine == "vllm")


def test_tensorrt_llms_fp8_cache_is_a_config_setting_not_a_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytorch = next(line for line in levers(capsys, *TIGHT, "--engine", "trtllm")
                   if line.strip().startswith("fp8 KV cache"))
    assert "--kv-cache-dtype" not in pytorch
    # the lever is an instruction to follow: its YAML, in a file given as --config, is the
    # fp8 cache the lever priced
    setting = pytorch[pytorch.index("--config FILE with ") + 19:pytorch.rindex("})") + 1]
    (tmp_path / "extra.yaml").write_text(setting + "\n")
    code, out, _ = run_cli(capsys, *TIGHT, "--engine", "trtllm", "--json", "--config",
                           str(tmp_path / "extra.yaml"))
    assert code == 0
    conversations = json.loads(out)["conversations"]
    assert f"{conversations} conversations" in pytorch
    code, plain, _ = run_cli(capsys, *TIGHT, "--engine", "trtllm", "--json", "--kv-dtype", "fp8")
    assert plain == out
    engine = next(line for line in levers(capsys, *TIGHT, "--engine", "trtllm", "--backend",
                                           "tensorrt") if line.strip().startswith("fp8 KV"))
    assert "kv_cache_quant_algo FP8" in engine  # a built engine keeps its build's dtype


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_longest_context_lever_is_the_engines_flag_and_pastes(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    line = next(line for line in levers(capsys, *TIGHT, "--engine", engine)
                if "the longest that holds 64" in line)
    flag, value = line.split()[:2]
    assert flag == engine_defaults(engine)["cli"]["max_len"] and value.isdigit()
    code, out, _ = run_cli(capsys, *TIGHT[:-4], "--max-model-len", value, "--engine", engine,
                           "--json")
    assert code == 0 and json.loads(out)["conversations"] >= 64  # it holds them
    code, out, _ = run_cli(capsys, *TIGHT[:-4], "--max-model-len", str(int(value) + 64),
                           "--engine", engine, "--json")
    assert json.loads(out)["conversations"] < 64  # and is about the longest that does


def test_llama_cpps_longest_context_lever_is_the_c_its_slots_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--num-gpus", "2", "--engine",
            "llama.cpp-cuda", "--weights", "q4_k_m", "-ngl", "all", "--max-model-len", "32k",
            "--target-concurrency", "8")  # every layer on the GPUs (--fit would place the 8)
    line = next(line for line in levers(capsys, *argv) if "the longest that holds 8" in line)
    assert line.split()[0] == "-c"
    cells, per = int(line.split()[1]), int(line.split("×")[1].split()[0].replace(",", ""))
    assert cells == 8 * per
    code, out, _ = run_cli(capsys, *argv[:-4], "--max-model-len", str(per),
                           "--target-concurrency", "8")
    assert code == 0 and f"llama-server -c {cells} -np 8" in out  # fit's start line there


def _replica(tp: int, pp: int = 1, ep: bool = False) -> Candidate:
    return Candidate("h100-sxm", tp, pp, "bf16", "bf16", None, 64, 0.02, 0.1, 5.0, 1, 2.99,
                     False, "", (1.0, 1.0), expert_parallel=ep)


def test_vllms_launch_of_one_command_a_node_is_printed_only_from_the_release_that_has_it(
        ) -> None:
    since = engine_defaults("vllm")["cli"]["multi_node"]["since"]
    major, minor = parse_version(since)[:2]
    before = f"{major}.{minor - 1}"
    c = _replica(8, 2)
    assert c.replica_nodes == 2
    new = node_commands("vllm", "meta-llama/Llama-3.1-405B", c, 131072, since)
    assert len(new) == 2 and all("--nnodes 2" in n for n in new)
    assert node_commands("vllm", "meta-llama/Llama-3.1-405B", c, 131072, before) == []
    old = command_line("vllm", "meta-llama/Llama-3.1-405B", c, 131072, before)
    assert "--nnodes" not in old and "--headless" not in old
    assert old.endswith("--distributed-executor-backend ray")
    note = multi_node_note("vllm", c, before)
    assert "Ray cluster over the 2 nodes" in note and f"vLLM {before} predates" in note
    assert len(node_commands("sglang", "meta-llama/Llama-3.1-405B", c, 131072, "0.4.9")) == 2


def test_the_ray_alternative_says_where_its_executor_runs_synchronous() -> None:
    """vLLM 0.18's Ray executor has no async scheduling (engines.json
    vllm.async_scheduling.executors_without_async), which plan's figures assume: the Ray
    alternative of a two-node replica says so there, and not on 0.21 (RayExecutorV2)."""
    c = _replica(8, 2)
    assert "no async scheduling" in multi_node_note("vllm", c, "0.18")
    assert "Ray cluster" in multi_node_note("vllm", c, "0.21")
    assert "async" not in multi_node_note("vllm", c, "0.21")


def test_sglangs_expert_parallelism_is_its_switch_before_0_5() -> None:
    c = _replica(4, ep=True)
    switch = engine_defaults("sglang")["cli"]["ep_switch"]
    old = command_line("sglang", "Qwen/Qwen3-30B-A3B", c, 4096, "0.4.9").split()
    assert switch["flag"] in old and "--ep-size" not in old
    for version in (switch["before"], "0.5.9", None):
        new = command_line("sglang", "Qwen/Qwen3-30B-A3B", c, 4096, version).split()
        assert new[new.index("--ep-size") + 1] == "4" and switch["flag"] not in new


def test_tensorrt_llms_launch_over_two_nodes_is_one_command_in_one_mpi_world() -> None:
    cli = engine_defaults("trtllm")["cli"]
    line = command_line("trtllm", "meta-llama/Llama-3.1-405B", _replica(8, 2), 131072).split()
    assert line[0] == cli["launch"] and line[line.index(cli["pp"]) + 1] == "2"
    assert node_commands("trtllm", "meta-llama/Llama-3.1-405B", _replica(8, 2), 131072) == []
    assert cli["mpi_launch"] in multi_node_note("trtllm", _replica(8, 2))


@pytest.mark.parametrize("flag", ["--kv-cache-free-gpu-mem-fraction",
                                  "--kv_cache_free_gpu_memory_fraction",
                                  "--free_gpu_memory_fraction",
                                  "--kv_cache_free_gpu_mem_fraction"])
def test_tensorrt_llms_own_spellings_are_taken(capsys: pytest.CaptureFixture[str],
                                               flag: str) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "trtllm", "--max-model-len", "8k", flag, "0.8", "--max_batch_size",
                           "64", "--max_num_tokens", "4096", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["free_fraction_of_rest"] == 0.8 and data["max_num_seqs"] == 64


@pytest.mark.parametrize(("engine", "flag"), [("vllm", "--no-enable-prefix-caching"),
                                              ("sglang", "--disable-radix-cache")])
def test_the_engines_names_for_no_prefix_caching_are_taken(
        capsys: pytest.CaptureFixture[str], engine: str, flag: str) -> None:
    argv = ("fit", "qwen3-next-80b-a3b-thinking", "--gpu", "h200", "--num-gpus", "2",
            "--max-model-len", "32k", "--engine", engine, "--json")
    outs = []
    for switch in (flag, "--no-prefix-caching", "--enable-prefix-caching"):
        code, out, _ = run_cli(capsys, *argv, switch)
        assert code == 0
        outs.append(json.loads(out))
    assert outs[0] == outs[1] != outs[2]
    assert "not allowed with" in refused(capsys, *argv, flag, "--enable-prefix-caching")


# the last release without expert parallelism and the first with it, read in the sdists
# (engines.json cli.ep_since): vLLM's --enable-expert-parallel (PR #14305), SGLang's
# --enable-ep-moe (PR #2371; ridgeline reads 0.4.0.post1 after 0.4.0)
EP_RELEASES = {"vllm": ("0.7.3", "0.8.0"), "sglang": ("0.4.0", "0.4.0.post1")}


@pytest.mark.parametrize("engine", sorted(EP_RELEASES))
def test_expert_parallelism_is_refused_on_a_release_before_the_engine_had_it(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    before, first = EP_RELEASES[engine]
    argv = ("fit", "mixtral-8x7b", "--gpu", "h100", "--num-gpus", "4", "--engine", engine,
            "--max-model-len", "8k", "--engine-version")
    err = refused(capsys, *argv, before, "--enable-expert-parallel")
    assert "has no expert parallelism" in err
    assert engine_defaults(engine)["cli"]["ep_since"] in err
    for version, ep in ((first, ["--enable-expert-parallel"]), (before, [])):
        code, _, err = run_cli(capsys, *argv, version, *ep)
        assert code == 0, err  # the first release with it runs it; the one before, without


@pytest.mark.usefixtures("unsimulated")
@pytest.mark.parametrize("engine", sorted(EP_RELEASES))
def test_plan_searches_no_expert_parallel_layout_on_a_release_without_it(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """vLLM 0.7.3 has no --enable-expert-parallel and SGLang 0.4.0 no --enable-ep-moe: a plan
    at those releases neither prices nor prints an expert-parallel layout; at the first
    release with the flag the same search has them."""
    def expert_parallel(version: str) -> tuple[int, str]:
        code, out, err = run_cli(capsys, "plan", "mixtral-8x7b", "--rate", "5", "--slo-ttft-ms",
                                 "2000", "--slo-tpot-ms", "50", "--gpus", "h100", "--max-gpus",
                                 "2", "--engine", engine, "--engine-version", version,
                                 "--workers", "1", "--json")
        assert code == 0, err
        plan = json.loads(out)
        rows = [plan["winner"], *(row for key in ("runners_up", "cheaper_unverified",
                                                  "unpriced", "disaggregated", "held_splits")
                                  for row in plan[key])]
        count = sum(bool(row and row["expert_parallel"]) for row in rows) + sum(
            " EP " in point["point"] for point in plan["pareto"])
        return count, out

    before, first = EP_RELEASES[engine]
    flags = {engine_defaults(engine)["cli"]["ep"],
             engine_defaults(engine)["cli"].get("ep_switch", {}).get("flag", "")} - {""}
    count, out = expert_parallel(before)
    assert count == 0 and not any(flag in out for flag in flags)
    assert expert_parallel(first)[0] > 0


def test_a_tensor_split_aborts_on_a_cache_other_than_q8_0_or_q4_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #27116: -sm tensor asserts at start-up on an iq4_nl (q4_1, q5_0, q5_1) cache on
    every build; q4_0 splits, and by layer q5_1 starts."""
    vulkan = tuple("llama.cpp-vulkan" if a == "llama.cpp-cuda" else a for a in TENSOR)
    for kv in ("q4_1", "q5_0", "q5_1", "iq4_nl"):
        err = refused(capsys, *vulkan, "--kv-dtype", kv)
        assert "SPLIT_AXIS_UNKNOWN" in err and "-sm layer" in err
    code, out, _ = run_cli(capsys, *vulkan, "--kv-dtype", "q4_0")
    assert code == 0 and "-ctk q4_0 -ctv q4_0 -sm tensor" in out
    by_layer = [a for a in vulkan if a not in ("--split-mode", "tensor")]
    code, out, _ = run_cli(capsys, *by_layer, "--kv-dtype", "q5_1")
    assert code == 0 and "-ctk q5_1 -ctv q5_1" in out

"""What a TPU, a Gaudi and AMD's cards without fp8 really run, one rule for every command:
an fp8 KV cache on a TPU v5e/v6e is allocated bf16 (tpu-inference#3126) and fp8 weights there
are unpriced (engine_platforms.fp8_unpriced, which plan's search space reads too); vLLM's fp8
cache stops on an MI250X or a W7900 (vllm#13147); the KV block a TPU (tpu-inference's page
size) and a Gaudi (vllm-gaudi's 128) take; a TPU split launched with tpu-inference's
TPUConnector; a Gaudi's fp8 through INC; the devices and runtimes named as their vendors do;
llama.cpp's Vulkan build on an Instinct part cautioned."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace
from typing import cast

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.candidate import Candidate
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_platforms import fp8_unpriced, kv_platform_problem, vulkan_caution
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.plan import PlanResult
from ridgeline.precision import kv_dtype
from ridgeline.reports.fit import fit_report
from ridgeline.reports.launch_commands import command_line, family_fp8_note
from ridgeline.reports.plan_commands import PlanCommands
from ridgeline.search_space import offered
from ridgeline.serving_load import Load
from ridgeline.vllm_memory import tpu_page_size
from tests.conftest import run_cli

TPUS = ("tpu-v5e", "tpu-v6e")


def dep(gpu: str, n: int = 1, engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu), None,
                            None, n, engine=engine)


@pytest.mark.parametrize("gpu", TPUS)
def test_an_fp8_cache_on_a_tpu_is_refused_by_fit_decode_and_kv(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    for argv in (["fit", "llama-3.1-8b", "--gpu", gpu, "--kv-dtype", "fp8"],
                 ["decode", "llama-3.1-8b", "--gpu", gpu, "--kv-dtype", "fp8"],
                 ["kv", "llama-3.1-8b", "--gpu", gpu, "--kv-dtype", "fp8", "--context", "8192"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "tpu-inference#3126" in err and "Traceback" not in err


def test_fp8_weights_on_a_tpu_are_refused_as_plan_leaves_them_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "tpu-v6e", "--weights", "fp8")
    assert code == 2 and "runs no fp8 weights" in err and "--weights bf16" in err


@pytest.mark.parametrize("gpu", (*TPUS, "gaudi3", "a100-sxm-80gb", "h100"))
def test_plan_and_the_engine_checks_share_one_fp8_rule(gpu: str) -> None:
    acc = resolve_accelerator(gpu)
    refused = bool(kv_platform_problem(kv_dtype("fp8"), acc, "vllm"))
    assert offered(acc, "bf16", "fp8") == (not refused) == (not fp8_unpriced(acc))


def test_fit_offers_no_fp8_lever_on_a_tpu_but_does_on_an_a100() -> None:
    tpu = fit_report(dep("tpu-v5e", 2), 8192, EngineSettings())
    names = [lever.name for lever in tpu.levers]
    assert names and not any("fp8" in name for name in names)
    a100 = fit_report(dep("a100-sxm-80gb"), 131072, EngineSettings())
    assert any("fp8" in lever.name for lever in a100.levers)


@pytest.mark.parametrize("gpu", ("mi250x", "radeon-pro-w7900"))
def test_vllms_fp8_cache_is_refused_on_amd_cards_without_fp8(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", gpu, "--kv-dtype", "fp8")
    assert code == 2 and "vllm#13147" in err
    names = [lever.name for lever in fit_report(dep(gpu), 131072, EngineSettings()).levers]
    assert not any("fp8 KV" in name for name in names)
    code, _, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "mi300x", "--kv-dtype", "fp8")
    assert code == 0


def test_a_tpu_pool_is_paged_in_tpu_inferences_blocks() -> None:
    blocks = {}
    for length in (2048, 8192, 32768):
        pool = kv_pool(dep("tpu-v6e"), EngineSettings(max_model_len=length))
        assert pool.block_size == tpu_page_size(length, pool.max_num_seqs)
        blocks[length] = pool.block_size
    h100 = kv_pool(dep("h100"), EngineSettings(max_model_len=8192)).block_size
    assert blocks[8192] > h100 and blocks[2048] < blocks[8192]
    # past 8,192 tokens the page drops to its long-context size, raised to the SMEM floor
    assert tpu_page_size(32768, 0) < blocks[32768] <= tpu_page_size(8192, 0)


def test_a_gaudi_pool_is_paged_in_vllm_gaudis_blocks() -> None:
    pool = kv_pool(dep("gaudi3"), EngineSettings(max_model_len=8192))
    assert pool.block_size == engine_defaults("vllm")["hpu_default_block_size"]["block_size"]
    assert pool.block_size != kv_pool(dep("h100"), EngineSettings(max_model_len=8192)).block_size


def _candidate(gpu: str, weights: str = "bf16", kv: str = "bf16", split: bool = False
               ) -> Candidate:
    return Candidate(gpu, 1, 1, weights, kv, None, 64, 0.02, 0.3, 1.0, 3 if split else 1,
                     2.0, False, "", (1.0, 1.0), disaggregated="1P2D" if split else "",
                     prefill_replicas=1 if split else 0, max_model_len=8192,
                     pool_knobs=((None, None), (64, None)) if split else None)


def _launch() -> PlanCommands:
    result = cast(PlanResult, SimpleNamespace(engine="vllm", engine_version=None,
                                              load=Load(2.0, "2000", "200")))
    return PlanCommands(resolve_model("llama-3.1-8b"), "llama-3.1-8b", result, 8192)


def test_a_tpu_split_hands_its_cache_over_with_tpu_inferences_connector() -> None:
    commands, _ = _launch().pool_launch(_candidate("tpu-v6e", split=True))
    roles = {}
    for role in ("prefill", "decode"):
        words = shlex.split(commands[role])
        config = json.loads(words[words.index("--kv-transfer-config") + 1])
        assert config["kv_connector"] == "TPUConnector" and words[0].startswith("VLLM_HOST_IP=")
        roles[role] = config["kv_role"]
    assert roles == {"prefill": "kv_producer", "decode": "kv_consumer"}
    h100, _ = _launch().pool_launch(_candidate("h100-sxm", split=True))
    assert "NixlConnector" in h100["prefill"] and "TPUConnector" not in h100["prefill"]


def test_a_gaudis_fp8_launches_through_inc() -> None:
    line = command_line("vllm", "M", _candidate("gaudi3", "fp8", "fp8"), 8192)
    words = shlex.split(line)
    assert words[0].startswith("QUANT_CONFIG=")
    assert words[words.index("--quantization") + 1] == "inc"
    assert words[words.index("--kv-cache-dtype") + 1] == "fp8_inc"
    assert family_fp8_note("vllm", _candidate("gaudi3", "fp8", "fp8"))
    h100 = shlex.split(command_line("vllm", "M", _candidate("h100-sxm", "fp8", "fp8"), 8192))
    assert h100[h100.index("--kv-cache-dtype") + 1] == "fp8"
    assert not any(word.startswith("QUANT_CONFIG=") for word in h100)
    assert not family_fp8_note("vllm", _candidate("gaudi3"))


def test_a_tpu_and_a_gaudi_fit_name_their_devices_and_runtimes(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, tpu, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "tpu-v6e",
                        "--max-model-len", "8192")
    assert "memory per chip" in tpu and "2 chips (tensor parallel)" in tpu
    assert "CUDA context" not in tpu.split("caution")[0] and "XLA graphs" in tpu
    _, gaudi, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "gaudi3", "--engine",
                          "sglang", "--max-model-len", "8192")
    assert "memory per HPU" in gaudi and "HCCL" in gaudi and "HPU graphs" in gaudi
    _, h100, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                         "--max-model-len", "8192")
    assert "memory per GPU" in h100 and "non-torch (CUDA context, NCCL)" in h100


def test_plan_counts_a_tpus_chips(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "llama-3.1-8b", "--slo-ttft-ms", "2000",
                           "--slo-tpot-ms", "50", "--rate", "2", "--gpus", "tpu-v6e",
                           "--max-gpus", "2")
    winner = next(line for line in out.splitlines() if line.startswith("winner:"))
    assert code == 0 and " chip" in winner and " GPU," not in winner


def test_llama_cpp_vulkan_on_an_instinct_part_is_cautioned_not_refused() -> None:
    assert vulkan_caution("llama.cpp-vulkan", resolve_accelerator("mi300x"))
    assert not vulkan_caution("llama.cpp-vulkan", resolve_accelerator("radeon-pro-w7900"))
    report = fit_report(dep("mi300x", engine="llama.cpp-vulkan"), 8192, EngineSettings())
    assert any("AMDVLK" in caution for caution in report.cautions)

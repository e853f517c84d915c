"""One memory for "does it fit": every command's weights-and-cache check counts the memory an
engine finds on the GPUs (hardware.device_memory_bytes, what fit sizes its pool from), not the
nameplate. DeepSeek-V3/R1 as stored on 8 H100s keeps 79.29 GiB of weights a GPU: under 80 GiB,
over the 79.18 GiB the runtime reports, so no command gives it a speed."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.hardware import device_memory_bytes
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.raw_fit import device_fit
from ridgeline.reports.fit import DOES_NOT_FIT, fit_report
from ridgeline.units import GIB

R1_ON_8_H100 = ["--gpu", "h100", "--num-gpus", "8"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def r1(gpu: str = "h100") -> Deployment:
    return Deployment.build(resolve_model("deepseek-r1"), resolve_accelerator(gpu), num_gpus=8)


def test_deepseek_r1_on_8_h100s_fits_the_nameplate_but_not_the_runtimes_memory() -> None:
    dep = r1()
    per_gpu = device_fit(dep, 0.0).weight_bytes / 8
    assert per_gpu / GIB == pytest.approx(79.29, abs=0.005)
    h100 = dep.accelerator
    assert device_memory_bytes(h100) / GIB == pytest.approx(79.18, abs=0.005)
    assert 8 * per_gpu <= dep.memory_bytes  # against 8 x 80 GiB it would pass, by 0.9 %
    weights = device_fit(dep)
    assert weights.capacity_bytes == pytest.approx(8 * device_memory_bytes(h100))
    assert not weights.fits
    assert weights.shortfall_bytes == pytest.approx(8 * (per_gpu - device_memory_bytes(h100)))
    # the pool fit sizes says the same: the engine could not load the weights
    assert kv_pool(dep, EngineSettings(max_model_len=4000)).weights_overflow
    # on 8 H200s both fit
    assert device_fit(r1("h200")).fits


def test_decode_gives_r1_on_8_h100s_no_speed(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["decode", "deepseek-r1", *R1_ON_8_H100, "--batch", "1", "--context", "4000"]
    code, out = run(capsys, *argv)
    assert code == 0 and out.startswith("DOES NOT FIT: 681.1 GB of weights")
    assert "> 680.2 GB of memory" in out  # 8 x 79.18 GiB
    assert "per user" not in out and "tok/s      none: the batch does not fit" in out
    code, out = run(capsys, *argv, "--json")
    point = json.loads(out)["points"][0]
    assert point["fits"] is False and point["per_user_tok_s"] is None
    assert point["expected"] is None and point["expected_none_code"] == "does_not_fit"
    assert point["capacity_bytes"] == pytest.approx(8 * device_memory_bytes(
        resolve_accelerator("h100")))
    code, out = run(capsys, "decode", "deepseek-r1", *R1_ON_8_H100, "--batch", "1,8",
                    "--context", "4000")
    rows = [line.split() for line in out.splitlines() if line.startswith(("1 ", "8 "))]
    assert code == 0 and [row[-1] for row in rows] == ["NO", "NO"]


def test_kv_holds_no_r1_conversation_on_8_h100s_as_fit_says(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "kv", "deepseek-v3", "--context", "4000", *R1_ON_8_H100, "--json")
    data = json.loads(out)
    assert code == 0 and data["conversations"] == 0 and data["fits"] is False
    assert data["weights_overflow_bytes"] == pytest.approx(
        device_fit(r1(), 0.0).weight_bytes - 8 * device_memory_bytes(resolve_accelerator("h100")))
    fit = fit_report(Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h100"),
                                      num_gpus=8), 4000, EngineSettings())
    assert fit.verdict == DOES_NOT_FIT and fit.conversations == 0
    # on 8 H200s both hold some; kv's raw count, before the engine's overheads, is the larger
    code, out = run(capsys, "kv", "deepseek-v3", "--context", "4000", "--gpu", "h200",
                    "--num-gpus", "8", "--json")
    raw = json.loads(out)["conversations"]
    on_h200 = fit_report(r1("h200"), 4000, EngineSettings())
    assert raw >= on_h200.conversations > 0


@pytest.mark.parametrize("argv", [
    ["prefill", "deepseek-r1", *R1_ON_8_H100, "--prompt-len", "4000"],
    ["roofline", "--model", "deepseek-r1", *R1_ON_8_H100],
    ["moe", "deepseek-v3", *R1_ON_8_H100],
])
def test_every_fits_judgement_on_r1_on_8_h100s_says_it_does_not(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out = run(capsys, *argv)
    assert code == 0 and out.startswith("DOES NOT FIT: 681.1 GB of weights")
    assert "680.2 GB of memory" in out
    if argv[0] == "prefill":  # the prompt's arithmetic, and no throughput
        assert "throughput none: it does not run" in out


def test_amdahl_refuses_r1_on_8_h100s_on_its_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "amdahl", "--model", "deepseek-r1", *R1_ON_8_H100, "--speedup", "2")
    assert code == 2 and "does not fit: 681.1 GB of weights" in out


def test_a_deployment_well_inside_memory_keeps_its_speed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on one H100: the check now reads 85.0 GB (79.18 GiB), not 85.9, and the
    batch still runs at the floor's speed."""
    code, out = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1",
                    "--context", "2000", "--json")
    point = json.loads(out)["points"][0]
    assert code == 0 and point["fits"] is True
    assert point["per_user_tok_s"] == pytest.approx(1 / point["step_time_s"])
    assert point["capacity_bytes"] / 1e9 == pytest.approx(85.02, abs=0.01)


def test_the_check_counts_the_runtimes_memory_not_what_the_driver_shows() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("l40s"),
                           num_gpus=4)
    fit = device_fit(dep, 3e9)
    assert fit.capacity_bytes == pytest.approx(4 * device_memory_bytes(dep.accelerator))
    assert fit.capacity_bytes < dep.memory_bytes  # the runtime keeps some of what ECC leaves
    assert fit.kv_bytes == pytest.approx(3e9) and fit.weight_bytes == pytest.approx(
        dep.weight_bytes + dep.tp_copies_bytes)


def test_an_overflowing_sglang_start_names_no_profiling_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on 2 H100s under SGLang 0.5.9: 65.71 GiB of weights and 1.42 of CUDA context
    and TP communicators overflow the 66.04 GiB mem_fraction_static reserves. The headline
    said 'the weights and the profiling pass alone overflow', but SGLang profiles nothing
    inside its fraction (its activations live in the rest): it names its own row. vLLM's
    overflow still names its profiling pass."""
    _, out = run(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "-tp", "2",
                 "--max-model-len", "32768", "--engine", "sglang", "--engine-version", "0.5.9")
    headline = out.splitlines()[0]
    assert headline.startswith("DOES NOT FIT")
    assert "profiling pass" not in headline
    assert "the weights and the CUDA context and TP communicators alone overflow the 66.0 GiB" \
        in headline
    _, out = run(capsys, "fit", "qwen3-next-80b-a3b", "--gpu", "h100", "-tp", "2",
                 "--max-model-len", "65536", "--engine-version", "0.33")
    assert "the weights and the profiling pass alone overflow the 72.8 GiB" in out
    # v0.34 reserves the whole card: the graphs, seats and what it keeps free overflow it
    _, out = run(capsys, "fit", "qwen3-next-80b-a3b", "--gpu", "h100", "-tp", "2",
                 "--max-model-len", "65536")
    assert "the weights and the profiling pass take" in out.splitlines()[0]
    assert "the margin it keeps free after warm-up" in out.splitlines()[0]


def test_a_shortfall_under_a_hundredth_of_a_gib_is_not_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B under SGLang 0.5.9 on one H100 at --context-length 30,956: its pool holds 30,955
    tokens, so one conversation is short by less than a token. The headline read 'the pool
    is short by 0.00 GiB'; it gives the bytes in a unit that shows them."""
    _, out = run(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "--engine", "sglang",
                 "--context-length", "30956", "--engine-version", "0.5.9")
    headline = out.splitlines()[0]
    assert headline.startswith("DOES NOT FIT")
    assert "0.00 GiB" not in headline
    assert "the pool is short by 180.8 KiB per GPU" in headline

"""Model Runner V2's n-gram drafter (vLLM 0.32+) looks its drafts up on the GPU, two eager
Triton kernels a step (v1/worker/gpu/spec_decode/ngram/speculator.py), where the V1 runner's
NgramProposer ran on the CPU: the step pays their launches and their bytes, every row scanned."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import sim_config
from ridgeline.spec_decode import SpecDecode, spec_step
from ridgeline.vllm_mrv2_drafter import (
    gpu_lookup_len,
    ngram_lookup_bytes,
    ngram_lookup_s,
    ngram_scan_block,
)
from tests.conftest import run_cli

VLLM = profile_for("vllm")
NGRAM_CONFIG = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'


def l8(engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            engine=engine)


@pytest.mark.parametrize(("version", "gpu"), [("0.31", False), ("0.32", True),
                                              ("0.33", True), ("0.34", True)])
def test_ngram_is_looked_up_on_the_gpu_from_the_release_mrv2_runs_it(version: str,
                                                                      gpu: bool) -> None:
    s = EngineSettings(engine_version=version, max_model_len=8192)
    assert gpu_lookup_len(l8(), s, "ngram") == (8192 if gpu else 0)
    assert gpu_lookup_len(l8(), s, "ngram", 4096) == (4096 if gpu else 0)  # the launch's
    assert gpu_lookup_len(l8(), s, "eagle") == 0  # only n-gram looks up


def test_other_engines_keep_their_own_lookup() -> None:
    assert gpu_lookup_len(l8("sglang"), EngineSettings(), "ngram") == 0


def test_the_lookup_costs_two_kernels_and_its_bytes() -> None:
    dep = l8()
    small = ngram_lookup_s(dep, VLLM, 1, 64, 8192, 4)
    # one row at 64 tokens moves under a kilobyte past its scratch: the launches are most of it
    assert small == pytest.approx(2 * VLLM.matmul_overhead_s, rel=0.01)
    # more rows, a longer context and a longer max_model_len each move more bytes
    assert ngram_lookup_s(dep, VLLM, 64, 4096, 8192, 4) > small
    assert ngram_lookup_bytes(64, 8192, 8192, 4) > ngram_lookup_bytes(64, 4096, 8192, 4)
    assert ngram_lookup_bytes(64, 4096, 131072, 4) > ngram_lookup_bytes(64, 4096, 8192, 4)
    # the scan reads whole blocks, never past max_model_len
    block = ngram_scan_block(8192)
    assert ngram_lookup_bytes(1, 1, 8192, 1) == ngram_lookup_bytes(1, block, 8192, 1)
    assert ngram_lookup_bytes(1, 8192, 8192, 1) == ngram_lookup_bytes(1, 9000, 8192, 1)


def test_every_row_is_scanned_a_match_found_or_not() -> None:
    dep, spec = l8(), SpecDecode(4, 0.7, 0.0, "ngram", gpu_lookup_len=8192)
    whole = spec_step(dep, spec, 32, 4096, VLLM)
    half = spec_step(dep, spec, 32, 4096, VLLM, drafted_share=0.5)
    assert whole.lookup_s == half.lookup_s == ngram_lookup_s(dep, VLLM, 32, 4096, 8192, 4)
    assert whole.step_s == pytest.approx(whole.verify_s + whole.lookup_s)
    cpu = spec_step(dep, SpecDecode(4, 0.7, 0.0, "ngram"), 32, 4096, VLLM)
    assert cpu.lookup_s == 0 and cpu.step_s == cpu.verify_s == whole.verify_s


def test_only_an_ngram_drafter_takes_a_gpu_lookup() -> None:
    with pytest.raises(ValueError, match="n-gram"):
        SpecDecode(4, 0.7, 0.05, "eagle", gpu_lookup_len=8192)


def test_decode_prices_the_lookup_as_the_release_runs_it(capsys) -> None:
    """Llama-3.1-8B on an H100 with --speculative-config ngram: on 0.31 (V1 runner) the step is
    the verify; on 0.34 (MRV2) the verify and the GPU lookup, said on the line."""
    argv = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--batch", "64",
            "--context", "4096", "--speculative-config", NGRAM_CONFIG)
    points = {}
    for version in ("0.31", "0.34"):
        code, out, err = run_cli(capsys, *argv, "--engine-version", version, "--json")
        assert code == 0, err
        points[version] = json.loads(out)["points"][0]["speculative"]
    v1, mrv2 = points["0.31"], points["0.34"]
    assert v1["lookup_s"] == 0 and v1["step_s"] == v1["verify_s"]
    assert mrv2["lookup_s"] == pytest.approx(ngram_lookup_s(
        l8(), VLLM, 64, 4096, 131072, 4))  # Llama-3.1-8B's served 131,072 positions
    assert mrv2["step_s"] == pytest.approx(mrv2["verify_s"] + mrv2["lookup_s"])
    assert mrv2["per_user_tok_s"] < v1["per_user_tok_s"]
    code, text, _ = run_cli(capsys, *argv, "--engine-version", "0.34")
    assert code == 0 and "ngram, looked up on the GPU" in text
    assert f"n-gram lookup {mrv2['lookup_s'] * 1e3:,.3f} ms" in text
    assert "n-gram lookup" not in run_cli(capsys, *argv, "--engine-version", "0.31")[1]


@pytest.mark.parametrize(("version", "gpu"), [("0.31", False), ("0.34", True)])
def test_simulate_prices_the_lookup_as_the_release_runs_it(version: str, gpu: bool) -> None:
    s = EngineSettings(engine_version=version, max_model_len=8192)
    config = sim_config(l8(), s, spec_tokens=4, spec_acceptance=0.7, spec_method="ngram")
    assert config.spec_gpu_lookup is gpu
    assert sim_config(l8(), s, spec_tokens=4, spec_acceptance=0.7).spec_gpu_lookup is False


def test_a_simulated_step_pays_the_lookup_on_mrv2() -> None:
    """The same run with the lookup on the GPU and on the CPU: every step that drafts is
    longer by about its two kernels, so decoding (TPOT) is slower, the tokens the same."""
    from dataclasses import replace

    from ridgeline.sim.simulator import Simulator
    from ridgeline.sim.workload import Workload

    s = EngineSettings(engine_version="0.34", max_model_len=8192)
    gpu = sim_config(l8(), s, spec_tokens=4, spec_acceptance=0.7, spec_method="ngram")
    w = Workload(40, "512", "64", seed=0)
    runs = [Simulator(l8(), VLLM, config).run(iter(w), closed_loop=8)
            for config in (replace(gpu, spec_gpu_lookup=False), gpu)]
    cpu_tpot, gpu_tpot = (r.percentiles("tpot")["mean"] for r in runs)
    assert cpu_tpot < gpu_tpot < cpu_tpot + 2 * VLLM.matmul_overhead_s + 1e-4

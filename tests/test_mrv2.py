"""vLLM's Model Runner V2: which models it runs by default, release by release, and how its
profile sizes the pool (no fp32 sampler copy, a persistent sampler state from v0.27, no
CUDA-graph estimate before v0.29, a cold torch.compile inside the measured window)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from ridgeline.vllm_memory import model_runner, mrv2_state_bytes, vllm_accounting, vllm_data
from tests.conftest import run_cli


def dep(model: str, gpu: str = "h100", n: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


def test_the_runner_each_release_gives_a_model() -> None:
    dense, moe, hybrid = dep("llama-3.1-8b"), dep("qwen3-30b-a3b"), dep("qwen3-next-80b", n=2)
    assert model_runner(dense, vllm_accounting("0.25")) == "V1"
    assert model_runner(dense, vllm_accounting("0.25.1")) == "MRV2"  # dense from 0.25.1
    assert model_runner(moe, vllm_accounting("0.28")) == "V1"  # MoE: only its allow-list
    assert model_runner(hybrid, vllm_accounting("0.28")) == "V1"
    assert model_runner(moe, vllm_accounting("0.29")) == "MRV2"  # every model from 0.29
    assert model_runner(hybrid, vllm_accounting("0.29")) == "MRV2"
    listed = replace(moe, model=replace(moe.model, architecture="Qwen2MoeForCausalLM"))
    assert model_runner(listed, vllm_accounting("0.25.1")) == "MRV2"
    assert model_runner(dense, vllm_accounting("0.8.5 V0")) == "V0"


def test_the_sampler_state_is_four_bytes_a_vocabulary_token_a_seat() -> None:
    """Qwen3's 151,936-token vocabulary at 1,024 seats and 8,192 tokens: 0.63 GiB on every
    rank of the last pipeline stage (the int32 output counts alone are 0.58)."""
    qwen = dep("qwen3-32b")
    state = mrv2_state_bytes(qwen, 1024, 8192)
    assert state / GIB == pytest.approx(0.633, abs=0.002)
    assert state > 1024 * 151_936 * 4


def test_the_rtx_4090_logs_cold_and_warm() -> None:
    """vLLM 0.27.1, Qwen3-8B on an RTX 4090 (23.52 GiB as logged), max_model_len 8,192: a
    first start logged 4.92 GiB of cache (peak 1.18 GiB), a restart finding the compile
    cache 5.91 (peak 0.19)."""
    four = dep("qwen3-8b", "rtx-4090")
    cold = kv_pool(four, EngineSettings(max_model_len=8192, engine_version="0.27.1"),
                   23.52 * GIB)
    warm = kv_pool(four, EngineSettings(max_model_len=8192, engine_version="0.27.1",
                                        warm_compile_cache=True), 23.52 * GIB)
    assert cold.runner == "MRV2" and cold.cuda_graph_bytes == 0  # no estimate before 0.29
    assert cold.pool_bytes / GIB == pytest.approx(4.92, rel=0.01)
    assert warm.pool_bytes / GIB == pytest.approx(5.91, rel=0.01)
    assert cold.activation_bytes / GIB == pytest.approx(1.18, rel=0.02)
    assert warm.activation_bytes / GIB == pytest.approx(0.19, rel=0.02)
    # v0.26 left the sampler state out of the budget; v0.29 takes a graph estimate
    before = kv_pool(four, EngineSettings(max_model_len=8192, engine_version="0.26"),
                     23.52 * GIB)
    after = kv_pool(four, EngineSettings(max_model_len=8192, engine_version="0.29"),
                    23.52 * GIB)
    assert before.seat_buffer_bytes == 0 and cold.seat_buffer_bytes > 0
    assert after.cuda_graph_bytes > 0


def test_eager_mode_compiles_nothing_and_the_flag_is_vllms(
        capsys: pytest.CaptureFixture[str]) -> None:
    eager = kv_pool(dep("llama-3.1-8b"), EngineSettings(max_model_len=8192, enforce_eager=True))
    assert eager.compile_bytes == 0
    argv = ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192", "--json"]
    code, out, _ = run_cli(capsys, *argv)
    cold = json.loads(out)
    code, out, _ = run_cli(capsys, *argv, "--warm-compile-cache")
    warm = json.loads(out)
    assert code == 0 and cold["model_runner"] == "MRV2"
    # from v0.33 the warm-up sampler pass hides most of it; v0.34 keeps 0.75 of a peak free too
    taken = [sum(r["taken_bytes_per_gpu"][k] for k in ("activations", "kept_free_after_warmup"))
             for r in (cold, warm)]
    assert warm["pool_bytes_per_gpu"] - cold["pool_bytes_per_gpu"] == pytest.approx(
        taken[0] - taken[1], rel=1e-9)
    code, out, _ = run_cli(capsys, *argv, "--engine-version", "0.32")
    cold = json.loads(out)
    code, out, _ = run_cli(capsys, *argv, "--engine-version", "0.32", "--warm-compile-cache")
    warm = json.loads(out)
    assert (warm["pool_bytes_per_gpu"] - cold["pool_bytes_per_gpu"]) / GIB == pytest.approx(1.0)
    code, _, err = run_cli(capsys, *argv, "--engine", "sglang", "--warm-compile-cache")
    assert code == 2 and "--warm-compile-cache is vLLM's" in err
    # a model on the V1 runner (an MoE before v0.29) has no compile transient to leave out
    code, _, err = run_cli(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h100", "--max-model-len",
                           "8192", "--engine-version", "0.26", "--warm-compile-cache")
    assert code == 2 and "on its V1 runner" in err


def test_only_the_last_pipeline_stage_holds_the_sampler_state() -> None:
    """Model Runner V2 builds its sampler on the last pipeline rank alone, so the first
    stage of Qwen3-32B at PP2 (vLLM 0.27.1) keeps the 0.63 GiB of seat state the last holds
    and sizes a pool that much larger."""
    from ridgeline.memory import stage_pools

    two = Deployment.build(resolve_model("qwen3-32b"), resolve_accelerator("h100"),
                           num_gpus=2, pipeline_parallel_size=2, engine="vllm")
    first, last = stage_pools(two, EngineSettings(max_model_len=32768,
                                                  engine_version="0.27.1"))
    assert first.seat_buffer_bytes == 0
    assert last.seat_buffer_bytes / GIB == pytest.approx(0.633, abs=0.002)


def test_explain_says_why_a_binding_first_stage_holds_no_sampler_state(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on 6 L40S (TP2 x PP3, vLLM 0.32): stage 1 binds and, not sampling,
    holds no sampler state. --explain's accounting line said 'its sampler state left out of
    the budget (before v0.27)', a release rule that is not why on 0.32; it says the stage
    does not sample, and a release before 0.27 keeps the release rule."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "l40s", "-tp", "2",
                           "-pp", "3", "--max-model-len", "16384", "--explain")
    assert code == 0 and "stage 1 of 3" in out
    assert "no sampler state: only the last pipeline stage samples" in out
    assert "before v0.27" not in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "8192", "--engine-version", "0.26", "--explain")
    assert code == 0 and "its sampler state left out of the budget (before v0.27)" in out


def test_a_drafter_mrv2_does_not_run_yet_keeps_the_v1_runner() -> None:
    """vLLM falls back to the V1 runner, with a warning, for a drafter its Model Runner V2
    does not run yet (its list of what MRV2 does not yet support, read in each wheel): a draft
    model until 0.31, ngram until 0.32; an EAGLE head stays on MRV2. The pool is then V1's:
    Llama-3.1-8B drafting with ngram on one H100 at 0.31 holds what V1's profile leaves."""
    dense = dep("llama-3.1-8b")
    until = vllm_data()["mrv2_spec_fallback"]["until"]
    assert set(until) == {"draft-model", "ngram"}
    for method, first in until.items():
        last_v1 = f"0.{int(first.split('.')[1]) - 1}"
        assert model_runner(dense, vllm_accounting(last_v1), method) == "V1"
        assert model_runner(dense, vllm_accounting(first), method) == "MRV2"
    for version in ("0.29", "0.32"):
        acc = vllm_accounting(version)
        assert model_runner(dense, acc, "eagle") == model_runner(dense, acc) == "MRV2"
    assert model_runner(dense, vllm_accounting("0.24"), "ngram") == "V1"
    plain = EngineSettings(max_model_len=32_000, engine_version="0.31")
    ngram = replace(plain, speculative_decoding=True, drafter=EngineSpec(3, "ngram"))
    eagle = replace(ngram, drafter=EngineSpec(3, "eagle"))
    assert kv_pool(dense, ngram).runner == "V1"
    assert kv_pool(dense, eagle).runner == kv_pool(dense, plain).runner == "MRV2"
    assert kv_pool(dense, ngram).blocks != kv_pool(dense, plain).blocks  # V1's profile


@pytest.mark.parametrize(("version", "draft_model", "ngram"), [
    ("0.29", "V1", "V1"), ("0.30", "V1", "V1"), ("0.31", "MRV2", "V1"), ("0.32", "MRV2", "MRV2"),
    ("0.33", "MRV2", "MRV2")])
def test_fit_prices_each_drafter_on_the_runner_its_release_picks(
        capsys: pytest.CaptureFixture[str], version: str, draft_model: str, ngram: str) -> None:
    """The release boundaries read in the wheels: 0.29 and 0.30 send a draft model and ngram to
    the V1 runner; 0.31 runs a draft model on Model Runner V2 and ngram on V1; 0.32 and 0.33
    run both on MRV2, as every model without a drafter."""
    drafters = {"draft_model": '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", '
                               '"num_speculative_tokens": 3}',
                "ngram": '{"method": "ngram", "num_speculative_tokens": 3, '
                         '"prompt_lookup_max": 4}'}
    runners = {}
    for name, config in drafters.items():
        code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                                 "--max-model-len", "32k", "--speculative-config", config,
                                 "--engine-version", version, "--json")
        assert code == 0, err
        runners[name] = json.loads(out)["model_runner"]
    assert runners == {"draft_model": draft_model, "ngram": ngram}
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                             "--max-model-len", "32k", "--engine-version", version, "--json")
    assert json.loads(out)["model_runner"] == "MRV2"


def test_eagle3_under_pipeline_parallelism_keeps_the_v1_runner_in_0_27_to_0_29() -> None:
    """vLLM 0.27 to 0.29 list "EAGLE3 with pipeline parallelism" among what Model Runner V2
    does not yet support (0.29.0's wheel still does, 0.30.0's no longer), so
    --speculative-config's method eagle3 at PP > 1 runs on the V1 runner and the pool is V1's;
    at PP1, under method eagle, in 0.26 (not read) and from 0.30 it stays on MRV2."""
    from ridgeline.engine_spec import vllm_speculative_config
    from ridgeline.memory import stage_pools

    two = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           num_gpus=2, pipeline_parallel_size=2, engine="vllm")
    one = dep("llama-3.1-8b")
    for version in ("0.27.1", "0.28", "0.29"):
        acc = vllm_accounting(version)
        assert model_runner(two, acc, "eagle", "eagle3") == "V1"
        assert model_runner(two, acc, "eagle") == "MRV2"  # the method named is what is read
        assert model_runner(one, acc, "eagle", "eagle3") == "MRV2"
    for version in ("0.26", "0.30", "0.32"):
        assert model_runner(two, vllm_accounting(version), "eagle", "eagle3") == "MRV2"
    head = '"model": "llama-3.2-1b", "num_speculative_tokens": 3}'
    eagle3 = vllm_speculative_config('{"method": "eagle3", ' + head)
    eagle = vllm_speculative_config('{"method": "eagle", ' + head)
    assert (eagle3.method, eagle3.algorithm) == ("eagle", "eagle3") and eagle.algorithm == ""
    settings = EngineSettings(max_model_len=8192, engine_version="0.27.1",
                              speculative_decoding=True, drafter=eagle3)
    v1 = stage_pools(two, settings)
    mrv2 = stage_pools(two, replace(settings, drafter=eagle))
    assert {p.runner for p in v1} == {"V1"} and {p.runner for p in mrv2} == {"MRV2"}
    assert v1[-1].seat_buffer_bytes == 0 < mrv2[-1].seat_buffer_bytes  # no MRV2 sampler state


def test_fit_json_names_the_runner_an_eagle3_pipeline_falls_back_to(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B at PP2 on 0.27.1 with an EAGLE-3 head named by method eagle3 is sized on
    V1's accounting, 82 conversations of 8,192 tokens; named by method eagle, on MRV2's, 81
    (docs/simulate.md's figures); at 0.32 eagle3 stays on MRV2."""
    argv = ["fit", "llama-3.1-8b", "--gpu", "h100", "-pp", "2", "--max-model-len", "8192",
            "--json", "--speculative-config"]
    head = ', "model": "llama-3.2-1b", "num_speculative_tokens": 3}'
    fits = {}
    for method, version in (("eagle3", "0.27.1"), ("eagle", "0.27.1"), ("eagle3", "0.32")):
        code, out, _ = run_cli(capsys, *argv, '{"method": "' + method + '"' + head,
                               "--engine-version", version)
        assert code == 0
        fit = json.loads(out)
        fits[method, version] = fit["model_runner"], fit["conversations"]
    assert fits == {("eagle3", "0.27.1"): ("V1", 82), ("eagle", "0.27.1"): ("MRV2", 81),
                    ("eagle3", "0.32"): ("MRV2", fits["eagle3", "0.32"][1])}


def test_stock_torch_compile_runs_on_the_v1_runner_until_0_32(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-cc.mode=STOCK_TORCH_COMPILE is in Model Runner V2's unsupported list until 0.32
    (vllm.mrv2_stock_compile_fallback): vLLM then runs the V1 runner, whose accounting fit
    reports; from 0.32 MRV2 keeps it (without CUDA graphs)."""
    until = str(vllm_data()["mrv2_stock_compile_fallback"]["until"])
    dense = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    for version, runner in (("0.29", "V1"), ("0.31", "V1"), (until, "MRV2")):
        acc = vllm_accounting(version)
        assert model_runner(dense, acc, stock_compile=True) == runner, version
        assert model_runner(dense, acc) == "MRV2"
        s = EngineSettings(engine_version=version, stock_torch_compile=True)
        assert kv_pool(dense, s).runner == runner

    def header(version: str, *extra: str) -> str:
        code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                                 "--engine-version", version, *extra)
        assert code == 0, err
        return next(line for line in out.splitlines() if "memory accounting" in line)

    assert "(V1 memory accounting)" in header("0.31", "-cc.mode=1")
    assert "(V1 memory accounting)" in header("0.31", "-cc.mode=STOCK_TORCH_COMPILE")
    assert "Model Runner V2" in header("0.31", "-cc.mode=3")
    assert "Model Runner V2" in header(until, "-cc.mode=1")

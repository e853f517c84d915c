"""llama.cpp's -b (--batch-size, n_batch, 2048 by default): the tokens one llama_decode call
takes. llama_context clamps -ub to it (n_ubatch = min(n_batch, n_ubatch)), and a layer split
pipelines the ubatches of one call, so a smaller -b sizes a smaller compute buffer and, over
two GPUs, a slower prompt."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

Q4_4090 = ("llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m")


def test_b_bounds_the_ubatch_fit_sizes_and_starts_with_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", *Q4_4090, "--max-model-len", "8k", "-b", "256")
    assert code == 0 and "compute buffer (n_ubatch 256; flash attention)" in out
    assert "llama-server -c 32000 -np 4 --kv-unified -b 256 (" in out
    code, out, _ = run_cli(capsys, "fit", *Q4_4090, "--max-model-len", "8k",
                           "--batch-size", "4096", "-ub", "4096")
    assert code == 0 and "n_ubatch 4,096" in out and "-b 4096 -ub 4096" in out
    code, out, _ = run_cli(capsys, "fit", *Q4_4090, "--max-model-len", "8k", "-ub", "4096")
    assert code == 0 and "n_ubatch 2,048" in out  # -b's default, 2048, still bounds it


def test_simulate_fills_a_call_to_b(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "simulate", *Q4_4090, "--max-model-len", "8k",
                           "--concurrency", "2", "--num-requests", "4", "--input-len", "3000",
                           "--output-len", "8", "-b", "1024")
    assert code == 0 and "batch 1,024 (-b) run as ubatches of 512 (-ub)" in out


def test_prefill_cuts_a_prompt_into_ubatches_no_larger_than_b(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "prefill", *Q4_4090, "--prompt-len", "4096", "-b", "256")
    assert code == 0 and "runs 16 ubatches of at most 256 tokens" in out


def test_a_layer_split_pipelines_only_the_ubatches_of_one_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B Q4_K_M over two H100s, an 8,192-token prompt: -b 512 leaves one ubatch
    a call, so the two stages take turns (about 4.2 s, against 2.7 s at -b 2048)."""
    argv = ("prefill", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--engine",
            "llama.cpp", "--weights", "q4_k_m", "--prompt-len", "8192", "--json")

    def ttft_s(*more: str) -> float:
        code, out, _ = run_cli(capsys, *argv, *more)
        assert code == 0
        return float(json.loads(out)["expected"]["time_s"])

    default, one_a_call = ttft_s(), ttft_s("-b", "512")
    assert default == pytest.approx(ttft_s("-b", "2048"))
    assert one_a_call / default == pytest.approx(1.6, abs=0.1)


@pytest.mark.parametrize("argv", [
    ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "-b", "256"),
    ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "1000", "-b", "256"),
], ids=["fit", "prefill"])
def test_b_is_refused_for_an_engine_that_is_not_llamacpp(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and "-b (--batch-size) is llama.cpp's logical batch" in err


@pytest.mark.parametrize("prompt,batch,ubatch", [(512, 4, 512), (300, 4, 512), (700, 4, 512),
                                                 (512, 32, 2048)])
def test_a_batchs_prompts_share_ubatches_in_order(prompt: int, batch: int,
                                                  ubatch: int) -> None:
    """llama.cpp packs the prompts' tokens into its calls (-b) and ubatches (-ub) in order, a
    prompt split where one fills, as llama-batched-bench and llama-server run them: the
    prefill is the sum of those ubatches' step times, ⌈batch × prompt ÷ ubatch⌉ of them.
    32 prompts of 512 at -ub 2048 (DGX Spark's gpt-oss-120b batched-bench row) are 8 passes
    over the weights, not 32."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.cost import Seq, step_time_s
    from ridgeline.engines import profile_for
    from ridgeline.llamacpp_batching import prefill_calls, prefill_time_s, split_ubatches

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", None, 1, engine="llama.cpp-cuda")
    profile = profile_for("llama.cpp-cuda")
    parts = split_ubatches([Seq(prompt, 0)] * batch, ubatch)
    assert len(parts) == -(-batch * prompt // ubatch)
    assert [p for call in prefill_calls(prompt, 0, batch, ubatch, 2048) for p in call] == parts
    assert prefill_time_s(dep, profile, prompt, 0, batch, ubatch) == pytest.approx(
        sum(step_time_s(dep, part, profile) for part in parts))

"""roofline --engine: --model placed as that engine serves it, through the deployment fit and
decode build (cli_load.build_deployment), so the dense ridge batch is their verdicts'."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def dense_batch(roof: dict) -> float:
    return next(p for p in roof["points"]
                if p["name"].startswith(("dense weight matrices", "weight matrices"))
                )["batch_to_ridge"]


# (model, card, --weights or None, the llama.cpp build the card runs): an MoE whose GGUF is
# not its checkpoint (gpt-oss), dense models as stored and as a GGUF type, a hybrid, Apple
CASES = [
    ("gpt-oss-20b", "h100-sxm", None, "llama.cpp-cuda"),
    ("gpt-oss-120b", "apple-m2-max-38c", None, "llama.cpp-metal"),
    ("llama-3.1-8b", "rtx-4090", None, "llama.cpp-cuda"),
    ("llama-3.1-8b", "a100-sxm-80gb", "q4_k_m", "llama.cpp-cuda"),
    ("qwen3-30b-a3b", "mi300x", None, "llama.cpp-rocm"),
    ("gemma-3-27b", "apple-m2-max-38c", "q8_0", "llama.cpp-metal"),
]


@pytest.mark.parametrize(("model", "gpu", "weights", "build"), CASES)
def test_roofline_under_llamacpp_gives_the_ridge_batch_fits_llamacpp_verdict_uses(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, weights: str | None,
        build: str) -> None:
    """roofline --engine llama.cpp and fit --engine llama.cpp judge one deployment: the GGUF
    llama.cpp runs (gpt-oss-20b on an H100: ggml-org's mxfp4_moe, its Q8_0 attention at 1.064
    bytes a weight, 157.2; roofline had only the stored bf16's 295.3 there)."""
    fmt = ["--weights", weights] if weights else []
    roof = run_json(capsys, "roofline", "--model", model, "--gpu", gpu, "--engine",
                    "llama.cpp", *fmt)
    fit = run_json(capsys, "fit", model, "--gpu", gpu, "--engine", "llama.cpp", *fmt)
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                           engine=build)
    assert dense_batch(roof) == pytest.approx(fit["batch_to_ridge"]) \
        == pytest.approx(dep.dense_ridge_batch)


def test_gpt_oss_on_an_h100_reaches_the_ridge_at_158_under_llamacpp_and_296_as_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The stored checkpoint's bf16 attention, 2 bytes a weight, reaches bf16's 295.3 at 296;
    ggml-org's GGUF reads it at Q8_0, 1.0625 bytes (34 bytes a 32-weight block; 1.064 over
    all the dense weights' bytes): 295.3 × 1.064 ÷ 2 = 157.2, first whole batch 158. No
    --engine on an H100 stays the former."""
    args = ("roofline", "--model", "gpt-oss-20b", "--gpu", "h100")
    stored = run_json(capsys, *args)
    gguf = run_json(capsys, *args, "--engine", "llama.cpp")
    assert stored["points"][0]["first_whole_batch_to_ridge"] == 296
    assert gguf["points"][0]["first_whole_batch_to_ridge"] == 158
    assert run_json(capsys, *args, "--engine", "vllm")["points"][0]["batch_to_ridge"] \
        == stored["points"][0]["batch_to_ridge"]
    # --weights stored under llama.cpp is fit's: convert_hf_to_gguf.py's own output (BF16 rest)
    bf16 = run_json(capsys, *args, "--engine", "llama.cpp", "--weights", "stored")
    fit = run_json(capsys, "fit", "gpt-oss-20b", "--gpu", "h100", "--engine", "llama.cpp",
                   "--weights", "stored")
    assert dense_batch(bf16) == pytest.approx(fit["batch_to_ridge"])
    assert dense_batch(bf16) != pytest.approx(dense_batch(gguf))


def test_side_by_side_each_card_runs_its_own_llamacpp_build(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An unqualified llama.cpp is each card's build, as fit's comparison reads it: CUDA on
    the H100, Metal on the M2 Max; vLLM named on a Mac is a card that cannot run it."""
    table = run_json(capsys, "roofline", "--model", "gpt-oss-20b", "--gpu",
                     "h100,apple-m2-max-38c", "--engine", "llama.cpp")
    spec = resolve_model("gpt-oss-20b")
    for row, (gpu, build) in zip(table["accelerators"], (("h100-sxm", "llama.cpp-cuda"),
                                                         ("apple-m2-max-38c", "llama.cpp-metal"))):
        dep = Deployment.build(spec, resolve_accelerator(gpu), engine=build)
        assert dense_batch(row) == pytest.approx(dep.dense_ridge_batch)
    vllm = run_json(capsys, "roofline", "--model", "gpt-oss-20b", "--gpu",
                    "h100,apple-m2-max-38c", "--engine", "vllm")
    assert [r["accelerator"] for r in vllm["accelerators"]] == ["h100-sxm"]
    assert "vllm does not run on apple-m2-max-38c" in json.dumps(vllm)


def test_an_engine_without_a_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The engine reads a checkpoint; without one --weights alone gives the bytes a weight."""
    assert main(["roofline", "--gpu", "h100", "--engine", "llama.cpp", "--weights",
                 "q4_k_m"]) == 2
    assert "give --model" in capsys.readouterr().err
    assert main(["roofline", "--gpu", "apple-m2-max-38c"]) == 0  # its default engine: as before


def test_roofline_over_several_gpus_under_llamacpp_names_its_layer_split(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp splits layers over --num-gpus (-sm layer, the deployment's pipeline stages,
    as fit names it): roofline called that tensor parallelism. The ridge is each GPU's either
    way; the words say which split runs."""
    dep = Deployment.build(resolve_model("qwen2.5-32b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", num_gpus=2, engine="llama.cpp-cuda")
    assert dep.pipeline_parallel_size == 2
    argv = ["roofline", "--gpu", "rtx-4090", "--num-gpus", "2", "--model", "qwen2.5-32b",
            "--weights", "q4_k_m"]
    assert main([*argv, "--engine", "llama.cpp"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "llama.cpp's layer split" in head and "tensor parallelism" not in head
    assert main(argv) == 0  # vLLM's tensor parallelism, as before
    assert "tensor parallelism adds peak" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("engine", [None, "llama.cpp", "vllm"])
def test_roofline_json_names_the_deployment_it_placed(capsys: pytest.CaptureFixture[str],
                                                      engine: str | None) -> None:
    """roofline --json says which engine, weights and KV dtype its ridge is for, with fit's
    --json's keys, so a reader can tell --engine llama.cpp's 158 from vLLM's 296."""
    asked = ("--engine", engine) if engine else ()
    roof = run_json(capsys, "roofline", "--gpu", "h100", "--model", "gpt-oss-20b", *asked)
    fit = run_json(capsys, "fit", "gpt-oss-20b", "--gpu", "h100", *asked)
    for key in ("weights", "weights_format", "kv_dtype"):
        assert roof[key] == fit[key]
    assert roof["engine"] == (None if engine is None else fit["engine"])


def test_roofline_json_without_a_model_names_no_deployment(
        capsys: pytest.CaptureFixture[str]) -> None:
    card = run_json(capsys, "roofline", "--gpu", "h100")  # the keys there, null
    assert (card["engine"], card["model"], card["weights"]) == (None, None, None)

"""llama.cpp runs GGUF files. A checkpoint stored in a type GGUF has no tensor type for (fp8,
AWQ/GPTQ int4) reaches it only as the file convert_hf_to_gguf.py writes from it, dequantized
to bf16 or q8_0 and perhaps quantized further, so "as stored" is refused as --weights fp8 is,
with the formats to name instead. gpt-oss's MXFP4 experts are a GGUF type: with no --weights
its checkpoint runs as the GGUF users run (ggml-org's, mxfp4_moe), said once; --weights stored
is convert_hf_to_gguf.py's own output, the checkpoint's formats."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from tests.conftest import run_cli

EIGHT_H100 = ("--gpu", "h100", "--num-gpus", "8", "--engine", "llama.cpp-cuda")


@pytest.mark.parametrize("argv", [
    ("fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "llama.cpp-cuda",
     "--max-model-len", "8k"),
    ("fit", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--max-model-len", "8k"),
    ("decode", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--batch", "1", "--context", "1000"),
    ("prefill", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--prompt-len", "1000"),
    ("simulate", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--max-model-len", "8k",
     "--concurrency", "4"),
], ids=["fit-deepseek", "fit", "decode", "prefill", "simulate"])
def test_llamacpp_refuses_an_fp8_checkpoint_as_stored_with_the_formats_to_name(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """It had read DeepSeek-V3 at 1 byte a weight (85.77 GiB a GPU where q8_0 takes 91.09)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out
    assert "fp8-block weights, not a GGUF tensor type" in err and "--weights q8_0" in err


def test_the_refusal_reads_as_the_one_for_a_named_fp8(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, named = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                             "llama.cpp-cuda", "--weights", "fp8", "--batch", "1", "--context",
                             "100")
    assert code == 2 and "fp8 is not a GGUF tensor type" in named
    code, _, stored = run_cli(capsys, "decode", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--batch",
                              "1", "--context", "100")
    assert code == 2
    tail = ": llama.cpp runs GGUF files (q8_0, q4_k_m, … or bf16)"
    assert tail in named and tail in stored
    assert named.strip().endswith("give --weights q8_0, bf16 or q4_k_m")
    assert stored.strip().endswith("give --weights q8_0, bf16 or q4_k_m")


def test_the_gguf_a_lever_names_runs_and_weighs_more(capsys: pytest.CaptureFixture[str]) -> None:
    model, h100 = resolve_model("qwen3-235b-a22b-fp8"), resolve_accelerator("h100")
    gguf = Deployment.build(model, h100, "q8_0", None, 8, engine="llama.cpp-cuda")
    served = Deployment.build(model, h100, None, None, 8, engine="vllm")  # fp8 as stored
    assert gguf.weight_bytes > served.weight_bytes  # 8.5 bits a weight against 8
    code, out, _ = run_cli(capsys, "fit", "qwen3-235b-a22b-fp8", *EIGHT_H100, "--weights",
                           "q8_0", "--max-model-len", "8k")
    assert code == 0 and "weights q8_0" in out


def test_gpt_oss_runs_under_llamacpp_as_ggml_orgs_gguf_unless_stored_is_named() -> None:
    """It had run the safetensors' bf16 attention and lm_head, a file llama.cpp never loads."""
    spec, card = resolve_model("gpt-oss-20b"), resolve_accelerator("rtx-4090")
    dep = Deployment.build(spec, card, engine="llama.cpp-cuda")
    formats = dict(dep.weights.formats)
    assert dep.weights.label == "mxfp4_moe"
    assert formats["experts"] == "mxfp4" and formats["attention"] == formats["lm_head"] == "q8_0"
    stored = Deployment.build(spec, card, "stored", engine="llama.cpp-cuda")
    assert stored.weights.label == "as stored" and dict(stored.weights.formats)["attention"] \
        == "bf16"
    assert Deployment.build(spec, card, engine="vllm").weights.label == "as stored"
    assert Deployment.build(spec, card).weights.label == "as stored"  # no engine: no GGUF


def test_gpt_oss_120b_on_a_dgx_spark_under_llamacpp_expects_about_48_tok_s(
        capsys: pytest.CaptureFixture[str]) -> None:
    """ggml-org's GGUF, as validate prices the published rows (59.02 tok/s measured, llama.cpp
    benches/dgx-spark.md); the checkpoint's bf16 attention had read 36.8."""
    argv = ("decode", "gpt-oss-120b", "--gpu", "dgx-spark-gb10", "--engine", "llama.cpp",
            "--json")
    code, out, _ = run_cli(capsys, *argv)
    data = json.loads(out)
    assert code == 0 and data["deployment"].startswith("gpt-oss-120b on 1 x dgx-spark-gb10, "
                                                       "weights mxfp4_moe")
    assert data["points"][0]["expected"]["per_user_tok_s"] == pytest.approx(48.4, abs=0.5)
    assert any("ggml-org's conversion, --weights mxfp4_moe" in c for c in data["cautions"])
    code, out, _ = run_cli(capsys, *argv, "--weights", "stored")
    data = json.loads(out)
    assert data["points"][0]["expected"]["per_user_tok_s"] == pytest.approx(36.8, abs=0.5)
    assert not any("ggml-org" in c for c in data["cautions"])


@pytest.mark.parametrize("argv", [
    ("decode", "--batch", "1", "--context", "1000"),
    ("prefill", "--prompt-len", "1000"),
    ("fit", "--max-model-len", "8k"),
    ("simulate", "--max-model-len", "8k", "--concurrency", "2", "--num-requests", "4",
     "--input-len", "64", "--output-len", "8"),
], ids=["decode", "prefill", "fit", "simulate"])
def test_every_llamacpp_command_runs_gpt_oss_as_its_gguf_and_says_so_once(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, argv[0], "gpt-oss-120b", "--gpu", "dgx-spark-gb10",
                             "--engine", "llama.cpp", *argv[1:])
    assert code == 0 and "mxfp4_moe" in out and "as stored" not in out
    assert err.count("read as ggml-org's conversion, --weights mxfp4_moe (MXFP4 experts, "
                     "Q8_0 for the rest); --weights stored for convert_hf_to_gguf.py") == 1


def test_a_refused_llamacpp_deployment_is_one_line_with_no_gguf_caution_before_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b on 2 Apple-silicon GPUs: the refusal (Metal runs one device) is the whole
    of stderr; the GGUF note is said only for a deployment that stands."""
    code, out, err = run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "apple-m1-max-32c",
                             "--num-gpus", "2", "--max-model-len", "8192", "--json")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "ridgeline: error: apple-m1-max-32c is one Apple-silicon GPU: llama.cpp's Metal "
        "backend runs on one device (several Macs over RPC are not modelled)"]


def test_an_engine_comparison_names_each_engines_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--engine",
                           "vllm,llama.cpp", "--max-model-len", "8k")
    assert code == 0
    assert "weights as stored (llama.cpp-cuda: mxfp4_moe):" in out.splitlines()[0]


def test_an_awq_checkpoint_is_served_by_vllm_and_refused_by_llamacpp_as_stored() -> None:
    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    spec = spec_from_hf_config(json.loads(json.dumps(config)), name="llama-3.1-8b-awq")
    h100 = resolve_accelerator("h100")
    assert Deployment.build(spec, h100, engine="vllm").weights.label == "as stored"
    with pytest.raises(InputError, match="stores awq-int4 weights, not a GGUF tensor type"):
        Deployment.build(spec, h100, engine="llama.cpp-cuda")
    assert Deployment.build(spec, h100, "q4_k_m", engine="llama.cpp-cuda").weights.label \
        == "q4_k_m"


def test_no_engine_named_still_sizes_a_checkpoint_as_stored() -> None:
    """The arithmetic without an engine (kv, roofline) runs no GGUF loader."""
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                           None, 8)
    assert dep.weights.label == "as stored"

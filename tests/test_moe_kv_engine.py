"""moe --engine and kv --engine: the model as that engine serves it on the card, built as
roofline and fit build theirs (cli_load.build_deployment, for cli_load.served_engine's
engine), so the bytes a step reads, the ridge and the conversations that fit are the
engine's; --json names the deployment with fit's keys."""

from __future__ import annotations

import json
import math

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.params import count_params
from ridgeline.quantization import EXPERT_BIAS
from ridgeline.raw_fit import device_fit
from ridgeline.roofline import ridge_point
from ridgeline.step_work import weight_bytes_read
from tests.conftest import run_cli

SERVED = ("engine", "weights", "weights_format", "kv_dtype")  # fit's --json keys


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr and no traceback; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# (model, card, --engine, the engine id it builds): a GGUF that is not the checkpoint
# (gpt-oss under llama.cpp), a GeForce card under llama.cpp, llama.cpp on Blackwell (its
# experts at bf16, not the stored MXFP4's fp4), SGLang's ModelOpt MIXED_PRECISION on Blackwell,
# the one family SGLang serves it on (its modelopt_mixed floor is compute capability 10.0)
CASES = [
    ("gpt-oss-20b", "h100-sxm", "llama.cpp", "llama.cpp-cuda"),
    ("gpt-oss-120b", "b200", "llama.cpp", "llama.cpp-cuda"),
    ("qwen3-30b-a3b", "rtx-4090", "llama.cpp", "llama.cpp-cuda"),
    ("mixtral-8x7b", "apple-m2-max-38c", "llama.cpp", "llama.cpp-metal"),
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "b200", "sglang", "sglang"),
    ("qwen3-30b-a3b", "h100-sxm", "vllm", "vllm"),
]


@pytest.mark.parametrize(("model", "gpu", "engine", "built"), CASES)
def test_moe_under_an_engine_is_the_deployment_roofline_and_fit_read(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, engine: str,
        built: str) -> None:
    """moe --engine prices routing on the deployment that engine serves: its experts' bytes
    a weight, the ridge of the dtype it runs them at (as it runs it), the weights a step
    reads, and the same batch to the ridge as roofline's MoE row under that engine."""
    moe = run_json(capsys, "moe", model, "--gpu", gpu, "--engine", engine)
    roof = run_json(capsys, "roofline", "--model", model, "--gpu", gpu, "--engine", engine)
    fit = run_json(capsys, "fit", model, "--gpu", gpu, "--engine", engine)
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), engine=built)
    acc = dep.accelerator
    for key in SERVED:
        assert moe[key] == roof[key] == fit[key]
    assert moe["engine"] == built
    assert moe["expert_bytes_per_weight"] == dep.bytes_per_weight_split[1]
    assert moe["ridge_flop_per_byte"] == pytest.approx(ridge_point(
        dep.peak_at(dep.expert_compute_dtype), acc.memory_bandwidth_bytes_per_s))
    assert moe["article_batch_to_ridge"] == pytest.approx(dep.expert_ridge_batch)
    row = next(p for p in roof["points"] if p["name"] == "MoE expert layers")
    assert row["first_whole_batch_to_ridge"] == math.ceil(moe["article_batch_to_ridge"])
    assert moe["weight_bytes_total"] == pytest.approx(dep.weight_bytes)
    for r in moe["rows"]:
        assert r["weight_bytes_read"] == pytest.approx(weight_bytes_read(dep, r["batch"]))


def test_gpt_oss_under_llamacpp_reads_its_gguf_q8_0_dense_weights_not_the_stored_bf16(
        capsys: pytest.CaptureFixture[str]) -> None:
    """ggml-org's GGUF keeps gpt-oss-20b's MXFP4 experts and reads the rest at Q8_0: a
    step at batch 1 reads the dense weights at about 1.06 bytes, not the checkpoint's 2, so
    less than the stored reading, by the dense bytes the two formats differ by."""
    args = ("moe", "gpt-oss-20b", "--gpu", "h100", "--batch", "1")
    stored, gguf = run_json(capsys, *args), run_json(capsys, *args, "--engine", "llama.cpp")
    model, acc = resolve_model("gpt-oss-20b"), resolve_accelerator("h100")
    as_stored = Deployment.build(model, acc)
    llamacpp = Deployment.build(model, acc, engine="llama.cpp-cuda")
    assert (stored["engine"], stored["weights"]) == (None, "as stored")
    assert (gguf["engine"], gguf["weights"]) == ("llama.cpp-cuda", "mxfp4_moe")
    assert stored["expert_bytes_per_weight"] == gguf["expert_bytes_per_weight"]  # MXFP4 both
    assert as_stored.bytes_per_weight_split[0] == 2.0
    assert llamacpp.bytes_per_weight_split[0] < 1.1
    saved = as_stored.non_expert_bytes_read - llamacpp.non_expert_bytes_read
    assert saved > 0
    # less the 2 more bytes each of the routed experts' biases takes, F32 in the GGUF
    assert model.moe is not None
    biases = count_params(model).by_category[EXPERT_BIAS] * model.moe.routed_fraction * (4 - 2)
    assert biases > 0
    assert stored["rows"][0]["weight_bytes_read"] - gguf["rows"][0]["weight_bytes_read"] \
        == pytest.approx(saved - biases)


def test_on_a_b200_gpt_oss_experts_reach_the_bf16_ridge_under_vllm_and_llamacpp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No engine multiplies gpt-oss's MXFP4 experts at a B200's fp4 peak: vLLM (the card's
    default) and llama.cpp at bf16, SGLang at fp8 (MXFP8 activations), whose peak is twice
    bf16's on the card (the catalog's records), so its ridge and the batch that reaches it
    are twice theirs."""
    args = ("moe", "gpt-oss-120b", "--gpu", "b200")
    stored, gguf = run_json(capsys, *args), run_json(capsys, *args, "--engine", "llama.cpp")
    sglang = run_json(capsys, *args, "--engine", "sglang")
    acc = resolve_accelerator("b200")
    bandwidth = acc.memory_bandwidth_bytes_per_s
    assert stored["ridge_flop_per_byte"] == pytest.approx(ridge_point(acc.peak("bf16"), bandwidth))
    assert gguf["ridge_flop_per_byte"] == pytest.approx(stored["ridge_flop_per_byte"])
    assert sglang["ridge_flop_per_byte"] == pytest.approx(ridge_point(acc.peak("fp8"), bandwidth))
    ratio = acc.peak("fp8") / acc.peak("bf16")
    assert sglang["article_batch_to_ridge"] == pytest.approx(stored["article_batch_to_ridge"]
                                                             * ratio)
    # docs/fit.md's figures: near 2,391 under vLLM and llama.cpp, near 4,782 under SGLang
    assert (math.ceil(stored["article_batch_to_ridge"]), math.ceil(gguf["article_batch_to_ridge"]),
            math.ceil(sglang["article_batch_to_ridge"])) == (2391, 2391, 4782)


def test_moe_without_engine_defaults_by_the_card_as_roofline_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No --engine: on a card vLLM serves, the article's arithmetic on the checkpoint as
    stored (--json says no engine is named); on Apple silicon, which only llama.cpp serves,
    the GGUF llama.cpp runs, as roofline's default reads it there."""
    data = run_json(capsys, "moe", "gpt-oss-120b", "--gpu", "h100")
    dep = Deployment.build(resolve_model("gpt-oss-120b"), resolve_accelerator("h100"))
    assert (data["engine"], data["weights"], data["kv_dtype"]) == (None, "as stored", dep.kv.id)
    assert data["weight_bytes_total"] == pytest.approx(dep.weight_bytes)
    apple = ("gpt-oss-120b", "--gpu", "apple-m2-max-38c")
    default = run_json(capsys, "moe", *apple)
    named = run_json(capsys, "moe", *apple, "--engine", "llama.cpp")
    assert default == named and default["engine"].startswith("llama.cpp")
    roof = run_json(capsys, "roofline", "--model", *apple)
    assert (roof["engine"], roof["weights_format"]) == (default["engine"],
                                                        default["weights_format"])


@pytest.mark.parametrize(("argv", "words"), [
    (("moe", "gpt-oss-20b", "--engine", "nosuch"), "unknown engine 'nosuch'"),
    (("moe", "gpt-oss-20b", "--engine", "vllm,sglang"), "runs one engine"),
    (("moe", "gpt-oss-20b", "--gpu", "apple-m2-max-38c", "--engine", "vllm"),
     "vllm does not run on apple-m2-max-38c"),
    (("moe", "gpt-oss-20b", "--gpu", "v100", "--engine", "vllm"), "runs no mxfp4 weights"),
    (("moe", "deepseek-v3", "--gpu", "h100", "--engine", "llama.cpp"), "not a GGUF tensor"),
    (("moe", "llama-3.1-8b", "--engine", "llama.cpp"), "dense model"),
    (("kv", "llama-3.1-8b", "--context", "8k", "--engine", "nosuch"), "unknown engine"),
    (("kv", "llama-3.1-8b", "--context", "8k", "--engine", "llama.cpp"), "give --gpu"),
    (("kv", "llama-3.1-8b", "--context", "8k", "--memory-gib", "20", "--engine", "sglang"),
     "give --gpu instead of --memory-gib"),
    (("kv", "llama-3.1-8b", "--context", "8k", "--gpu", "apple-m2-max-38c", "--engine",
      "sglang"), "sglang does not run on apple-m2-max-38c"),
    (("kv", "deepseek-v3", "--context", "8k", "--gpu", "h200", "--engine", "llama.cpp"),
     "not a GGUF tensor"),
])
def test_an_engine_that_cannot_serve_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], words: str) -> None:
    assert words in refused(capsys, *argv)


@pytest.mark.parametrize("flag", [("--weights", "fp8"), ("-q", "fp8")])
def test_kv_refuses_a_weight_format_with_no_card_to_put_the_weights_on(
        capsys: pytest.CaptureFixture[str], flag: tuple[str, str]) -> None:
    """kv --memory-gib 80 --weights fp8 (or no budget at all) printed the bf16 run's answer:
    the budget is the cache's alone, so the format changed nothing and said nothing. On a
    card it sizes the weights beside the cache, and the room they leave moves with it."""
    base = ("kv", "llama-3.1-70b", "--context", "8k")
    assert "--memory-gib is the cache's budget alone: give --gpu" in refused(
        capsys, *base, "--memory-gib", "80", *flag)
    assert "no card is named: give --gpu" in refused(capsys, *base, *flag)
    card = (*base, "--gpu", "h100", "--num-gpus", "2")
    assert run_json(capsys, *card, *flag)["budget_bytes"] > run_json(capsys, *card)["budget_bytes"]


def test_kv_under_llamacpp_caches_mistral_windows_as_full_attention_in_f16(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp keeps no window for Mistral-7B-v0.1 (its GGUF loads as "llama"), so every
    layer caches the whole context, in its default f16: per sequence 2 × KV heads × head_dim
    × 2 B × layers × context, and the conversations are what the card keeps beside the GGUF's
    weights ÷ that; vLLM's default keeps only the config's window."""
    model, acc = resolve_model("mistral-7b"), resolve_accelerator("h100")
    att = model.attention
    assert att is not None
    args = ("kv", "mistral-7b", "--gpu", "h100", "--context", "32000")
    vllm, llamacpp = run_json(capsys, *args), run_json(capsys, *args, "--engine", "llama.cpp")
    per_sequence = 2 * att.num_kv_heads * att.head_dim * 2 * model.num_layers * 32000
    assert (llamacpp["kv_dtype"], llamacpp["engine"]) == ("fp16", "llama.cpp-cuda")
    assert llamacpp["bytes_per_sequence"] == pytest.approx(per_sequence)
    room = device_fit(Deployment.build(model, acc, engine="llama.cpp-cuda")).kv_room_bytes
    assert llamacpp["conversations"] == math.floor(room / per_sequence)
    window = min(layer.window_tokens or 32000 for layer in model.layers)
    assert window < 32000
    assert vllm["engine"] is None
    assert vllm["bytes_per_sequence"] == pytest.approx(per_sequence * window / 32000)
    assert vllm["conversations"] > llamacpp["conversations"]
    # docs/fit.md's figures: 131 conversations with vLLM's window, 16 under llama.cpp
    assert (vllm["conversations"], llamacpp["conversations"]) == (131, 16)


def test_kv_json_names_the_deployment_as_fit_does(capsys: pytest.CaptureFixture[str]) -> None:
    """kv with a card names its engine, weights and cache dtype with fit's --json keys; the
    SGLang hybrid's SSM state is its fp32, not the checkpoint's bf16 (a larger state)."""
    for engine in ("llama.cpp", "sglang", "vllm"):
        kv = run_json(capsys, "kv", "jamba-1.5-mini", "--gpu", "h200", "--context", "32k",
                      "--engine", engine)
        fit = run_json(capsys, "fit", "jamba-1.5-mini", "--gpu", "h200", "--engine", engine)
        for key in SERVED:
            assert kv[key] == fit[key]
    plain = run_json(capsys, "kv", "jamba-1.5-mini", "--gpu", "h200", "--context", "32k")
    sglang = run_json(capsys, "kv", "jamba-1.5-mini", "--gpu", "h200", "--context", "32k",
                      "--engine", "sglang")
    assert plain["engine"] is None and plain["state_dtypes"]["ssm"] == "bf16"
    assert sglang["state_dtypes"]["ssm"] == "fp32"
    assert sglang["state_bytes_per_sequence"] > plain["state_bytes_per_sequence"]
    alone = run_json(capsys, "kv", "jamba-1.5-mini", "--context", "32k")  # no card: no engine
    assert (alone["engine"], alone["accelerator"]) == (None, None)


def test_kv_reads_sglangs_data_parallel_attention_under_engine_sglang(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--engine sglang reads SGLang's --dp-size with --enable-dp-attention (8 ranks over its
    --tp-size of 8 GPUs), as fit does: each rank holds its own conversations in its share of
    what SGLang's weights leave, ranks × floor(room ÷ ranks ÷ bytes per sequence)."""
    kv = run_json(capsys, "kv", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--context",
                  "32k", "--dp-size", "8", "--enable-dp-attention", "--engine", "sglang")
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           engine="sglang", data_parallel_size=8)
    room = device_fit(dep).kv_room_bytes
    assert kv["engine"] == "sglang"
    assert kv["budget_bytes"] == pytest.approx(room)
    assert kv["conversations"] == 8 * math.floor(room / 8 / kv["bytes_per_sequence"])


def test_kv_under_trtllm_keeps_nemotron_h_ssm_state_at_its_torch_dtype_not_vllms_fp32(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's mamba_ssm_cache_dtype 'auto' reads the config's torch_dtype (bf16) for
    Nemotron-H, where vLLM keeps fp32: kv --engine trtllm's states are its, the bytes each
    Mamba layer's elements take at that dtype, as fit's TensorRT-LLM pool sizes them."""
    from ridgeline.cost import served_state_model
    from ridgeline.kvcache import state_bytes_per_sequence

    model = resolve_model("nemotron-h-56b-base-8k")
    args = ("kv", "nemotron-h-56b-base-8k", "--gpu", "h200", "--num-gpus", "2", "--context",
            "8k", "--engine")
    trtllm, vllm = run_json(capsys, *args, "trtllm"), run_json(capsys, *args, "vllm")
    served = served_state_model(model, "trtllm")
    assert trtllm["state_dtypes"]["ssm"] == served.state_dtype == model.dtype == "bf16"
    assert vllm["state_dtypes"]["ssm"] == "fp32"
    assert trtllm["state_bytes_per_sequence"] == pytest.approx(sum(
        state_bytes_per_sequence(served, layer, None) for layer in served.layers))
    assert trtllm["state_bytes_per_sequence"] < vllm["state_bytes_per_sequence"]


def test_moe_says_the_tp_copies_between_its_two_weight_totals(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H100s: the fit line's 681.1 GB and the footer's 673.2 GB differ by the
    8.0 GB every tensor-parallel rank keeps whole; both lines now say it."""
    code, out, _ = run_cli(capsys, "moe", "deepseek-v3", "--gpu", "h100", "--num-gpus", "8",
                           "--batch", "1,64", "--json")
    data = json.loads(out)
    stored, on_gpus = data["weight_bytes_total"], data["weight_bytes"]
    copies = (on_gpus - stored) / 1e9
    assert copies > 1
    code, out, _ = run_cli(capsys, "moe", "deepseek-v3", "--gpu", "h100", "--num-gpus", "8",
                           "--batch", "1,64")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("DOES NOT FIT")
    said = f"{copies:,.1f} GB of copies every tensor-parallel rank keeps whole"
    assert f"{stored / 1e9:,.1f} GB as stored + {said}" in lines[0]
    assert f"{on_gpus / 1e9:,.1f} GB on the GPUs with the {said}" in lines[-1]
    # one GPU: no copies, no clause
    _, out, _ = run_cli(capsys, "moe", "qwen3-30b-a3b", "--gpu", "h100", "--batch", "1")
    assert "tensor-parallel" not in out



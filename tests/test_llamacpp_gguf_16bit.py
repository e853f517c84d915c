"""The 16-bit GGUF llama.cpp runs a checkpoint as, and the dtype its matmuls run at.

convert_hf_to_gguf.py's default --outtype, auto, keeps a bf16 checkpoint bf16 (engines.json
gguf_16bit, with its source), and every llama.cpp backend ridgeline models multiplies a BF16
GGUF at bf16 on a card with a bf16 rate: CUDA through cuBLAS at FP32 accumulate, Metal in
bfloat tiles (a T4's is priced at fp32: test_llamacpp_gguf_tensor_types). So Llama-3.1-8B's
label reads the same on an RTX 4090 and an M2 Max (it had said "matmuls at fp16" on the Mac),
each priced at its card's bf16 figure (an Apple GPU's one 16-bit rate)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.datafiles import load_data
from ridgeline.hardware import catalog
from ridgeline.served_model import LLAMACPP_STORED_GGUF, llamacpp_gguf_dtype
from tests.conftest import run_cli

CARDS = [("rtx-4090", "llama.cpp-cuda"), ("apple-m2-max-38c", "llama.cpp-metal")]
PROMPT = {"decode": (), "prefill": ("--prompt-len", "4096")}


def test_the_converters_default_keeps_a_16_bit_checkpoints_type() -> None:
    """bf16 stays bf16 and fp16 fp16; a float32 checkpoint, which has neither, becomes F16."""
    spec = resolve_model("llama-3.1-8b")
    rule = load_data("engines.json")["llama.cpp"]["gguf_16bit"]
    assert rule["convert_outtype"] == "auto"
    assert llamacpp_gguf_dtype(spec) == spec.dtype == "bf16"
    assert llamacpp_gguf_dtype(dataclasses.replace(spec, dtype="fp16")) == "fp16"
    assert llamacpp_gguf_dtype(dataclasses.replace(spec, dtype="fp32")) == rule["auto_outtype"][
        "other"] == "fp16"


@pytest.mark.parametrize(("card", "engine"), CARDS)
def test_a_bf16_gguf_multiplies_at_bf16_on_cuda_and_metal(card: str, engine: str) -> None:
    """The step's dtype is the GGUF's, priced at the card's bf16 peak: the 4090's FP32-accumulate
    165.2 TFLOP/s (cuBLAS's CUBLAS_COMPUTE_32F), not its fp16-accumulate 330.4; the M2 Max's
    13.6, its fp16 and fp32 rate too, so its figures did not move."""
    spec, acc = resolve_model("llama-3.1-8b"), resolve_accelerator(card)
    dep = Deployment.build(spec, acc, engine=engine)
    assert dep.compute_dtype == dep.dense_dtype_label == llamacpp_gguf_dtype(spec) == "bf16"
    assert dep.peak_at(dep.compute_dtype) == acc.peak_flops["bf16"]
    assert dep.matmuls_label == "bf16 (QKᵀ and PV at fp16)"  # llama.cpp's f16 cache


def test_an_f16_gguf_multiplies_at_fp16_with_fp16_accumulate_on_a_4090() -> None:
    """A file an older converter wrote by default (F16) is --weights fp16: twice the bf16 rate
    on a GeForce card under llama.cpp's CUDA build, as the label says."""
    spec, acc = resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090")
    bf16 = Deployment.build(spec, acc, engine="llama.cpp-cuda")
    f16 = Deployment.build(spec, acc, "fp16", engine="llama.cpp-cuda")
    assert (f16.compute_dtype, f16.matmuls_label) == ("fp16", "fp16")
    assert f16.peak_at(f16.compute_dtype) == acc.fp16_accumulate_flops \
        == 2 * bf16.peak_at(bf16.compute_dtype)
    assert f16.bytes_per_weight_split == bf16.bytes_per_weight_split


def test_every_apple_gpu_runs_a_bf16_gguf_at_its_one_16_bit_rate() -> None:
    """Metal multiplies BF16 in bfloat tiles on every Apple-silicon GPU (Apple6 and later): each
    Apple record's bf16 figure is its fp16 and fp32 one, so the label names bf16 at no new
    price."""
    spec = resolve_model("llama-3.1-8b")
    apple = [a for a in catalog().values() if a.vendor == "apple"]
    assert apple
    for acc in apple:
        assert acc.peak_flops["bf16"] == acc.peak_flops["fp16"] == acc.peak_flops["fp32"]
        dep = Deployment.build(spec, acc, engine="llama.cpp-metal")
        assert dep.compute_dtype == "bf16" and dep.peak_flops_per_s == acc.peak_flops["fp16"]


@pytest.mark.parametrize("command", [("decode", "--explain"), ("prefill", "--explain"),
                                     ("decode", "--json"), ("prefill", "--json")])
def test_decode_and_prefill_say_the_same_matmul_dtype_on_cuda_and_metal(
        capsys: pytest.CaptureFixture[str], command: tuple[str, str]) -> None:
    """The deployment line after the card is one line on both backends, --json and --explain
    alike; --explain's first peak, the step's, names the dtype it is priced at."""
    tails, peaks = set(), []
    for card, engine in CARDS:
        code, out, _ = run_cli(capsys, command[0], "llama-3.1-8b", "--gpu", card, "--engine",
                               engine, command[1], *PROMPT[command[0]])
        assert code == 0
        line = json.loads(out)["deployment"] if command[1] == "--json" else out.splitlines()[0]
        tails.add(line.split(card, 1)[1])
        peaks += [ln for ln in out.splitlines() if ln.strip().startswith("peak ")][:1]
    assert tails == {", weights bf16, KV fp16, matmuls at bf16 (QKᵀ and PV at fp16)"}
    if command[1] == "--explain":
        assert peaks and all(p.strip().startswith("peak bf16 = ") for p in peaks)


def test_gpt_oss_stored_under_llamacpp_is_the_bf16_rest_the_converter_writes() -> None:
    """--weights stored for gpt-oss is its MXFP4 experts beside the rest at the converter's
    default type: bf16 (the checkpoint's), priced so, and said so (it had said F16)."""
    spec, acc = resolve_model("gpt-oss-20b"), resolve_accelerator("rtx-4090")
    stored = Deployment.build(spec, acc, "stored", engine="llama.cpp-cuda")
    formats = dict(stored.weights.formats)
    assert formats["experts"] == "mxfp4"
    assert formats["attention"] == llamacpp_gguf_dtype(spec) == "bf16"
    assert stored.compute_dtype_of("attention") == "bf16" != stored.compute_dtype
    assert stored.peak_at(stored.compute_dtype_of("attention")) == acc.peak_flops["bf16"]
    rest = stored.matmuls_label.removeprefix(f"{stored.compute_dtype} (")
    assert "attention" in rest and rest.endswith(" at bf16)")
    assert llamacpp_gguf_dtype(spec).upper() in LLAMACPP_STORED_GGUF
    assert "F16" not in LLAMACPP_STORED_GGUF.replace("BF16", "")

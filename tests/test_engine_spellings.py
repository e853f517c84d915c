"""The engines' own spellings are ridgeline's: vLLM's and SGLang's --quantization and --dtype,
each engine's name for the longest request (llama.cpp's -c refused with its translation),
vllm bench serve's load flags on simulate, an instruct repo whose config is its base model's,
and the launch line plan prints, pasted back."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import hub_id, model_entries, resolve_model
from ridgeline.cli import build_parser
from ridgeline.datafiles import load_data
from ridgeline.engine_quantization import MODELOPT_EXPORTS, engine_methods
from ridgeline.reports.launch_commands import command_line
from tests.conftest import run_cli

FIT = ("fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "32k",
       "--json")


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return dict(json.loads(out))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def as_served(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` less what tells a checkpoint stored in its format (--weights fp8) from a
    16-bit one quantized on load (-q fp8): the start-up peak, and the levers' names (the next
    format is another checkpoint of either)."""
    kept = {k: v for k, v in report.items() if k not in ("load_peak_bytes_per_gpu",
                                                          "load_refusal", "levers")}
    return kept | {"levers": [lever["conversations"] for lever in report["levers"]]}


# -- --quantization and --dtype ------------------------------------------------------------
ONLINE = sorted(m for m, row in engine_methods().items() if row.online)
FROM_CHECKPOINT = sorted(m for m, row in engine_methods().items()
                         if not row.online and m not in MODELOPT_EXPORTS)


def engine_of(method: str) -> tuple[str, ...]:
    """FIT's --engine for ``method``: the one engine that has it (w8a8_fp8: SGLang), else none
    (vLLM, the default)."""
    engines = engine_methods()[method].engines
    return ("--engine", engines[0]) if len(engines) == 1 else ()


def awq_checkpoint(tmp_path: Path) -> str:
    """Llama 3.1 8B's config with an AWQ quantization_config (4 bits, groups of 128), as an
    AutoAWQ checkpoint ships it."""
    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                     "zero_point": True, "version": "gemm"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


# experts_int8 quantizes only a MoE's experts, and is refused on a dense model
MOE_FIT = ("fit", "qwen3-30b-a3b", "--gpu", "h100", "--max-model-len", "32k", "--json")


@pytest.mark.parametrize("method", ONLINE)
def test_a_method_that_quantizes_on_load_serves_a_16_bit_checkpoint_in_its_format(
        capsys: pytest.CaptureFixture[str], method: str) -> None:
    fmt, engine = engine_methods()[method].format, engine_of(method)
    fit = MOE_FIT if method == "experts_int8" else FIT
    on_load = answer(capsys, *fit, *engine, "--quantization", method)
    stored = answer(capsys, *fit, *engine, "--weights", fmt)  # a checkpoint stored in fmt
    # the same pool and weights; only -q holds the 16-bit share at start-up where the engine
    # loads it first (SGLang's w8a8_fp8: load_peak.py)
    assert stored["load_peak_bytes_per_gpu"] is None and stored["load_refusal"] is None
    assert as_served(on_load) == as_served(stored)


@pytest.mark.parametrize("method", FROM_CHECKPOINT)
def test_a_method_that_needs_its_own_checkpoint_is_refused_on_a_16_bit_one(
        capsys: pytest.CaptureFixture[str], method: str) -> None:
    """vllm serve meta-llama/Llama-3.1-70B-Instruct --quantization awq stops at start-up
    (no AWQ config in the checkpoint); --weights awq-int4 still sizes an AWQ checkpoint."""
    fmt = engine_methods()[method].format
    err = refused(capsys, *FIT, *engine_of(method), "-q", method)
    assert "does not quantize on load" in err and f"--weights {fmt}" in err
    assert answer(capsys, *FIT, "--weights", fmt) != answer(capsys, *FIT)


def test_vllms_short_q_and_a_hyphenated_method_are_taken(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fp8 = answer(capsys, *FIT, "-q", "fp8")
    assert answer(capsys, *FIT, "-q", "FP8") == fp8
    assert answer(capsys, *FIT, "--quantization", "PTPC-FP8") == fp8
    assert as_served(fp8) == as_served(answer(capsys, *FIT, "--weights", "fp8"))
    assert fp8 != answer(capsys, *FIT)
    argv = ("fit", awq_checkpoint(tmp_path), "--gpu", "l4", "--max-model-len", "8k", "--json")
    stored = answer(capsys, *argv)
    for method in ("awq", "awq_marlin", "AWQ-Marlin"):  # Marlin: the same checkpoint's kernels
        assert answer(capsys, *argv, "-q", method) == stored


# The method vLLM picks for a checkpoint (get_quantization_config): its quant_method, but for
# ModelOpt's one quant_method, where each config's override_quantization_method keys on
# quant_algo (ModelOptFp8Config FP8, ModelOptNvFp4Config NVFP4, ModelOptMixedPrecisionConfig
# MIXED_PRECISION).
VLLM_MODELOPT = {"FP8": "modelopt", "NVFP4": "modelopt_fp4", "MIXED_PRECISION": "modelopt_mixed"}


def vllms_method(qc: dict[str, Any]) -> str:
    method = str(qc["quant_method"]).lower()
    return VLLM_MODELOPT[str(qc["quant_algo"]).upper()] if method == "modelopt" else method


QUANTIZED = [(entry.id, vllms_method(qc)) for entry in model_entries()
             if (qc := load_data(f"models/{entry.file}").get("quantization_config"))]


@pytest.mark.parametrize(("model", "method"), QUANTIZED)
def test_every_quantized_catalog_checkpoint_is_served_as_stored_with_its_own_method(
        capsys: pytest.CaptureFixture[str], model: str, method: str) -> None:
    """`vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --quantization modelopt_mixed` loads the
    checkpoint as it is, as leaving the flag out does; so for every catalog checkpoint with a
    quantization_config and the method vLLM would pick for it."""
    argv = ("fit", model, "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "8k",
            "--json")
    assert answer(capsys, *argv, "-q", method) == answer(capsys, *argv)


def test_a_modelopt_checkpoint_takes_only_the_method_of_its_quant_algo(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.6-35B-A3B-NVFP4 is ModelOpt MIXED_PRECISION: vLLM serves it as modelopt_mixed,
    and --quantization modelopt_fp4 or modelopt (another quant_algo's) does not match; the
    refusal names the method that does, and sends no one to --weights."""
    argv = ("fit", "qwen3.6-35b-a3b", "--gpu", "h200", "--max-model-len", "8k", "--json")
    for method in ("modelopt_fp4", "modelopt"):
        err = refused(capsys, *argv, "-q", method)
        assert "does not match" in err and "--quantization modelopt_mixed" in err
        assert "--weights" not in err
    assert ("qwen3.6-35b-a3b", "modelopt_mixed") in QUANTIZED  # the loop above covers it


def test_a_method_the_checkpoints_own_does_not_match_is_refused_as_the_engines_refuse_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vLLM's _verify_quantization: 'Quantization method specified in the model config (fp8)
    does not match the quantization method specified in the `quantization` argument (awq)'.
    --weights sizes the other format all the same (the what-if flag)."""
    for model, method in (("qwen3-235b-a22b-fp8", "awq"), ("qwen3-235b-a22b-fp8", "fbgemm_fp8"),
                          ("gpt-oss-120b", "fp8"), ("qwen3.6-35b-a3b", "fp8"),
                          (awq_checkpoint(tmp_path), "fp8")):
        argv = ("fit", model, "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "8k",
                "--json")
        err = refused(capsys, *argv, "-q", method)
        assert "does not match" in err and "leave out --quantization" in err
        fmt = engine_methods()[method].format
        if (model, fmt) == ("qwen3-235b-a22b-fp8", "fp8"):
            continue  # fp8 names that checkpoint itself (names_stored_checkpoint)
        assert answer(capsys, *argv, "--weights", fmt) != answer(capsys, *argv)
    # the Marlin kernels are awq's for an AWQ checkpoint, gptq's for a GPTQ one
    assert "does not match" in refused(capsys, "fit", awq_checkpoint(tmp_path), "--gpu", "l4",
                                       "-q", "gptq_marlin")


def test_quantization_is_one_flag_the_weights_are_read_from_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-q leaves --weights unset (the deployment reads the method against the checkpoint);
    without a model it stands for the method's format, as --weights would."""
    parsed = build_parser().parse_args(["kv", "llama-3.1-8b", "--context", "8k", "-q", "awq"])
    assert (parsed.quantization, parsed.weights) == ("awq", None)
    roof = ("roofline", "--gpu", "h100", "--json")
    assert answer(capsys, *roof, "-q", "awq") == answer(capsys, *roof, "--weights", "awq-int4")
    assert answer(capsys, *roof, "-q", "awq") != answer(capsys, *roof)


@pytest.mark.parametrize("engine", ["trtllm", "llama.cpp-cuda"])
def test_quantization_is_refused_for_an_engine_without_the_flag(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    argv = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, "-q", "fp8")
    err = refused(capsys, *argv)
    assert "--quantization fp8 is vLLM's and SGLang's" in err and "GGUF tensor type" not in err


@pytest.mark.parametrize(("gpu", "release"), [("t4", ()), ("v100", ("--engine-version", "0.19"))])
def test_dtype_bfloat16_is_refused_on_a_card_without_bf16(
        capsys: pytest.CaptureFixture[str], gpu: str, release: tuple[str, ...]) -> None:
    """vLLM: 'Bfloat16 is only supported on GPUs with compute capability of at least 8.0';
    float16 runs, and --weights bf16 still sizes the checkpoint (the what-if flag). A V100
    under a release whose wheels carry Volta kernels (through 0.19: vllm_gpu_floors)."""
    argv = ("decode", "llama-3.2-1b", "--gpu", gpu, "--json", *release)
    assert "--dtype float16" in refused(capsys, *argv, "--dtype", "bfloat16")
    assert answer(capsys, *argv, "--dtype", "float16") == answer(capsys, *argv, "--weights", "fp16")
    answer(capsys, *argv, "--weights", "bf16")
    a100 = ("decode", "llama-3.2-1b", "--gpu", "a100", "--json")
    assert answer(capsys, *a100, "--dtype", "bfloat16") == answer(capsys, *a100)


def test_a_checkpoint_stored_in_the_methods_format_is_served_as_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-235B-A22B-FP8 stores block-wise FP8 (8.002 bits); vLLM's --quantization fp8
    loads it so (Fp8Config reads its weight_block_size), and so does --weights fp8, which had
    priced a per-tensor checkpoint (8.0 bits) as the header said "weights fp8". A format
    only another checkpoint holds stays that checkpoint's."""
    argv = ("fit", "qwen3-235b-a22b-fp8", "--gpu", "h200", "--num-gpus", "4",
            "--max-model-len", "32k", "--json")
    stored = answer(capsys, *argv)
    assert answer(capsys, *argv, "--quantization", "fp8") == stored
    assert answer(capsys, *argv, "--weights", "fp8") == stored
    assert answer(capsys, *argv, "--weights", "FP8", "--quantization", "fp8") == stored
    other = answer(capsys, *argv, "--weights", "awq-int4")
    assert other["weights"] == "awq-int4" and other["taken_bytes_per_gpu"]["weights"] \
        < stored["taken_bytes_per_gpu"]["weights"]


def test_fp8_names_the_checkpoint_only_where_the_fp8_method_loads_it_as_stored() -> None:
    """names_stored_checkpoint: DeepSeek-V3's fp8-block under vLLM, SGLang or no engine named;
    not a 16-bit checkpoint (fp8 quantizes it on load), not another format or width, not an
    engine without the method (TensorRT-LLM quantizes beforehand)."""
    from ridgeline.deployment import Deployment
    from ridgeline.engine_quantization import names_stored_checkpoint
    from ridgeline.hardware import resolve_accelerator

    deepseek = resolve_model("deepseek-v3")
    assert all(names_stored_checkpoint(w, deepseek, e) for w in ("fp8", "FP8", "e4m3")
               for e in (None, "vllm", "sglang"))
    assert not any(names_stored_checkpoint(w, deepseek) for w in ("int8", "awq-int4", "bf16",
                                                                  "auto", "nvfp4"))
    assert not names_stored_checkpoint("fp8", deepseek, "trtllm")
    assert not names_stored_checkpoint("fp8", resolve_model("llama-3.1-8b"))
    h200 = resolve_accelerator("h200")
    as_fp8 = Deployment.build(deepseek, h200, "fp8", None, 8)
    assert as_fp8.weights == Deployment.build(deepseek, h200, None, None, 8).weights
    assert as_fp8.weights.label == "as stored"


def test_a_method_ridgeline_has_no_format_for_is_refused_naming_the_ones_it_reads(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, *FIT, "--quantization", "aqlm")
    assert "aqlm" in err and all(m in err for m in engine_methods())


def test_quantization_with_weights_is_a_checkpoint_of_the_method_stored_in_that_format(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-q modelopt --weights fp8: NVIDIA's FP8 export; a format the method does not read is
    refused naming the one it does."""
    assert answer(capsys, *FIT, "--quantization", "modelopt", "--weights", "fp8") \
        == answer(capsys, *FIT, "--weights", "fp8")
    err = refused(capsys, *FIT, "--quantization", "awq", "--weights", "fp8")
    assert "--quantization awq reads" in err and "--weights awq-int4" in err


def test_dtype_float16_runs_an_unquantized_checkpoint_in_fp16(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert answer(capsys, *FIT, "--dtype", "float16") == answer(capsys, *FIT, "--weights", "fp16")
    assert answer(capsys, *FIT, "--dtype", "half") == answer(capsys, *FIT, "--weights", "fp16")
    assert answer(capsys, *FIT, "--dtype", "bfloat16") == answer(capsys, *FIT)  # its own type
    assert answer(capsys, *FIT, "--dtype", "auto") == answer(capsys, *FIT)


def test_dtype_float16_on_an_mi100_prefills_at_its_fp16_peak_twice_its_bf16(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An MI100's record without its family (SGLang's ROCm build refuses CDNA 1; a record
    that names no family is taken at its word), so a serving engine sizes it."""
    from ridgeline.hardware import resolve_accelerator

    peaks = resolve_accelerator("mi100").peak_flops
    record = answer(capsys, "hardware", "mi100", "--json")
    record.pop("family")
    record["id"] = "my-mi100"  # the catalog's id is refused for a record of one's own
    card = tmp_path / "mi100.json"
    card.write_text(json.dumps(record))
    argv = ("prefill", "llama-3.1-8b", "--gpu-file", str(card), "--engine", "sglang",
            "--prompt-len", "4096", "--json")
    half, brain = answer(capsys, *argv, "--dtype", "float16"), answer(capsys, *argv)
    assert half["bound"] == brain["bound"] == "compute"
    assert float(brain["floor_time_s"]) / float(half["floor_time_s"]) == pytest.approx(
        peaks["fp16"] / peaks["bf16"])
    assert answer(capsys, *argv, "--weights", "fp16") == half


def test_dtype_is_refused_on_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    assert "GGUF" in refused(capsys, "prefill", "llama-3.1-8b", "--gpu", "mi100", "--engine",
                             "llama.cpp-rocm", "--prompt-len", "4096", "--dtype", "float16")


def test_dtype_leaves_a_quantized_format_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    fp8 = answer(capsys, *FIT, "--quantization", "fp8")
    assert answer(capsys, *FIT, "--quantization", "fp8", "--dtype", "bfloat16") == fp8


@pytest.mark.parametrize("argv", [("--dtype", "float32"), ("--dtype", "float"),
                                  ("--dtype", "bfloat17"),
                                  ("--dtype", "bfloat16", "--weights", "fp16")])
def test_a_dtype_ridgeline_cannot_serve_or_one_that_disagrees_is_refused(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "--dtype" in refused(capsys, *FIT, *argv)


# -- the longest request -------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--context-length", "--max-seq-len", "--max_seq_len"])
@pytest.mark.parametrize("argv", [
    ("fit", "llama-3.1-8b", "--gpu", "h100", "--json"),
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--context", "4k", "--json"),
    ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "40",
     "--json"),
])
def test_each_engines_name_for_the_longest_request_is_max_model_len(
        capsys: pytest.CaptureFixture[str], flag: str, argv: tuple[str, ...]) -> None:
    assert answer(capsys, *argv, flag, "8k") == answer(capsys, *argv, "--max-model-len", "8k")
    assert answer(capsys, *argv, flag, "8k") != answer(capsys, *argv, flag, "16k")


def _option(parser: argparse.ArgumentParser, command: str, dest: str) -> tuple[str, ...]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next((tuple(a.option_strings) for a in sub.choices[command]._actions
                 if a.dest == dest), ())


def test_every_command_that_takes_max_model_len_takes_the_same_spellings() -> None:
    parser = build_parser()
    commands = ("fit", "decode", "prefill", "simulate")
    spellings = {_option(parser, c, "max_model_len") for c in commands}
    assert len(spellings) == 1 and "--context-length" in spellings.pop()


@pytest.mark.parametrize("flag", ["-c", "--ctx-size"])
def test_llama_servers_c_is_read_as_its_slots_share(
        capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """-c 16384 -np 4: four slots of 4,096 tokens (tests/test_llamacpp_launch.py has more)."""
    argv = ("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine",
            "llama.cpp-cuda", "-np", "4", "--json")
    code, out, err = run_cli(capsys, *argv, flag, "16384")
    assert code == 0 and out == run_cli(capsys, *argv, "--max-model-len", "4096")[1], err


# -- vllm bench serve's load flags on simulate ---------------------------------------------
SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--json")


def test_vllm_bench_serves_names_for_the_load_are_simulates(
        capsys: pytest.CaptureFixture[str]) -> None:
    ours = answer(capsys, *SIM, "--rate", "6", "--num-requests", "60", "--input-len", "700",
                  "--output-len", "90")
    theirs = answer(capsys, *SIM, "--request-rate", "6", "--num-prompts", "60",
                    "--random-input-len", "700", "--random-output-len", "90")
    assert theirs == ours


def _without_load(report: dict[str, Any]) -> dict[str, Any]:
    settings = {k: v for k, v in report["settings"].items() if k not in ("load", "workload")}
    return {**report, "settings": settings}


def test_request_rate_inf_sends_every_request_at_time_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm bench serve's inf: all N at once, which is a closed loop of N users each sending
    one request; with --max-concurrency C, a closed loop of C."""
    burst = answer(capsys, *SIM, "--request-rate", "inf", "--num-prompts", "80")
    loop = answer(capsys, *SIM, "--concurrency", "80", "--num-requests", "80")
    assert _without_load(burst) == _without_load(loop)
    assert "time 0" in burst["settings"]["load"]
    capped = answer(capsys, *SIM, "--request-rate", "inf", "--max-concurrency", "8",
                    "--num-prompts", "80")
    assert capped == answer(capsys, *SIM, "--concurrency", "8", "--num-requests", "80")


def test_burstiness_alone_asks_for_gamma_arrivals_as_vllm_bench_serve_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pasted `vllm bench serve --request-rate 8 --burstiness 0.5` (whose arrivals are gamma
    at any burstiness) runs the gamma load `--arrival gamma --burstiness 0.5` runs, and the
    header names the burstiness, which Poisson's would not have."""
    load = ("--request-rate", "8", "--num-prompts", "40", "--burstiness", "0.5")
    pasted = answer(capsys, *SIM, *load)
    assert pasted == answer(capsys, *SIM, *load, "--arrival", "gamma")
    assert pasted != answer(capsys, *SIM, "--request-rate", "8", "--num-prompts", "40")
    assert "gamma arrivals at 8/s (burstiness 0.5)" in pasted["settings"]["load"]


@pytest.mark.parametrize("argv", [("--request-rate", "inf", "--arrival", "gamma"),
                                  ("--request-rate", "inf", "--max-concurrency", "4",
                                   "--burstiness", "2"),
                                  ("--request-rate", "-inf",)])
def test_a_load_vllm_bench_serve_would_send_otherwise_is_refused(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    refused(capsys, *SIM, *argv)


# -- model names and the launch line -------------------------------------------------------
VARIANTS = [(e.id, v.hf_id) for e in model_entries() for v in e.variants]


def test_the_catalog_records_instruct_variants_with_their_configs_as_source() -> None:
    assert ("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct") in VARIANTS
    for entry in model_entries():
        for variant in entry.variants:
            assert variant.source == f"https://huggingface.co/{variant.hf_id}/blob/main/config.json"


@pytest.mark.parametrize(("entry", "hf"), VARIANTS)
def test_an_instruct_repo_resolves_to_its_base_entry_by_id_and_by_name(
        entry: str, hf: str) -> None:
    base = resolve_model(entry)
    for name in (hf, hf.split("/")[1], hf.lower()):
        assert resolve_model(name) == base
        assert hub_id(name) == hf  # the Hub's casing, whatever the case typed


def test_a_repo_whose_config_differs_is_not_taken_for_its_base(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-32B-Instruct's config states 32,768 positions, the base model's 131,072: the
    default context would differ, so it is not a variant of qwen2.5-32b."""
    err = refused(capsys, "fit", "Qwen/Qwen2.5-32B-Instruct", "--gpu", "h100")
    assert "closest:" in err and "qwen2.5-32b" in err


@pytest.mark.usefixtures("plan_once", "unsimulated")  # the spellings ask one question
def test_plans_launch_line_serves_the_repo_named(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "{}", "--rate", "1", "--input-len", "500", "--output-len", "100",
            "--slo-ttft-ms", "3000", "--slo-tpot-ms", "100", "--gpus", "h200", "--max-gpus", "2")
    code, out, _ = run_cli(capsys, *(a.format("llama-3.2-3b") for a in argv))
    assert (code, out) == run_cli(capsys, *(a.format("llama-3.2-3b").replace(
        "--rate", "--request-rate") for a in argv))[:2]  # vllm bench serve's name for it
    for name, served in (("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
                         ("Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"),
                         ("llama-3.2-3b", "meta-llama/Llama-3.2-3B")):
        code, out, _ = run_cli(capsys, *(a.format(name) for a in argv))
        assert code == 0 and f"vllm serve {served} " in out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_plans_launch_line_pasted_into_fit_is_taken(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    c = Candidate("h100-sxm", 2, 1, "fp8", "fp8", 64, 64, 0.02, 0.1, 5.0, 1, 2.99, False, "",
                  (1.0, 1.0), max_num_batched_tokens=4096)
    line = command_line(engine, "meta-llama/Llama-3.1-70B-Instruct", c, 32768)
    words = shlex.split(line)
    flags = words[words.index("meta-llama/Llama-3.1-70B-Instruct") + 1:]
    pasted = answer(capsys, "fit", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100",
                    "--engine", engine, *flags, "--json")
    assert pasted == answer(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2",
                            "--engine", engine, "-q", "fp8", "--kv-dtype", "fp8",
                            "--max-model-len", "32768", "--max-num-seqs", "64",
                            "--max-num-batched-tokens", "4096",
                            "--gpu-memory-utilization", flags[flags.index(
                                "--gpu-memory-utilization" if engine == "vllm"
                                else "--mem-fraction-static") + 1], "--json")


def compressed_tensors_fp8_checkpoint(tmp_path: Path) -> str:
    """Llama 3.1 8B's config with a compressed-tensors FP8 quantization_config (LLM Compressor's
    FP8_DYNAMIC: per-channel 8-bit float weights)."""
    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "float",
                                                  "strategy": "channel"}}}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


ENGINE_ONLY = sorted((m, row.engines[0]) for m, row in engine_methods().items()
                     if len(row.engines) == 1)


@pytest.mark.parametrize(("method", "engine"), ENGINE_ONLY)
def test_a_method_only_one_engine_has_is_refused_on_the_other(
        capsys: pytest.CaptureFixture[str], method: str, engine: str) -> None:
    """`vllm serve … --quantization w8a8_fp8` is refused by vLLM's argument parser (the method
    is SGLang's); SGLang has no ptpc_fp8. The refusal names the engine that has it."""
    other = "sglang" if engine == "vllm" else "vllm"
    err = refused(capsys, *FIT, "--engine", other, "-q", method)
    assert f"--engine {engine}" in err
    fit = MOE_FIT if method == "experts_int8" else FIT  # refused on a dense model
    answer(capsys, *fit, "--engine", engine, "--weights", engine_methods()[method].format)


def test_the_sglang_only_methods_are_w8a8_and_vllms_ptpc_fp8_is_its_own() -> None:
    assert engine_methods()["w8a8_fp8"].engines == ("sglang",)
    assert engine_methods()["w8a8_int8"].engines == ("sglang",)
    assert engine_methods()["ptpc_fp8"].engines == ("vllm",)
    assert engine_methods()["fp8"].engines == ("vllm", "sglang")


def test_a_refused_methods_hint_names_only_a_method_the_engine_has(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A compressed-tensors FP8 checkpoint with -q fp8: SGLang's own method for it is w8a8_fp8
    (compatible_quantization_methods); vLLM has none, so its hint is to leave the flag out."""
    argv = ("fit", compressed_tensors_fp8_checkpoint(tmp_path), "--gpu", "h100",
            "--max-model-len", "8k", "--json")
    vllm = refused(capsys, *argv, "--engine", "vllm", "-q", "fp8")
    assert "w8a8" not in vllm and "leave out --quantization" in vllm
    sglang = refused(capsys, *argv, "--engine", "sglang", "-q", "fp8")
    assert "--quantization w8a8_fp8" in sglang


def test_sglangs_w8a8_fp8_on_block_fp8_is_refused_as_a_layout_it_cannot_load(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """SGLang takes -q w8a8_fp8 on any compressed-tensors checkpoint (no name mismatch), but
    W8A8Fp8Config holds one scale a row: a checkpoint in 128x128 blocks fails to load. Without
    the flag its compressed_tensors method reads the blocks, and the fit is answered."""
    path = compressed_tensors_fp8_checkpoint(tmp_path)
    config = json.loads(Path(path).read_text())
    group = config["quantization_config"]["config_groups"]["group_0"]
    group["weights"].update(strategy="block", block_structure=[128, 128])
    Path(path).write_text(json.dumps(config))
    argv = ("fit", path, "--gpu", "h100", "--max-model-len", "8k", "--json", "--engine",
            "sglang")
    err = refused(capsys, *argv, "-q", "w8a8_fp8")
    assert "does not match" not in err and "fails loading its weights" in err
    assert engine_methods()["w8a8_fp8"].layout in err and "leave out --quantization" in err
    assert answer(capsys, *argv)  # as stored
    (tmp_path / "channel").mkdir()
    per_channel = compressed_tensors_fp8_checkpoint(tmp_path / "channel")  # the method's own
    assert answer(capsys, "fit", per_channel, "--gpu", "h100", "--max-model-len", "8k",
                  "--json", "--engine", "sglang", "-q", "w8a8_fp8")


@pytest.mark.parametrize("engine", ["trtllm", "llama.cpp-cuda"])
def test_a_method_one_engine_has_is_named_as_that_engines_alone(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    chosen = engine_methods()["ptpc_fp8"]
    assert chosen.engines == ("vllm",)
    err = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                  "-q", "ptpc_fp8")
    assert "--quantization ptpc_fp8 is vLLM's;" in err and "SGLang" not in err


@pytest.mark.parametrize(("engine", "method"), [("vllm", "fbgemm_fp8"), ("sglang", "w8a8_int8")])
def test_a_16_bit_refusal_hints_only_the_engines_own_on_load_methods(
        capsys: pytest.CaptureFixture[str], engine: str, method: str) -> None:
    err = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                  "-q", method)
    hinted = err.split("(only ")[1].split(" quantize")[0].split(", ")
    assert hinted and all(engine in engine_methods()[m].engines for m in hinted)
    other = "SGLang" if engine == "vllm" else "vLLM"
    assert other not in err
    for hint in hinted:  # each one hinted runs there
        assert run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                       "-q", hint, "--batch", "1")[0] == 0


@pytest.mark.parametrize(("dtype", "spelled"), [
    ("bf16", "the engines spell bf16 bfloat16"), ("fp16", "the engines spell fp16 float16 or half"),
    ("fp8", "is --quantization or --weights")])
def test_dtype_in_ridgelines_spelling_names_the_engines_one(
        capsys: pytest.CaptureFixture[str], dtype: str, spelled: str) -> None:
    """--dtype bf16 was refused with the list alone; vLLM and SGLang refuse it too (their
    choices are torch's names), so the refusal says which of them it means."""
    assert spelled in refused(capsys, "decode", "llama-3.2-1b", "--gpu", "h100", "--dtype", dtype)


# -- a flag the command spells otherwise --------------------------------------------------
@pytest.mark.parametrize(("argv", "said"), [
    (("kv", "llama-3.2-1b", "--gpu", "h100", "--max-model-len", "8192"),
     "kv takes no --max-model-len: give the same figure as --context"),
    (("utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.2-1b",
      "--max-model-len=8192"), "utilization takes no --max-model-len (a ceiling, not the length "
                               "each request holds); its --context is the tokens each running"),
    (("prefill", "llama-3.2-1b", "--gpu", "h100", "--input-len", "100"),
     "prefill takes no --input-len: give the same figure as --prompt-len"),
    (("simulate", "llama-3.2-1b", "--gpu", "h100", "--rate", "1", "--prompt-len", "100"),
     "simulate takes no --prompt-len: give the same figure as --input-len"),
    (("fit", "llama-3.2-1b", "--gpu", "h100", "--context", "8192"),
     "fit takes the conversation's length as --max-model-len"),
    (("plan", "llama-3.2-1b", "--rate", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
      "-q", "fp8"), "plan takes no -q: it searches"),
    (("plan", "llama-3.2-1b", "--rate", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
      "-tp", "2"), "plan takes no -tp: it searches"),
    (("page", "--kv-dtype", "fp8", "--json"), "page takes its KV dtypes as --kv-dtypes"),
    (("page", "--num-gpus", "2", "--json"), "page takes its GPU counts as --counts"),
    (("page", "-tp", "2", "--json"), "page takes its GPU counts as --counts"),
    (("roofline", "--gpu", "h100", "--context", "8k"),
     "--context is a flag of `kv`, `decode`"),
])
def test_a_flag_the_command_spells_otherwise_is_named_in_the_refusal(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], said: str) -> None:
    """kv --max-model-len 8192 said only that --context is required; plan -q,
    simulate --prompt-len, roofline --context only 'unrecognized arguments'."""
    err = refused(capsys, *argv)
    assert said in err and f"(see `ridgeline {argv[0]} --help`)" in err


@pytest.mark.parametrize("argv", [
    ("observe", "tests/fixtures/vllm_metrics.txt", "--model", "llama-3.1-70b", "--gpu", "h100",
     "--max-model-len", "8192"),
    ("utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.2-1b",
     "--context-length", "8192"),
    ("amdahl", "--model", "llama-3.2-1b", "--gpu", "h100", "--max-seq-len", "8192")])
def test_a_max_model_len_is_not_offered_as_a_typical_length(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """observe said "takes --max-model-len's figure as --context (the typical tokens per
    sequence)": a launch's max_model_len is a ceiling, and pasted as the typical length it
    prices every running request at the longest. The hint says the flag is not taken, and
    what --context is instead."""
    err = refused(capsys, *argv)
    flag = argv[-2]
    assert f"{argv[0]} takes no {flag} (a ceiling" in err
    assert "figure as --context" not in err and "its --context is the" in err
    assert "--context" in run_cli(capsys, argv[0], "--help")[1]  # the flag named exists


def test_a_flag_no_command_takes_is_refused_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "decode", "llama-3.2-1b", "--gpu", "h100", "--foo", "3")
    assert err.startswith("ridgeline: error: unrecognized arguments: --foo 3 (see")


@pytest.mark.parametrize("argv", [
    ("attention", "llama-3.2-1b", "--context", "64k"),
    ("observe", "http://localhost:8000", "llama-3.2-1b", "--gpu", "h100"),
])
def test_a_model_given_first_to_a_command_that_takes_it_as_a_flag_is_pointed_there(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """decode, fit, kv … take MODEL first; amdahl, attention and observe take --model, and a
    model typed first was 'unrecognized' or '--model is required'. (roofline and utilization
    take it first too: tests/test_cli_model_arg.py.)"""
    assert f"{argv[0]} takes the model as --model llama-3.2-1b" in refused(capsys, *argv)
    assert "takes the model" not in refused(capsys, "roofline", "--gpu", "h100", "8")


def test_an_unknown_flag_before_any_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unrecognized arguments: --foo" in refused(capsys, "--foo")


# -- a method below the card's compute capability -------------------------------------------
@pytest.mark.parametrize("command", [("decode",), ("fit", "--max-model-len", "8k")])
def test_a_checkpoint_whose_own_method_vllm_refuses_on_the_card_is_refused_as_stored(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """Qwen3.6-35B-A3B-NVFP4 is ModelOpt MIXED_PRECISION, which vLLM reads with
    modelopt_mixed (ModelOptMixedPrecisionConfig.get_min_capability: 89 to 0.23, 75 from 0.24,
    FP4 and FP8 Marlin): on an A100 (8.0) vLLM 0.23 stops at start-up ('The quantization method
    modelopt_mixed is not supported for the current GPU'), so there is no throughput to price;
    on an L40S (8.9) or H100 it runs, and on an A100 from 0.24 (the newest too)."""
    from ridgeline.engine_quantization import VLLM_EARLIER_FLOORS

    argv = (command[0], "qwen3.6-35b-a3b", *command[1:], "--json")
    lowered = VLLM_EARLIER_FLOORS["modelopt_mixed"][0]
    old = ("--engine-version", "0.23")
    err = refused(capsys, *argv, "--gpu", "a100", *old)
    assert "modelopt_mixed" in err and "a100-sxm-80gb" in err and "vLLM 0.23" in err
    assert "compute capability 8.9" in err and "8.0 to 8.7" in err
    assert f"--engine-version {lowered} or later" in err
    assert "modelopt_mixed" in refused(capsys, *argv, "--gpu", "a10", *old)
    for gpu in ("l40s", "h100"):
        answer(capsys, *argv, "--gpu", gpu, *old)
    for gpu in ("a100", "a10"):
        answer(capsys, *argv, "--gpu", gpu, "--engine-version", lowered)
        answer(capsys, *argv, "--gpu", gpu)
    # the same as --quantization names it; --weights still sizes any format (the what-if flag)
    assert "--quantization modelopt_mixed needs compute capability 8.9" in refused(
        capsys, *argv, "--gpu", "a100", "-q", "modelopt_mixed", *old)
    answer(capsys, *argv, "--gpu", "a100", "-q", "modelopt_mixed")
    answer(capsys, *argv, "--gpu", "a100", "--weights", "nvfp4", *old)
    # SGLang reads it with modelopt_mixed from 0.5.15 (w4afp8 before, on any card), whose
    # floor is its NVFP4 one, 8.0 from 0.5.13 (FP4 Marlin); an A100 runs the export's FP8
    # layers from 0.5.17 (FP8 Marlin): refused there under 0.5.16, naming SGLang's method
    sglang = ("--engine", "sglang", "--engine-version")
    for gpu in ("a100", "h100", "b200"):
        assert "SGLang 0.5.12 does not serve" in refused(capsys, *argv, "--gpu", gpu, *sglang,
                                                         "0.5.12")
    assert "SGLang's modelopt_mixed" in refused(capsys, *argv, "--gpu", "a100", *sglang, "0.5.16")
    answer(capsys, *argv, "--gpu", "h100", *sglang, "0.5.16")
    for gpu in ("a100", "h100", "b200"):
        answer(capsys, *argv, "--gpu", gpu, "--engine", "sglang")


def test_an_fp8_checkpoint_runs_on_an_a100_through_fp8_marlin(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's Fp8Config serves FP8 weight-only (W8A16, FP8 Marlin) below compute capability
    8.9, so an fp8 checkpoint, as stored or with --quantization fp8, is priced on an A100."""
    argv = ("decode", "qwen3-235b-a22b-fp8", "--gpu", "a100", "--num-gpus", "8", "--json")
    assert answer(capsys, *argv) == answer(capsys, *argv, "-q", "fp8")
    answer(capsys, "decode", "llama-3.1-8b", "--gpu", "a100", "-q", "fp8", "--json")


def test_capability_floors_are_vllms_per_method_and_nvidias_per_family() -> None:
    """experts_int8 (80) on a T4 (7.5) and V100 (7.0), modelopt (89 to vLLM 0.26) on any
    Ampere card, from 0.27 (80) on a T4 only, modelopt_fp4 (75) on a V100 but not a T4 (80
    before 0.14: a T4 too); nothing off NVIDIA or for fp8."""
    from ridgeline.engine_quantization import capability_shortfall
    from ridgeline.hardware import resolve_accelerator

    def short(method: str, gpu: str, version: str | None = None) -> bool:
        return bool(capability_shortfall(method, resolve_accelerator(gpu), "vllm", version))

    assert short("experts_int8", "t4") and short("experts_int8", "v100")
    assert not short("experts_int8", "a100")
    assert short("modelopt", "a100", "0.26") and short("modelopt", "rtx-3090", "0.26")
    assert not short("modelopt", "a100") and short("modelopt", "t4")
    assert not short("modelopt", "l40s", "0.26") and not short("modelopt", "b200", "0.26")
    assert short("modelopt_fp4", "v100") and not short("modelopt_fp4", "t4")
    assert short("modelopt_fp4", "t4", "0.13") and not short("modelopt_fp4", "t4", "0.14")
    assert not short("fp8", "t4") and not short("modelopt_mixed", "mi300x")


@pytest.mark.usefixtures("unsimulated")
def test_plan_keeps_the_cards_a_checkpoint_runs_on_and_refuses_it_on_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A card below modelopt_mixed's compute capability (vLLM 0.23: 8.9) drops out of the
    plan, first or not; with no other card the plan is refused in one line. The newest
    release (7.5) keeps the A100, the cheapest."""
    argv = ("plan", "qwen3.6-35b-a3b", "--rate", "2", "--slo-ttft-ms", "2000",
            "--slo-tpot-ms", "100", "--max-gpus", "2", "--workers", "1", "--gpus")
    old = ("--engine-version", "0.23")
    code, out, err = run_cli(capsys, *argv, "a100,h100", *old)
    searched = [line for line in out.splitlines()
                if not line.startswith(("left out:", "cards compared:"))]
    assert code == 0 and "h100-sxm" in out and not any("a100" in s for s in searched), err
    cards = next(line for line in out.splitlines() if line.startswith("cards compared:"))
    assert "a100-sxm-80gb: left out (above)" in cards  # not "no layout fits"
    # the card left out is said, with the method's floor (search_space.left_out)
    said = [line for line in out.splitlines() if line.startswith("left out: a100")]
    assert len(said) == 1 and "modelopt_mixed" in said[0]
    assert "modelopt_mixed" in refused(capsys, *argv, "a100,a10", *old)
    code, out, err = run_cli(capsys, *argv, "a100,h100")
    assert code == 0 and "a100" in out, err

"""The public API is what __init__ re-exports; a change to it is deliberate. docs/api.md's
example runs here, and its figures are the CLI's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest

import ridgeline
from ridgeline import (
    Deployment,
    EngineSettings,
    InputError,
    decode_floor,
    fit_report,
    kv_pool,
    prefill_floor,
    resolve_accelerator,
    resolve_model,
)
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"


def test_public_names_are_pinned() -> None:
    assert sorted(ridgeline.__all__) == [
        "Accelerator", "CLEARS_RIDGE", "COMPUTE_BOUND", "CacheTransceiver", "DOES_NOT_FIT",
        "DecodeFloor", "Deployment", "EPLBSettings", "EngineSettings", "EngineSpec",
        "FitReport", "HOST_LINK_BOUND", "HOST_MEMORY_BOUND", "InputError", "KVPool", "Lever",
        "LoRASettings", "MEMORY_BOUND", "MMLimits", "ModelSpec", "PrefillFloor",
        "SGLangLoRASettings", "UNDER_RIDGE", "__version__", "decode_floor", "fit_report",
        "kv_pool", "prefill_floor", "resolve_accelerator", "resolve_model", "ridge_point",
    ]
    for name in ridgeline.__all__:
        assert hasattr(ridgeline, name)
    with pytest.raises(AttributeError, match="no attribute 'kv_pol'"):
        ridgeline.kv_pol  # noqa: B018


def test_import_ridgeline_leaves_the_pool_and_fit_modules_for_first_use() -> None:
    """kv_pool and fit_report are exported lazily: a bare import loads neither's module,
    reading the name loads it."""
    code = ("import sys, ridgeline; a = {'ridgeline.memory', 'ridgeline.reports.fit'} & "
            "set(sys.modules); ridgeline.fit_report; b = 'ridgeline.reports.fit' in "
            "sys.modules; print(sorted(a), b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT / "src")}).stdout
    assert out.split() == ["[]", "True"]


def test_the_package_says_it_is_typed() -> None:
    assert (Path(ridgeline.__file__).parent / "py.typed").is_file()


def _doc_block(kind: str) -> str:
    found = re.search(rf"```{kind}\n(.*?)```", API_DOC.read_text(), re.S)
    assert found, f"docs/api.md has no {kind} block"
    return found.group(1)


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict = json.loads(out)
    return data


def test_api_doc_example_prints_the_clis_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's example prints what the doc says it prints, and each figure is the one
    roofline, fit and decode give with --json for the same model, card and engine."""
    printed = StringIO()
    with redirect_stdout(printed):
        exec(compile(_doc_block("python"), str(API_DOC), "exec"), {})
    assert printed.getvalue() == _doc_block("text")

    roof = _cli_json(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-8b")
    fit = _cli_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
                    "--engine", "vllm")
    fit = fit.get("results", [fit])[0]
    small = _cli_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                      "--batch", "32", "--context", "2000")["points"][0]
    big = _cli_json(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--engine", "vllm",
                    "--weights", "fp8", "--batch", "32", "--context", "2000")["points"][0]
    assert big["per_user_tok_s"] is None and big["floor_per_user_tok_s"] is None
    expected = [
        f"ridge: {roof['ridge_flop_per_byte']:.1f} FLOP/byte, "
        f"batch {roof['points'][0]['batch_to_ridge']:.1f}",
        f"KV pool: {fit['tokens']:,} tokens in {fit['blocks_per_gpu']:,} blocks of "
        f"{fit['block_size']}",
        f"decode: {small['floor_step_time_s'] * 1e3:.2f} ms a step, "
        f"{small['floor_per_user_tok_s']:.1f} "
        f"tok/s per user, fits: {small['fits']}",
        f"fit: {fit['verdict']}, {fit['conversations']} conversations of 8,192 tokens",
        f"70B fp8, batch 32: fits: {big['fits']}, tok/s per user: "
        f"{big['floor_per_user_tok_s']}",
        f"  {big['expected_none_reason']}",
    ]
    assert printed.getvalue().splitlines() == expected


def test_readme_python_lines_are_the_api_docs_example() -> None:
    """README's Python snippet is a part of docs/api.md's example, which the test above runs."""
    readme = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert readme
    example = _doc_block("python").splitlines()
    lines = [line for line in readme.group(1).splitlines() if line.strip()]
    assert lines and all(line in example for line in lines)


H100 = resolve_accelerator("h100")
LLAMA_8B = resolve_model("llama-3.1-8b")


@pytest.mark.parametrize(("spelling", "engine"), [
    ("vLLM", "vllm"), ("SGLang", "sglang"), ("tensorrt-llm", "trtllm")])
def test_deployment_reads_an_engine_as_the_cli_does(
        capsys: pytest.CaptureFixture[str], spelling: str, engine: str) -> None:
    """Any spelling --engine takes builds that engine's deployment, its pool the one fit
    gives (vLLM: 7,555 blocks of 64, not a llama.cpp-style pool of 1-token cells), and
    fit_report runs on it."""
    dep = Deployment.build(LLAMA_8B, H100, engine=spelling)
    assert dep.engine == engine
    pool = kv_pool(dep, EngineSettings(max_model_len=8192))
    cli = _cli_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
                    "--engine", spelling)
    cli = cli.get("results", [cli])[0]
    assert (cli["engine"], cli["blocks_per_gpu"], cli["block_size"]) == (
        engine, pool.blocks, pool.block_size)
    assert fit_report(dep, 8192).conversations == cli["conversations"]


def test_an_unknown_engine_is_refused_naming_the_nearest() -> None:
    with pytest.raises(InputError, match=r"unknown engine 'vlm' \(did you mean 'vllm'\?\); "
                       "known: vllm, sglang"):
        Deployment.build(LLAMA_8B, H100, engine="vlm")
    with pytest.raises(InputError, match="unknown engine 'vlm'"):
        replace(Deployment.build(LLAMA_8B, H100), engine="vlm")
    assert replace(Deployment.build(LLAMA_8B, H100), engine="SGLang").engine == "sglang"
    assert Deployment.build(LLAMA_8B, H100, engine="llama.cpp").engine == "llama.cpp-cuda"


def test_counts_take_any_whole_number_and_refuse_a_fraction() -> None:
    """numpy's int64 (an np.arange sweep) and 8.0 are a batch of 8; 2000.5 tokens is refused."""
    np = pytest.importorskip("numpy")
    dep = Deployment.build(LLAMA_8B, H100)
    eight = decode_floor(dep, 8, 2000)
    for batch, context in ((np.int64(8), 2000), (8.0, 2000), (8, np.int32(2000)),
                           (8, np.float64(2000.0))):
        floor = decode_floor(dep, batch, context)
        assert (floor.batch, floor.context, floor.step_time_s) == (8, 2000, eight.step_time_s)
        assert type(floor.batch) is int
    assert prefill_floor(dep, np.int64(512)).time_s == prefill_floor(dep, 512).time_s
    for batch, context, message in (
            (8, 2000.5, "context length must be a whole number of tokens, got 2000.5"),
            (8.5, 2000, "batch must be a whole number, got 8.5"),
            (True, 2000, "batch must be a whole number, got True"),
            ("8", 2000, "batch must be a whole number, got '8'"),
            (np.int64(0), 2000, "batch must be positive")):
        with pytest.raises(InputError, match=re.escape(message)):
            decode_floor(dep, batch, context)
    with pytest.raises(InputError, match="prompt length must be a whole number of tokens"):
        prefill_floor(dep, 511.5)


def test_gpu_counts_take_any_whole_number_as_batch_and_context_do() -> None:
    """numpy's int64 GPUs, stages and ranks are that many (a sweep over np.arange), stored as
    ints; 2.5 GPUs is refused naming the count, not as an unhelpful type error."""
    np = pytest.importorskip("numpy")
    r1 = resolve_model("deepseek-v3")
    plain = Deployment.build(LLAMA_8B, H100, num_gpus=4, pipeline_parallel_size=2)
    numpy_sized = Deployment.build(LLAMA_8B, H100, num_gpus=np.int64(4),
                                   pipeline_parallel_size=np.int64(2))
    assert numpy_sized == plain and type(numpy_sized.tensor_parallel_size) is int
    assert Deployment.build(LLAMA_8B, H100, num_gpus=2.0) == Deployment.build(LLAMA_8B, H100,
                                                                             num_gpus=2)
    ranks = Deployment.build(r1, H100, "fp8", num_gpus=8, engine="vllm",
                             data_parallel_size=np.int64(2), expert_parallel=True)
    assert ranks.data_parallel_size == 2 and type(ranks.data_parallel_size) is int
    direct = replace(plain, tensor_parallel_size=np.int64(2))
    assert direct == plain and type(direct.tensor_parallel_size) is int
    for given, message in ((dict(num_gpus=2.5), "number of GPUs must be a whole number, got 2.5"),
                           (dict(num_gpus=np.int64(0)), "number of GPUs must be positive"),
                           (dict(pipeline_parallel_size=True),
                            "pipeline_parallel_size must be a whole number, got True")):
        with pytest.raises(InputError, match=re.escape(message)):
            Deployment.build(LLAMA_8B, H100, **given)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="tensor_parallel_size must be a whole number"):
        replace(plain, tensor_parallel_size=1.5)


def test_a_floor_that_does_not_fit_says_so_as_decode_json_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on one H100 at batch 32 × 2,000: the floor keeps its 27.5 ms step
    (36.4 tok/s of arithmetic) but is flagged: fits False, the speeds None, as decode's JSON
    nulls them, and does_not_fit the JSON's reason."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), H100, weights="fp8", engine="vllm")
    floor = decode_floor(dep, 32, 2000)
    point = _cli_json(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                      "--batch", "32", "--context", "2000")["points"][0]
    assert (floor.fits, floor.per_user_tok_s_if_fits, floor.aggregate_tok_s_if_fits) == (
        point["fits"], point["floor_per_user_tok_s"], point["floor_aggregate_tok_s"]) \
        == (False, None, None)
    assert floor.does_not_fit == point["expected_none_reason"]
    assert floor.step_time_s == point["floor_step_time_s"]
    assert floor.per_user_tok_s == 1 / floor.step_time_s
    fitting = decode_floor(dep, 1, 2000)
    assert fitting.fits and fitting.does_not_fit == ""
    assert fitting.per_user_tok_s_if_fits == fitting.per_user_tok_s


def test_class_docstrings_worked_numbers() -> None:
    """The figures help(ridgeline.X) shows: Llama-3.1-8B's 32 layers and 8.03 B parameters;
    an H100 SXM's 989.4 TFLOP/s over 3.35 TB/s, a ridge of 295 FLOP/byte, 80 GiB; the bf16
    deployment's 16.06 GB of weights, its ridge reached at batch 296; decode_floor's 70B fp8
    steps, 21.3 ms at batch 1 and 27.5 ms at batch 32."""
    import math

    from ridgeline import ridge_point
    from ridgeline.params import count_params
    from ridgeline.units import GB, GIB

    params = count_params(LLAMA_8B).by_category
    assert (LLAMA_8B.num_layers, round(sum(params.values()) / 1e9, 2),
            round(params["lm_head"] / 1e9, 2)) == (32, 8.03, 0.53)
    ridge = ridge_point(H100.peak("bf16"), H100.memory_bandwidth_bytes_per_s)
    assert (round(H100.peak("bf16") / 1e12, 1), H100.memory_bandwidth_bytes_per_s / 1e12,
            round(ridge), H100.memory_bytes / GIB) == (989.4, 3.35, 295, 80)
    dep = Deployment.build(LLAMA_8B, H100, engine="vllm")
    assert (round(dep.weight_bytes / GB, 2), round(dep.dense_ridge_flop_per_byte),
            math.ceil(dep.dense_ridge_batch)) == (16.06, 295, 296)
    big = Deployment.build(resolve_model("llama-3.1-70b"), H100, weights="fp8", engine="vllm")
    one, many = decode_floor(big, 1, 2000), decode_floor(big, 32, 2000)
    assert (round(one.step_time_s * 1e3, 1), round(one.per_user_tok_s),
            round(many.step_time_s * 1e3, 1)) == (21.3, 47, 27.5)

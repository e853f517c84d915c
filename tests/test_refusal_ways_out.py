"""Refusals name ways out the reader can take: a misspelt engine its nearest spelling ('sglng'
named none, among nine engines), TensorRT-LLM on a T4 SGLang too (whose floor, compute
capability 7.5, a T4 meets), and a measurements row the engines its engine column can name
(a CSV row cannot act on 'try --engine vllm')."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline.engine_platforms import below_engine_floor, engine_floor_problem
from ridgeline.engines import engine_id
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from tests.conftest import refused_line, run_cli

PLAN = ("--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")


@pytest.mark.parametrize(("typed", "meant"), [("sglng", "sglang"), ("trtlm", "trtllm"),
                                              ("vlm", "vllm")])
def test_a_misspelt_engine_names_the_nearest_and_it_runs(
        capsys: pytest.CaptureFixture[str], typed: str, meant: str) -> None:
    with pytest.raises(InputError, match=f"did you mean '{meant}'"):
        engine_id(typed)
    line = refused_line(capsys, "fit", "llama-3.2-1b", "--gpu", "h100", "--engine", typed)
    named = line.split("did you mean '")[1].split("'")[0]
    assert engine_id(named) == meant
    code, _, err = run_cli(capsys, "fit", "llama-3.2-1b", "--gpu", "h100", "--engine", named)
    assert code == 0, err
    # plan's --engine is an argparse choice: its refusal names the nearest choice too
    line = refused_line(capsys, "plan", "llama-3.2-1b", "--engine", typed, *PLAN)
    assert line.split("; did you mean ")[1].split("?")[0] == meant


def test_an_engine_like_none_names_none(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("fit", "llama-3.2-1b", "--gpu", "h100"), ("plan", "llama-3.2-1b", *PLAN)):
        assert "did you mean" not in refused_line(capsys, *argv, "--engine", "xyz")


def ways_out(line: str) -> list[str]:
    """The engines a floor's refusal names after 'try' ('--engine vllm, or --engine x')."""
    return [w.split()[0].rstrip(",") for w in line.split("; try ")[1].split("--engine ")[1:]]


@pytest.mark.parametrize("gpu", ["t4", "v100"])
def test_trtllms_floor_names_sglang_where_sglang_runs_the_card(
        capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    line = refused_line(capsys, "fit", "llama-3.2-1b", "--gpu", gpu, "--engine", "trtllm",
                        "--max-model-len", "4096")
    acc = resolve_accelerator(gpu)
    assert ("sglang" in ways_out(line)) == (not below_engine_floor("sglang", acc))
    for engine in ways_out(line):  # each way named, followed, fits (vLLM: its release named)
        version = ("--engine-version", line.split("--engine-version ")[1].split()[0]) \
            if engine == "vllm" and "--engine-version" in line else ()
        code, _, err = run_cli(capsys, "fit", "llama-3.2-1b", "--gpu", gpu, "--engine",
                               engine, *version, "--max-model-len", "4096")
        assert code == 0, (engine, err)


HEADER = ("id,model,weights_dtype,kv_dtype,gpu,num_gpus,tp,batch,input_len,output_len,"
          "context_len,metric,value,unit,engine,source,notes")


def row(row_id: str, gpu: str, engine: str, notes: str = "n") -> str:
    return (f"{row_id},meta-llama/Llama-3.2-1B,bf16,bf16,{gpu},1,1,8,512,128,640,"
            f"decode_tok_s_per_user,50,tok/s,{engine},s,{notes}")


@pytest.mark.parametrize(("gpu", "engine"), [("t4", "trtllm"), ("v100", "sglang")])
def test_a_rows_floor_reason_names_engines_for_its_engine_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: str, engine: str) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([HEADER, row("R", gpu, engine), row("H", "h100", "vllm")]) + "\n")
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err
    reason = next(line for line in out.splitlines() if line.strip().startswith("R:"))
    assert "--engine" not in reason and "try " not in reason
    named = ways_out(engine_floor_problem(engine, resolve_accelerator(gpu)))
    column = reason.split("for the engine column: ")[1]
    assert [w for w in named if w in column] == named
    # each engine it names, in the engine column (a release as its notes give it), is priced
    release = reason.split("'engine: v")[1].split("'")[0] if "'engine: v" in reason else ""
    rows = [row(f"W{i}", gpu, way, f"engine: v{release}" if way == "vllm" and release else "n")
            for i, way in enumerate(named)]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0 and "no prediction" not in out, out

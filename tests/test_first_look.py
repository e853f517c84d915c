"""A serving engineer's first look at the less-trodden commands: `measure --help` states the
defaults it runs with and `--rated-gpu` reads the matmul probes against their peaks too,
`amdahl --help` says which flags apply only with --model, `observe --json` names the
deployment, ridge batch and pool its text names, `calibrate` prints its prefill cost per layer
with its unit, `validate` names the batch a batchless throughput row ran at, `roofline` gives a
recurrent state's size as `kv` does, and `prefix --explain` speaks the engine's own word."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from ridgeline.cli import build_parser
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.prefix import prefix_reuse
from ridgeline.reports.validation import CalibrationReport
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures"


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _help(parser: argparse.ArgumentParser, flag: str) -> str:
    action = next(a for a in parser._actions if flag in a.option_strings)
    return " ".join((action.help or "").split())


def test_measure_help_names_each_default_it_runs_with() -> None:
    """`ridgeline measure -o rows.csv` on a GPU machine measures the CPU (--device's default)
    and Llama-3.2-1B (--model's): each default, read off the parser, is in its flag's help."""
    measure = _command("measure")
    for action in measure._actions:
        if isinstance(action.default, str) and action.default != argparse.SUPPRESS:
            assert action.default in (action.help or ""), action.option_strings
    assert {"--device", "--model"} <= {a.option_strings[0] for a in measure._actions
                                       if a.default in ("cpu", "llama-3.2-1b")}
    assert "a GPU is measured only when named" in _help(measure, "--device")


@pytest.mark.parametrize("flag, value", [
    ("--gpu", "h100"), ("--num-gpus", "2"), ("--weights", "fp8"), ("--kv-dtype", "fp8"),
    ("--engine", "sglang"), ("--profile", "p.json"), ("--op", "weights"), ("--batch", "8"),
    ("--context", "4000"),
])
def test_amdahls_flags_that_need_a_model_say_so_in_their_help(
        capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    """Each flag --fraction refuses (it applies only to a model's step) says 'with --model'."""
    code, _, err = run_cli(capsys, "amdahl", "--fraction", "0.5", "--speedup", "2", flag, value)
    assert code == 2 and f"{flag} applies only with --model" in err
    assert _help(_command("amdahl"), flag).startswith("with --model:")


def test_observe_json_names_the_deployment_ridge_batch_and_pool_its_text_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 under vLLM: the text's 'ridge batch of 296 … on 1 x h100-sxm'
    and '27,975 blocks ÷ 72 a sequence' are in --json too, each the division it comes from."""
    argv = ("observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
            "--gpu", "h100")
    code, text, _ = run_cli(capsys, *argv)
    assert code == 0
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    got = json.loads(out)
    assert (got["model"], got["accelerator"], got["num_gpus"], got["engine"]) == \
        ("llama-3.1-8b", "h100-sxm", 1, "vllm")
    h100 = resolve_accelerator("h100")
    ridge = h100.peak_flops["bf16"] / h100.memory_bandwidth_bytes_per_s  # 295.3
    assert got["ridge_flop_per_byte"] == pytest.approx(ridge)
    # bf16 weights: 2 FLOP × batch ÷ 2 B reaches the ridge at batch = ridge, the first whole 296
    assert got["first_whole_batch_to_ridge"] == math.ceil(ridge) == 296
    assert f"a ridge batch of {got['first_whole_batch_to_ridge']:,}" in text and " on 1 x h100-sxm" in text
    blocks, tokens, context = (got["pool_blocks_modelled"], got["pool_tokens_modelled"],
                               got["context_len"])
    block = tokens // blocks  # vLLM's block_size: 64 from v0.34
    assert tokens == blocks * block and block == 64
    a_sequence = math.ceil(context / block)
    assert got["engine_max_batch"] == blocks // a_sequence
    assert f"{blocks:,} blocks ÷ {a_sequence:,} a sequence" in text


def test_calibrate_prints_the_prefill_cost_per_layer_with_its_unit() -> None:
    """The profile's line read '0.0 µs/layer (531.9 in a prefill step)': the second figure is
    µs per layer too, and says so."""
    profile = profile_for("vllm")
    assert profile.prefill_layer_overhead_s is not None
    line = CalibrationReport({"vllm": profile}, (), (), "p.json").text_lines()[1]
    assert f"({profile.prefill_layer_overhead_s * 1e6:,.1f} µs/layer in a prefill step)" in line


def test_prefix_explain_names_sglangs_page_size_not_vllms_block_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang matches pages of 1 token: 35 of 37 tokens shared, at most 37 − 1 reusable,
    floor(min(35, 36) / 1) = 35 pages."""
    a, b = list(range(1, 41)), [*range(1, 36), 99, 100]
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    pages = min(shared, len(b) - 1) // 1
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", ",".join(map(str, a)),
                           "--tokens-b", ",".join(map(str, b)), "--engine", "sglang",
                           "--explain")
    assert code == 0
    assert "only full pages of page_size = 1 token (SGLang's default) are cached" in out
    assert f"full pages reused = floor(min({shared}, {len(b) - 1}) / 1) = {pages}" in out
    assert "block_size" not in out
    # vLLM's word where vLLM's cache is meant, and the JSON names the setting
    vllm = "\n".join(prefix_reuse(a, b, 16).explain_lines())
    assert "only full blocks of block_size = 16 tokens" in vllm
    code, out, _ = run_cli(capsys, "prefix", "--tokens-a", ",".join(map(str, a)),
                           "--tokens-b", ",".join(map(str, b)), "--engine", "sglang",
                           "--json")
    assert json.loads(out)["prefix_reuse"]["block_setting"] == "page_size"



HEADER = ("id,model,weights_dtype,kv_dtype,gpu,num_gpus,tp,batch,input_len,output_len,"
          "context_len,metric,value,unit,engine,source,notes")


def test_validate_explain_and_json_name_the_batch_a_batchless_throughput_row_ran_at(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An offline max-throughput row states no batch: it is priced at as many sequences as
    vLLM's offline pool holds at 1,000 + 1,000 tokens, the count `fit --usage offline` gives,
    and --explain and --json now say how many; a row with its batch keeps it."""
    from ridgeline.capacity import max_batch
    from ridgeline.measurements import read_measurements
    from ridgeline.predict import deployment_for

    path = tmp_path / "rows.csv"
    path.write_text("\n".join([
        HEADER,
        "off,meta-llama/Llama-3.1-8B-Instruct,bf16,bf16,h100-sxm,1,1,,1000,1000,2000,"
        "output_throughput_tok_s,9000,tok/s,vllm,M1,offline",
        "b8,meta-llama/Llama-3.1-8B-Instruct,bf16,bf16,h100-sxm,1,1,8,1000,1000,2000,"
        "output_throughput_tok_s,1300,tok/s,vllm,M1,concurrency 8"]) + "\n")
    row = read_measurements(path).rows[0]
    pool = max_batch(deployment_for(row), 2000)
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "2000", "--usage", "offline")
    assert code == 0 and f"{pool:,} conversations of 2,000 tokens" in out
    code, out, _ = run_cli(capsys, "validate", str(path), "--explain")
    assert code == 0
    assert out.count("sequences = ") == 1 and f"sequences = {pool:,}  [as many as" in out
    code, out, _ = run_cli(capsys, "validate", str(path), "--json")
    batches = {r["id"]: r["priced_batch"] for r in json.loads(out)["rows"]}
    assert batches == {"off": pool, "b8": 8}


@pytest.mark.parametrize("model", ["nemotron-h-56b", "qwen3.6-35b-a3b"])
def test_roofline_names_a_recurrent_states_size_as_kv_does_and_its_traffic_twice_it(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    """The row read 'each sequence's state, 1,825 MB' where `kv` says Nemotron-H-56B's state
    is 870.3 MiB (913 MB): 1,825 MB is that state read and written. Now the state is `kv`'s
    figure and the traffic twice it, whole and on each GPU at TP2."""
    code, out, _ = run_cli(capsys, "kv", model, "--context", "1000", "--json")
    assert code == 0
    state = json.loads(out)["state_bytes_per_sequence"]
    assert state > 0
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h200", "--model", model,
                           "--num-gpus", "2", "--json")
    assert code == 0
    note = next(p["note"] for p in json.loads(out)["points"]
                if p["name"] == "recurrent state (decode)")
    assert (f"each sequence's state, {state / 1e6:,.0f} MB ({state / 2 / 1e6:,.0f} MB on each "
            f"GPU at TP2), read and written every step: {2 * state / 1e6:,.0f} MB a sequence"
            in note)


def test_measure_reads_each_square_matmul_against_its_dtypes_rated_peak() -> None:
    """`--rated-gpu h200` printed the rated bandwidth beside the bandwidth probes only; the
    H200 run's bf16 8192³ at 778.4 TFLOP/s now reads 'rated 989.4 TFLOP/s dense (79%)', its
    read bandwidth 4,392 GB/s '(92%)' of 4,800; a skinny matmul, memory-bound, gets none."""
    from ridgeline.device_probes import Probe
    from ridgeline.reports.measure import rated_beside

    h200 = resolve_accelerator("h200")
    bf16, fp8 = h200.peak_flops["bf16"], h200.peak_flops["fp8"]
    square = Probe("bfloat16 matmul 8192³", 778.4e12, "square")
    assert rated_beside(square, h200) == \
        f"  rated {bf16 / 1e12:,.1f} TFLOP/s dense ({778.4e12 / bf16:.0%})"
    assert "rated 989.4 TFLOP/s dense (79%)" in rated_beside(square, h200)
    fp8_square = Probe("float8_e4m3fn matmul 8192³", 1_329e12, "square, bf16 out")
    assert rated_beside(fp8_square, h200) == \
        f"  rated {fp8 / 1e12:,.1f} TFLOP/s dense ({1_329e12 / fp8:.0%})"
    assert rated_beside(fp8_square, h200).endswith("(67%)")
    read = Probe("read bandwidth", 4.392e12, "4096 MiB summed")
    assert rated_beside(read, h200) == "  rated 4,800 GB/s (92%)"
    assert rated_beside(Probe("bfloat16 matmul M=64", 170e12, "64x8192 @ 8192x8192"),
                        h200) == ""
    assert rated_beside(Probe("float16 matmul", 0.0, "unsupported: no"), h200) == ""


def test_the_hardware_tables_ridge_column_carries_its_unit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The catalog's columns each say their unit: 'ridge' alone left FLOP per byte unsaid.
    The H100's row: 989.4 TFLOP/s ÷ 3.35 TB/s = 295."""
    code, out, _ = run_cli(capsys, "hardware")
    assert code == 0
    header, *rows = out.splitlines()
    assert "ridge FLOP/byte" in header
    h100 = resolve_accelerator("h100")
    ridge = h100.peak_flops["bf16"] / h100.memory_bandwidth_bytes_per_s
    row = next(r for r in rows if r.startswith("h100-sxm "))
    assert f" {ridge:.0f} " in row and round(ridge) == 295


def test_observe_cautions_a_given_context_far_under_the_kv_caches_fill(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The vLLM log's three stats lines run 24, 40 and 38 requests at 31.2, 96.5 and 99.0 % of
    the KV cache: 75.6 % of the modelled 447,600-token pool over 34 requests is 9,948 tokens
    each. Given --context 4000, observe said the pool 'allows 111 sequences' beside a 'full'
    pool and a prediction 56 % under the generation rate's, without a word: now a caution names
    the fill's context, 2.5× the one given. --context 9000 is within 2× of it: no caution."""
    import re
    import statistics

    log = (FIXTURES / "vllm_server.log").read_text()
    running = [float(x) for x in re.findall(r"Running: (\d+) reqs", log)]
    usage = [float(x) / 100 for x in re.findall(r"GPU KV cache usage: ([\d.]+)%", log)]
    argv = ("observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
            "--gpu", "h100")
    code, out, _ = run_cli(capsys, *argv, "--context", "4000", "--json")
    assert code == 0
    got = json.loads(out)
    held = round(statistics.fmean(usage) * got["pool_tokens_modelled"]
                 / statistics.fmean(running))
    assert held == 10_746 and got["context_len"] == 4_000  # 9,948 under vLLM 0.32's pool
    caution = next(c for c in got["cautions"] if c.startswith("--context"))
    assert f"--context 4,000 is under the KV cache's fill: {held:,} tokens a running request" \
        in caution and f"{held / 4000:,.1f}× it" in caution
    code, out, _ = run_cli(capsys, *argv, "--context", "9000")
    assert code == 0 and "caution: --context" not in out
    code, out, _ = run_cli(capsys, *argv)  # no --context: the fill is the context
    assert code == 0 and f"sequences of {held:,} tokens" in out and "caution: --context" not in out


def test_decode_help_states_the_batch_it_runs_without_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`decode MODEL --gpu G` runs batch 1; --batch's help gave an example list alone. (The
    parser's default is unset, so that llama-server's -np N can price its N slots instead.)"""
    assert "(default 1" in _help(_command("decode"), "--batch")
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--json")
    assert code == 0, err
    assert [p["batch"] for p in json.loads(out)["points"]] == [1]

"""The CLI in-process: every command in text, --json and --explain; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ridgeline.catalog import all_model_ids, resolve_model
from ridgeline.cli import main
from ridgeline.hardware import catalog
from ridgeline.tensor_parallel import tensor_parallel_problem
from ridgeline.units import latency_figure
from ridgeline.vllm_memory import vllm_data
from tests.conftest import LOWBATCH, MEASUREMENTS, ROOT, run_cli

ARTICLE = ["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16",
           "--batch", "32", "--context", "2000"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


COMMANDS = [
    ARTICLE,
    ["roofline", "--gpu", "h100", "--batch", "32"],
    ["roofline", "--gpu", "h100", "--batch", "32", "--model", "deepseek-v3"],
    ["moe", "qwen3.6-35b-a3b", "--weights", "bf16"],
    ["kv", "gpt-oss-120b", "--context", "128k", "--gpu", "h100", "--num-gpus", "2"],
    ["kv", "llama-3.1-70b", "--context", "131072", "--memory-gib", "80"],
    ["prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len", "4000", "--weights", "bf16"],
    ["utilization", "--gpu", "h100", "--running", "8"],
    ["utilization", "--gpu", "h100", "--running", "8", "--model", "llama-3.1-8b", "--context", "4k"],
    ["model", "deepseek-v3"],
    ["hardware"],
    ["hardware", "H100"],
    ["amdahl", "--fraction", "0.85", "--speedup", "2", "--target", "1.5"],
    ["amdahl", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--op",
     "attention", "--batch", "32", "--context", "32k", "--speedup", "2"],
    ["evalstats", "--pct-a", "39.02", "--pct-b", "47.56", "--n", "164"],
    ["evalstats", "--discordant", "15,2"],
    ["prefix", "--tokens-a", "1,2,3,4,5,6", "--tokens-b", "1,2,3,4,5,6,7"],
    ["attention", "--model", "llama-3.1-70b", "--context", "64K"],
    ["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "128K",
     "--target-concurrency", "32"],
    ["fit", "llama-3.1-8b", "--gpu", "a100", "--max-model-len", "8k", "--engine", "sglang"],
    ["fit", "llama-3.1-8b", "--gpu", "l40s", "--max-model-len", "8k", "--engine", "trtllm",
     "--kv-cache-free-gpu-mem-fraction", "0.95"],
    ["validate", str(LOWBATCH), "--summary"],  # each rendering of a validate: a short file
    ["profile", "--engine", "llama.cpp-cuda", "--gpu", "rtx-4090"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_each_command_answers_in_text_json_and_explain(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, text, _ = run(capsys, *argv)
    assert code == 0 and text.strip()
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    assert isinstance(json.loads(out), dict)
    code, explained, _ = run(capsys, *argv, "--explain")
    assert code == 0
    assert "How each number was computed" in explained
    assert explained.startswith(text.rstrip("\n"))


def test_article_example_says_it_does_not_fit_in_the_first_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, *ARTICLE)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("DOES NOT FIT") and "short by" in first
    assert "  step       27." in out
    assert "expected on vLLM: nothing" in out and "tok/s per user" not in out
    # the step is the article's arithmetic; a speed for a batch that cannot run is not
    assert "  per user" not in out and "  aggregate" not in out
    assert "  tok/s      none: the batch does not fit in memory" in out
    # the article's "twenty-four times" is the steps' ratio, and stays
    assert "  gain       24.8x batch 1's output, each user at 77% of batch 1's speed" in out
    code, explained, _ = run(capsys, *ARTICLE, "--explain")
    assert "=> gain = 24.78 x" in explained and "tok/s" not in explained.replace(
        "  tok/s      none", "")


def test_no_engine_speed_is_printed_for_a_batch_the_engine_cannot_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["decode", "llama-3.1-8b", "--gpu", "h100", "--context", "4096", "--json"]
    _code, out, _ = run(capsys, *base, "--batch", "64,120,2000")
    points = {p["batch"]: p for p in json.loads(out)["points"]}
    assert points[64]["expected"]["aggregate_tok_s"] > 0  # fits, and the pool seats it
    from ridgeline import resolve_accelerator
    price = resolve_accelerator("h100").price_per_hour_usd  # the text's $/M tok, in JSON too
    assert points[64]["expected"]["usd_per_million_output_tokens"] == pytest.approx(
        price / 3600 / points[64]["expected"]["aggregate_tok_s"] * 1e6)
    assert points[120]["fits"] and points[120]["expected"] is None  # the KV pool seats 106
    assert not points[2000]["fits"] and points[2000]["expected"] is None
    assert points[2000]["aggregate_tok_s"] is None and points[2000]["per_user_tok_s"] is None
    _code, text, _ = run(capsys, *base[:-1], "--batch", "120")
    assert "cannot run a batch of 120" in text


def test_decode_table_mode_shows_every_batch_and_context(capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = run(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                       "--batch", "1,8,32,128,296", "--context", "2000,8000",
                       "--max-model-len", "8192", "--num-gpus", "2", "--json")
    points = json.loads(out)["points"]
    assert len(points) == 10
    # the floor's speeds where the engine runs the point (null elsewhere, as the text)
    by_context = [p for p in points if p["context_len"] == 2000 and p["engine_runs"]]
    assert len(by_context) >= 2
    totals = [p["floor_aggregate_tok_s"] for p in by_context]
    users = [p["floor_per_user_tok_s"] for p in by_context]
    assert totals == sorted(totals) and users == sorted(users, reverse=True)


@pytest.mark.parametrize("model_id", list(all_model_ids()))
def test_every_catalog_model_runs_through_every_model_command(
    capsys: pytest.CaptureFixture[str], model_id: str
) -> None:
    spec = resolve_model(model_id)  # the widest tensor parallel group ≤ 8 its heads split over
    n = str(next(tp for tp in (8, 4, 2, 1) if not tensor_parallel_problem(spec, tp)))
    for argv in (["model", model_id], ["kv", model_id, "--context", "8k", "--gpu", "b200"],
                 ["decode", model_id, "--gpu", "b200", "--num-gpus", n, "--batch", "1,64"],
                 ["prefill", model_id, "--gpu", "b200", "--num-gpus", n, "--prompt-len", "2k"],
                 ["roofline", "--gpu", "b200", "--model", model_id],
                 ["fit", model_id, "--gpu", "b200", "--num-gpus", n, "--max-model-len", "32k"]):
        code, out, err = run(capsys, *argv, "--json")
        assert code == 0, (argv, err)
        json.loads(out)
    if resolve_model(model_id).moe:
        code, _, err = run(capsys, "moe", model_id)
        assert code == 0, err


def test_every_accelerator_runs_decode_and_roofline(capsys: pytest.CaptureFixture[str]) -> None:
    for gpu in catalog():
        for argv in (["decode", "qwen3-8b", "--gpu", gpu, "--batch", "1,32"],
                     ["roofline", "--gpu", gpu, "--batch", "8"],
                     ["hardware", gpu],
                     ["fit", "qwen3-8b", "--gpu", gpu, "--max-model-len", "4k"]):
            code, _, err = run(capsys, *argv)
            assert code == 0, (gpu, err)


BAD = [
    (["decode", "no-such-model", "--gpu", "h100"], "unknown model"),
    (["decode", "llama-3.1-70b", "--gpu", "h1000"], "unknown accelerator"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--batch", "-3"], "batch"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--batch", "0"], "positive"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "int3"], "weight format"),
    (["decode", "llama-3.1-70b"], "--gpu"),
    (["kv", "llama-3.1-70b", "--context", "lots"], "context"),
    (["moe", "llama-3.1-70b"], "dense model"),
    (["amdahl", "--fraction", "1.5", "--speedup", "2"], "between 0 and 1"),
    (["evalstats", "--pct-a", "30", "--pct-b", "40", "--n", "0"], "positive"),
    (["evalstats", "--pct-a", "39.03", "--n", "164"], "give --pct-b"),
    (["evalstats", "--discordant=-1,3"], "negative"),
    (["prefix", "--tokens-a", "1,x", "--tokens-b", "1"], "token ids"),
    (["amdahl", "--fraction", "0.5", "--speedup", "nan"], "--speedup: speedup must be"),
    (["amdahl", "--fraction", "0.5", "--target", "inf"], "--target: target speedup must"),
    (["hardware", "--gpu-file", "/nonexistent.json"], "no such"),
    (["model", "/tmp"], "no such config"),
    (["model", str(ROOT / "validation/h200/2026-11-29-run1.accelerator.json")],
     "is an accelerator record, not a model's config.json (give it to --gpu-file)"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k",
      "--gpu-memory-utilization", "1.5"], "memory fraction"),
    (["validate", "/nonexistent.csv"], "no such measurements file"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "8k",
      "--chunked-prefill-size", "-1"], "chunked prefill off, which is not modelled"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "magic"], "unknown engine"),
    # a name is checked even where the command would not have used it
    (["kv", "llama-3.1-8b", "--context", "8k", "--weights", "int3"], "unknown weight format"),
    (["utilization", "--gpu", "h100", "--running", "8", "--weights", "fp9"], "unknown weight"),
    (["roofline", "--gpu", "h100", "--kv-cache-dtype", "fp3"], "unknown KV-cache dtype"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", "vlm"],
     "unknown engine"),
    (["page", "--gpu", "h100,,a100"], "empty name"),
    (["page", "--counts", "1,x"], "accelerator count"),
    (["calibrate", "rows.csv", "-o", "p.json", "--engine", "tgi"], "unknown engine"),
    (["decode", "llama-3.1-8b", "--gpu", ""], "accelerator name is empty"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,,8"], "empty entry"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "99999999999999999999"],
     "at most"),
    (["prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2k", "--batch", "2000000"],
     "at most 1000000 (1m)"),
    # an option the chosen mode would ignore is refused, not dropped
    (["amdahl", "--fraction", "0.5", "--speedup", "2", "--gpu", "h100"], "--gpu applies only"),
    (["amdahl", "--fraction", "0.5", "--model", "llama-3.1-8b"], "pass one"),
    (["utilization", "--gpu", "h100", "--running", "8", "--kv-dtype", "fp8"],
     "size a model's KV pool: give --model"),
    (["roofline", "--gpu", "h100", "--weights", "auto"], "need --model"),
    # vLLM refuses to start: a max_model_len its pool cannot hold, odd blocks, a tiny budget
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--max-model-len", "500000"],
     "vllm refuses --max-model-len 500,000, past llama-3.1-8b's 131,072 positions"),
    (["simulate", "qwen2.5-32b", "--gpu", "h100", "--rate", "1", "--max-model-len", "131072"],
     "would refuse to start"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--block-size", "7",
      "--engine-version", "0.17.0"], "--block-size is one of"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k",
      "--max-num-batched-tokens", "100", "--max-num-seqs", "256"], "at least --max-num-seqs"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine-version",
      "9.9"], "no release"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--peak-tflops", "100", "--bandwidth-gbs",
      "1000"], "is a catalog accelerator"),
    # one of the pair beside a catalog card: the catalog's word first, not "needs both"
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--peak-tflops", "500"],
     "is a catalog accelerator"),
    (["roofline", "--gpu", "h100", "--bandwidth-gbs", "1000"], "is a catalog accelerator"),
    (["decode", "llama-3.1-8b", "--gpu", "mi300x", "--engine", "llama.cpp-metal"],
     "try --engine llama.cpp-rocm"),  # the same engine's build for the card
    (["decode", "llama-3.1-8b", "--gpu", "tpu-v5e", "--engine", "trtllm"],
     "try --engine vllm"),  # no Vulkan on a TPU
    (["decode", "llama-3.1-8b", "--gpu", "gaudi3", "--engine", "llama.cpp-cuda"],
     "try --engine vllm"),
    # fp8 weights need Turing+ (weight-only Marlin) or MI300; GGUF engines run GGUF types
    (["fit", "llama-3.1-8b", "--gpu", "v100-sxm-32gb", "--weights", "fp8", "--max-model-len",
      "4096", "--engine", "vllm"], "runs no fp8 weights on v100-sxm-32gb (volta)"),
    (["fit", "llama-3.1-8b", "--gpu", "mi250", "--weights", "fp8", "--max-model-len", "4096"],
     "(cdna2)"),
    (["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights",
      "awq-int4", "--max-model-len", "4096"], "not a GGUF tensor type"),
    (["fit", "llama-3.1-70b", "--gpu", "apple-m2-ultra-76c", "--num-gpus", "2",
      "--max-model-len", "4096"], "one Apple-silicon GPU"),
    (["decode", "llama-3.1-8b", "--gpu", "h100,"], "empty name"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--input-len", "100", "--output-len", "10",
      "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--percentile", "0.9"], "90 for p90"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--input-len", "100", "--output-len", "10",
      "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--gpus", "h100", "--price", "b200=3"],
     "not among the searched GPUs"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--input-len", "100", "--output-len", "10",
      "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--price", "h100=nan"], "USD per GPU-hour, above 0"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--input-len", "100", "--output-len", "10",
      "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--gpus", "h100,h100-sxm"], "named twice"),
    # engines shard attention heads evenly: 32 query and 8 KV heads split over 1, 2, 4, 8 …
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "3"], "use 1, 2, 4, 8, 16, 32"),
    # falcon-7b's 71 heads: a prime, so no hint of 71 GPUs
    (["decode", "falcon-7b", "--gpu", "h100", "--num-gpus", "2"],
     "only 1 GPU per replica splits them: scale out with replicas"),
    (["fit", "qwen2.5-7b", "--gpu", "h100", "--num-gpus", "8", "--max-model-len", "4k"],
     "28 attention heads"),
    (["prefix", "--tokens-a", "1,2", "--tokens-b", "1", "--tokenizer", "gpt2"], "--tokenizer"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--prefix-len", "-1"],
     "prefix length"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--spec-tokens", "100000"],
     "draft length"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--spec-tokens", "4",
      "--spec-draft-cost", "nan"], "0 to 1 (a drafter as slow as the target gains nothing)"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--spec-tokens", "4",
      "--spec-draft-cost", "1e9"], "got 1e+09"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "8", "--arrival", "gamma"],
     "drop --arrival"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", ""], "trace path is empty"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
      "--gpus", ""], "empty name"),
    (["observe", "metrics.txt", "--model", "llama-3.1-8b", "--gpu", "h100", "--interval", "0"],
     "above 0"),
    (["observe", "metrics.txt", "--model", "llama-3.1-8b", "--gpu", "h100", "--duration",
      "inf"], "finite"),
    (["fit", "llama-3.1-8b", "--gpu-file", "a.json", "--gpu", "h100", "--max-model-len", "8k"],
     "drop --gpu"),
    (["kv", "llama-3.1-8b", "--context", "8k", "--gpu-memory-gib", "32"], "named with --gpu"),
    (["fit", "llama-3.1-8b", "--gpu", "h200", "--max-model-len", "8192", "--engine",
      "torch-cudagraph"], "not a serving engine"),
    # a flag its mode would ignore, a list with a value twice, a version that is two
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--spec-acceptance", "0.5"],
     "give --spec-tokens"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--arrival", "poisson",
      "--burstiness", "3"], "--burstiness shapes gamma arrivals, not --arrival poisson's"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--spec-tokens", "0",
      "--spec-acceptance", "0.5"], "a draft of at least 1 token"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", "t.csv", "--num-requests", "5",
      "--input-len", "900"], "drop --num-requests, --input-len"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4", "--arrival", "gamma",
      "--burstiness", "4"], "closed loop: each request arrives as one finishes; drop --arrival, "
     "--burstiness"),
    (["plan", "llama-3.1-8b", "--trace", "t.csv", "--output-len", "900", "--slo-ttft-ms", "500",
      "--slo-tpot-ms", "50"], "replays its own lengths; drop --output-len"),
    (["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights",
      "q4_k_m", "--max-model-len", "4096", "--gpu-memory-utilization", "0.5"],
     "llama.cpp has no memory fraction"),
    (["simulate", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights",
      "q4_k_m", "--rate", "1", "--block-size", "16"], "single-token cells"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "4096",
      "--usage", "offline"], "sglang has none"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--max-model-len", "4096",
      "--no-async-scheduling"], "vLLM's; trtllm has no such setting"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp-cuda", "--max-model-len",
      "4096", "--enforce-eager"], "llama.cpp-cuda's pool does not depend on it"),
    # vLLM's default max_model_len is the model's context: a pool short of one such
    # sequence refuses to start, as it does when the length is given
    (["simulate", "llama-3.1-8b", "--gpu", "a10g", "--rate", "0.5", "--num-requests", "30"],
     "refuse to start at its default max_model_len, the model's 131,072 tokens"),
    (["kv", "llama-3.1-8b", "--context", "8k", "--memory-gib", "80", "--gpu", "h100"],
     "give one"),
    (["kv", "llama-3.1-8b", "--context", "8k", "--num-gpus", "4"], "give --gpu"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8,8"], "lists 8 twice"),
    (["decode", "llama-3.1-8b", "--gpu", "h100,h100-sxm"], "named twice"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine-version",
      "0.10,0.6.4"], "not a version"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine-version",
      "1.0"], f"the newest modelled is {vllm_data()['newest_checked']}"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "-8k"],
     "max model length must be positive, got '-8k'"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", "sglang",
      "--engine-version", "0.2.9"], "older than any version ridgeline models"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", "sglang",
      "--engine-version", "9.9"], "SGLang 9.9 is no release ridgeline knows of"),
    (["hardware", "h100", "--gpu-file", "a.json"], "give one"),
    (["page", "llama-3.1-8b", "--gpu", "h100", "--counts", "3", "-o", "p.html"],
     "does not split llama-3.1-8b's 32 attention heads"),
    # 40 divides Scout's 40 heads and 8 KV heads, not its MLPs' 8,192 width
    (["fit", "llama-4-scout", "--gpu", "h100", "--num-gpus", "40", "--max-model-len", "8k"],
     "does not split llama-4-scout's MLP width (8,192) evenly; engines shard them across GPUs:"
     " use 1, 2, 4, 8 GPUs per replica"),
    (["measure", "--quick", "--skip-probes", "-o", "/nonexistent/x.csv"],
     "cannot write /nonexistent/x.csv: no folder /nonexistent"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp-cuda", "-ngl", "10",
      "--host-bandwidth-gbs", "1e-308"], "between 0.1 and 100000"),
    (["attention", "--model", "llama-3.1-8b", "--context", "4096", "--bytes-per-element",
      "1e308"], "must be one of 0.5 (fp4), 1"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "20",
      "--input-len", "uniform:1.5,2.5"], "whole number"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "20",
      "--max-model-len", "1"], "refused every request"),
    (["amdahl", "--model", "llama-3.1-405b", "--gpu", "h100", "--speedup", "2"],
     "does not fit: "),
    (["utilization", "--gpu", "h100", "--running", "16", "--model", "llama-3.1-405b",
      "--context", "4000"], "does not fit"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "１２"], "whole number"),
    (["roofline", "--gpu", "h100", "--intensity", "1_0"], "must be a number"),
    (["observe", "metrics.txt", "--model", "llama-3.1-8b", "--gpu", "h100", "--duration",
      "1e308"], "at most a day"),
    (["page", "", "-o", "x.html"], "model name is empty"),
    (["decode", "llama-3.1-8b", "--gpu", "tpu-v5p", "--engine", "llama.cpp-vulkan"],
     "needs a Vulkan driver"),
    (["decode", "llama-3.1-8b", "--gpu", "a100", "--engine", "trtllm", "--weights", "fp8"],
     "TensorRT-LLM runs fp8 from compute capability 8.9"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--weights", "nvfp4"],
     "Blackwell only in TensorRT-LLM"),
    (["decode", "llama-3.1-8b", "--gpu", "v100", "--weights", "nvfp4", "--engine", "vllm"],
     "need compute capability 7.5+"),
    (["decode", "llama-3.1-8b", "--gpu", "v100", "--weights", "awq-int4", "--engine", "vllm"],
     "need compute capability 7.5+"),
    (["decode", "gpt-oss-20b", "--gpu", "t4"], "Marlin's MXFP4 kernel needs compute capability"),
    (["decode", "gpt-oss-20b", "--gpu", "t4", "--engine", "sglang"],
     "vLLM's MXFP4 kernel (Marlin) needs compute capability 8.0+, the floor taken for sglang"),
    (["decode", "llama-3.1-8b", "--gpu", "mi50", "--engine", "vllm"],
     "vllm's ROCm build does not run on mi50"),
    (["decode", "llama-3.1-8b", "--gpu", "rx-7900-xtx", "--weights", "fp8"],
     "runs no fp8 weights on rx-7900-xtx"),
    (["plan", "llama-3.1-8b", "--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100",
      "--gpus", "h100", "--price", "h100=1e30"], "at most 1,000"),
    (["plan", "llama-3.1-8b", "--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100",
      "--gpus", "h100", "--price", "h100=3", "--price", "h100=4"], "names h100-sxm twice"),
    (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--input-len", ""],
     "--input-len is empty"),
    (["kv", "llama-3.1-8b", "--memory-gib", "10", "--context", "4096", "--num-gpus", "2"],
     "--memory-gib is the whole budget"),
    (["measure", "-o", "rows.csv", "--gpu-id", "Bad ID!!", "--device", "cpu"],
     "--gpu-id 'Bad ID!!': use letters, digits"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "-1"], "batch must be positive, got '-1'"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "9" * 5000], "(5,002 chars)"),
    (["decode", "llama-3.1-8b", "--gpu", "a100", "--engine", "trtllm", "--kv-dtype", "fp8"],
     "TensorRT-LLM keeps no fp8 KV cache before compute capability 8.9"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--kv-dtype", "fp4"],
     "NVFP4 KV cache on Blackwell only"),
    (["decode", "llama-3.1-8b", "--gpu", "tpu-v5e", "--weights", "fp32"],
     "tpu-v5e has no fp32 peak (it has bf16, int8)"),
    (["prefill", "llama-3.1-8b", "--gpu", "mi300x", "--weights", "nvfp4", "--prompt-len", "8"],
     "NVFP4 kernels are NVIDIA's"),
    # an unknown flag points at the command's own help
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1", "--context", "1k", "--bogus"],
     "unrecognized arguments: --bogus (see `ridgeline decode --help`)"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-gib", "inf"],
     "must be positive and finite, got inf"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4k", "--engine-version", "b0",
      "--engine", "llama.cpp-cuda"],
     "--engine-version b0: not a llama.cpp build (expected a build, as b9400)"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=lambda a: str(a)[:40])
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_file_that_is_not_a_config_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "config.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n")
    code, _, err = run(capsys, "model", str(path))
    assert code == 2 and "config" in err


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "ridgeline", "roofline", "--gpu", "a100"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "153" in result.stdout


def test_the_command_list_says_prefill_gives_the_expected_ttft_too() -> None:
    from ridgeline.cli import build_parser

    listing = " ".join(build_parser().format_help().split())
    # prefill prints an engine's expected TTFT beside the floor, as decode's line says of its step
    assert "prefill a prompt's floor and expected TTFT, and its intensity" in listing
    assert "decode decode step: floor and expected time" in listing


def test_an_internal_error_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import ridgeline.cli_catalog as catalog

    def broken(args: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(catalog, "cmd_model", broken)
    # main() builds a parser with the broken handler, dropped with it (command_parser)
    monkeypatch.setattr("ridgeline.cli._PARSERS", [])
    monkeypatch.delenv("RIDGELINE_DEBUG", raising=False)
    assert main(["model", "llama-3.1-8b"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "Traceback" not in err


def test_explain_shows_the_expectation_as_shares_of_the_floor_plus_overhead(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The expected step is the floor's operators at the engine's shares, plus collectives and
    overhead; the explained parts add up to the figure printed above them."""
    import re

    from ridgeline.engines import profile_for

    def parts(text: str) -> dict[str, float]:
        block = text[text.index("expected step:"):]
        return {k: float(v.replace(",", "")) for k, v in
                re.findall(r"(\w[\w -]*?) = ([\d.,]+) ms", block)}

    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8",
                       "--context", "2000", "--explain")
    assert code == 0
    p = parts(out)
    total = (p["compute-bound operators"] + p["memory-bound operators"] + p["collectives"]
             + p["overhead"])
    assert total == pytest.approx(p["expected"], rel=1e-3)
    headline = float(re.search(r"([\d.]+) ms per step", out).group(1))  # type: ignore[union-attr]
    assert headline == pytest.approx(p["expected"], abs=0.006)  # 4 figures vs 2 decimals
    from ridgeline.reports.profile_story import NOTHING_S

    seconds = profile_for("vllm").layer_overhead_s  # one fitted to nothing reads as 0
    decode_layer = 0.0 if seconds < NOTHING_S else seconds * 1e6
    assert f"per layer = {decode_layer:,.4g} µs" in out
    code, out, _ = run(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2000",
                       "--weights", "bf16", "--explain")
    prefill_layer = profile_for("vllm").prefill_layer_overhead_s
    assert prefill_layer is not None and f"per layer = {prefill_layer * 1e6:,.4g} µs" in out
    assert "no CUDA graph" in out


def test_utilization_reads_weights_named_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    """At one byte per weight each running request does twice the arithmetic per byte read;
    fp8 weights run fp8 matmuls on an H100, whose ridge is twice as high, as they do when a
    model is named. Held to the bf16 rate, the share doubles."""
    shares = {}
    for weights, dtype in (("bf16", None), ("fp8", None), ("fp8", "bf16")):
        code, out, err = run(capsys, "utilization", "--gpu", "h100", "--running", "8",
                             "--weights", weights, "--json",
                             *(["--compute-dtype", dtype] if dtype else []))
        assert code == 0, err
        shares[weights, dtype] = json.loads(out)["fraction_of_arithmetic"]
    assert shares["fp8", None] == pytest.approx(shares["bf16", None], rel=0.01)
    assert shares["fp8", "bf16"] == pytest.approx(2 * shares["bf16", None])


def test_as_stored_is_a_weight_choice_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "decode", "gpt-oss-20b", "--gpu", "h100", "--weights",
                         "as stored")
    assert code == 0, err
    assert "weights as stored" in out


def test_gpu_memory_gib_picks_another_configuration_of_a_catalog_part(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 32 GB M1 Max: Metal lets the GPU wire 2/3 of it, 21.33 GiB, not the 48 of 64 GB."""
    code, out, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "apple-m1-max-32c",
                         "--gpu-memory-gib", "32", "--engine", "llama.cpp-metal",
                         "--max-model-len", "8k", "--json")
    assert code == 0, err
    data = json.loads(out)
    code, out, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "apple-m1-max-32c",
                         "--engine", "llama.cpp-metal", "--max-model-len", "8k", "--json")
    full = json.loads(out)
    assert data["pool_bytes_per_gpu"] + 16 * 2**30 * (0.75 - 2 / 3) < full["pool_bytes_per_gpu"]


def test_memory_gib_refusal_calls_the_budget_what_kv_counts_it_as(
        capsys: pytest.CaptureFixture[str]) -> None:
    """kv --memory-gib 10 is the cache's budget alone: no weights come out of it, so the
    conversations are 10 GiB over one sequence's cache. The refusal of it with --num-gpus
    says the same, not that the weights share it."""
    code, out, err = run(capsys, "kv", "llama-3.1-8b", "--memory-gib", "10", "--context", "4096",
                         "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["budget_bytes"] == 10 * 2**30 and "for the cache alone" in report["budget"]
    assert report["conversations"] == 10 * 2**30 // report["bytes_per_sequence"]
    code, _, err = run(capsys, "kv", "llama-3.1-8b", "--memory-gib", "10", "--context", "4096",
                       "--num-gpus", "2")
    assert code == 2 and "for the cache alone" in err and "weights" not in err

def test_fit_compares_engines_at_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b at 32K on 2 x H100: SGLang's window pool at 0.8 of its full pool holds
    fewer long conversations than vLLM, which keeps each window to 128 tokens."""
    code, out, err = run(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                         "--max-model-len", "32k", "--engine", "vllm,sglang", "--json")
    assert code == 0, err
    rows = {e["engine"]: e for e in json.loads(out)["engines"]}
    assert rows["vllm"]["conversations"] > 1.5 * rows["sglang"]["conversations"] > 0
    code, _, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k",
                       "--engine", "vllm,sglang", "--max-num-seqs", "64")
    assert code == 2 and "one engine's settings" in err


def test_flash_attn_off_costs_llama_cpps_scores_and_is_refused_for_other_engines(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["prefill", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--prompt-len", "8192", "--json"]
    times = {}
    for flag in ("on", "off"):
        code, out, _ = run(capsys, *base, "--flash-attn", flag)
        assert code == 0
        report = json.loads(out)
        times[flag] = report["expected"]["time_s"]
        times[flag + " floor"] = report["floor_time_s"]
    assert times["off"] > 1.2 * times["on"]  # 8K prompt: the scores' traffic is not small
    assert times["off floor"] == times["on floor"]  # the floor never writes the scores out
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                       "llama.cpp-cuda", "--context", "8192", "--flash-attn", "off", "--explain")
    assert code == 0 and "no flash attention" in out and "attention scores" in out
    for argv in (["decode", "llama-3.1-8b", "--gpu", "h100", "--flash-attn", "off"],
                 ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1", "--flash-attn",
                  "off"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "--flash-attn is llama.cpp's switch" in err


def test_enforce_eager_slows_decode_and_cautions_moe_and_tensor_parallel(
        capsys: pytest.CaptureFixture[str]) -> None:
    def step_s(*argv: str) -> tuple[float, list[str]]:
        code, out, _ = run(capsys, "decode", *argv, "--gpu", "h100", "--context", "1000", "--json")
        assert code == 0
        report = json.loads(out)
        return report["points"][0]["expected"]["time_s"], report["cautions"]

    graphed, none = step_s("llama-3.1-8b")
    eager, still_none = step_s("llama-3.1-8b", "--enforce-eager")
    assert eager > graphed and none == still_none == []
    _, cautions = step_s("qwen3-30b-a3b", "--enforce-eager")
    assert cautions and "#45709" in cautions[0]
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                       "llama.cpp-cuda", "--enforce-eager")
    assert code == 2 and "serving engine's switch" in err
    tpot = {}
    for flag in ((), ("--disable-cuda-graph",)):
        code, out, _ = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1",
                           "--num-requests", "20", "--json", *flag)
        assert code == 0
        tpot[bool(flag)] = json.loads(out)["tpot_s"]["mean"]
    assert tpot[True] > tpot[False]


def test_decode_compares_accelerators_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["decode", "llama-3.1-70b", "--num-gpus", "2", "--weights", "fp8", "--batch", "1,64",
            "--context", "8000"]
    code, out, _ = run(capsys, *argv, "--gpu", "h100,h200,b200", "--json")
    assert code == 0
    cards = json.loads(out)["accelerators"]
    assert [c["accelerator"] for c in cards] == ["h100-sxm", "h200-sxm", "b200"]
    # each card's figures are its own single-card report's
    code, alone, _ = run(capsys, *argv, "--gpu", "h200", "--json")
    assert json.loads(alone)["points"] == cards[1]["points"]
    # more bandwidth, faster floor at batch 1; 64 users at 8K do not fit two 80 GB cards
    floors = [c["points"][0]["step_time_s"] for c in cards]
    assert floors == sorted(floors, reverse=True)
    assert cards[0]["points"][1]["expected"] is None and cards[1]["points"][1]["expected"]
    code, text, _ = run(capsys, *argv, "--gpu", "h100,h200,b200")
    assert code == 0 and "does not fit" in text and "2 x b200" in text
    # the price column: the catalog's device-hour price for two cards over an hour's tokens
    price, tok_s = cards[1]["price_per_gpu_hour_usd"], cards[1]["points"][1]["expected"][
        "aggregate_tok_s"]
    assert f"${2 * price / (tok_s * 3600) * 1e6:,.2f}" in text
    code, _, err = run(capsys, *argv, "--gpu", "h100,h100")
    assert code == 2 and "named twice" in err
    code, _, err = run(capsys, *argv, "--gpu", "h100,nonesuch")
    assert code == 2 and "unknown accelerator 'nonesuch'" in err
    code, _, err = run(capsys, *argv, "--gpu", "h100,h200", "--plot", "x.html")
    assert code == 2 and "give one --gpu" in err


def test_fit_compares_accelerators_under_one_engine(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "gpt-oss-120b", "--num-gpus", "2", "--max-model-len", "128k",
            "--target-concurrency", "32"]
    code, out, _ = run(capsys, *argv, "--gpu", "h100,h200", "--json")
    assert code == 0
    cards = json.loads(out)["accelerators"]
    assert [c["accelerator"] for c in cards] == ["h100-sxm", "h200-sxm"]
    code, alone, _ = run(capsys, *argv, "--gpu", "h100", "--json")
    single = json.loads(alone)
    assert cards[0]["conversations"] == single["conversations"] == 18  # the worked case
    assert cards[1]["conversations"] > 32  # the H200's extra 61 GB holds the target
    code, text, _ = run(capsys, *argv, "--gpu", "h100,h200")
    assert "does not fit" in text and "fits, under the ridge" in text
    # settings apply to every card; two axes at once, a repeated card or a plot are refused
    code, out, _ = run(capsys, *argv, "--gpu", "h100,h200", "--kv-dtype", "fp8", "--json")
    # twice bf16's blocks; a prompt's admission charge (its window's prefill room) paid once
    assert json.loads(out)["accelerators"][0]["conversations"] == 2 * single["conversations"]
    for extra, message in ((["--gpu", "h100,h200", "--engine", "vllm,sglang"], "not both"),
                           (["--gpu", "h100,h100"], "named twice"),
                           (["--gpu", "h100,h200", "--plot", "x.png"], "give one --gpu")):
        code, _, err = run(capsys, *argv, *extra)
        assert code == 2 and message in err


def test_llama_cpp_prefill_runs_in_ubatches_as_validate_scores_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.measurements import read_measurements
    from ridgeline.predict import predict

    row = next(r for r in read_measurements(MEASUREMENTS).rows
               if r.id == "XD-RTX409024GB-8B-F16-pp4096")
    code, out, _ = run(capsys, "prefill", "llama-3-8b", "--gpu", "rtx-4090", "--engine",
                       "llama.cpp-cuda", "--weights", "fp16", "--prompt-len", "4096",
                       "--flash-attn", "off", "--json", "--explain")
    assert code == 0
    report = json.loads(out)
    assert 4096 / report["expected"]["time_s"] == pytest.approx(predict(row).predicted)
    assert any(s["label"] == "prefill in ubatches" for s in report["explain"])
    # one ubatch's worth is one step, as for the serving engines
    code, out, _ = run(capsys, "prefill", "llama-3-8b", "--gpu", "rtx-4090", "--engine",
                       "llama.cpp-cuda", "--prompt-len", "512", "--explain")
    assert code == 0 and "prefill in ubatches" not in out


def test_fit_without_a_length_finds_the_longest_context_for_the_target(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2",
                       "--target-concurrency", "32", "--json")
    assert code == 0
    found = json.loads(out)
    assert found["conversations"] >= 32 and 32_000 < found["max_model_len"] < 131_072
    assert found["longest_context_search"].endswith(f"{found['max_model_len']:,} tokens")
    # neither a length nor a target: the model's trained context, as vllm serve defaults it
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    default = json.loads(out)
    assert code == 0 and default["max_model_len"] == 131_072
    assert default["longest_context_search"].startswith("--max-model-len not given: 131,072")
    for argv, message in ((["--gpu", "h100,h200", "--target-concurrency", "4"], "one deployment"),
                          (["--gpu", "h100", "--engine", "vllm,sglang", "--target-concurrency",
                            "4"], "one deployment")):
        code, _, err = run(capsys, "fit", "llama-3.1-8b", *argv)
        assert code == 2 and message in err


def test_fit_defaults_to_the_context_each_engine_derives_from_a_yarn_config(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Qwen3-8B with Qwen's YaRN block: vllm serve defaults --max-model-len to 131,072 and
    runs it; SGLang defaults to 40,960 and refuses 131,072 without its override."""
    from ridgeline.catalog import load_data, model_entry

    config = {**load_data(f"models/{model_entry('qwen3-8b').file}"), "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, _ = run(capsys, "fit", str(path), "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["max_model_len"] == 131_072
    code, out, _ = run(capsys, "fit", str(path), "--gpu", "h100", "--engine", "sglang")
    assert code == 0 and out.startswith("--max-model-len not given: 40,960")
    code, out, _ = run(capsys, "fit", str(path), "--gpu", "h100", "--engine", "sglang",
                       "--max-model-len", "131072")
    assert code == 0 and out.startswith(
        "DOES NOT FIT: sglang refuses --context-length 131,072 (ridgeline's --max-model-len)")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in out


def test_kv_takes_any_engines_cache_format(capsys: pytest.CaptureFixture[str]) -> None:
    """`kv` is engine-free arithmetic: llama.cpp's q8_0 and vLLM's fp8 both size a budget."""
    for dtype in ("q8_0", "fp8"):
        code, out, err = run(capsys, "kv", "llama-3.1-8b", "--context", "8k", "--kv-dtype", dtype,
                             "--gpu", "h100")
        assert code == 0 and "conversations of 8,000 tokens that fit" in out, err


def test_engine_free_commands_take_any_cache_format_and_engines_only_their_own(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-8b",
                       "--kv-dtype", "q8_0")
    assert code == 0, err
    code, _, err = run(capsys, "page", "llama-3.1-8b", "--kv-dtypes", "q8_0", "-o", "x.html")
    assert code == 2 and "vllm has no q8_0 KV cache" in err
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--kv-dtype", "q8_0")
    assert code == 2 and "it caches in bf16, fp16, fp32, fp8" in err


def test_prefill_compares_accelerators_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["prefill", "llama-3.1-70b", "--num-gpus", "2", "--weights", "fp8", "--prompt-len",
            "8000", "--max-model-len", "8000"]  # 2 x L40S would not start at 131,072
    code, out, _ = run(capsys, *argv, "--gpu", "h100,b200,l40s", "--json")
    assert code == 0
    cards = json.loads(out)["accelerators"]
    code, alone, _ = run(capsys, *argv, "--gpu", "b200", "--json")
    single = json.loads(alone)
    assert cards[1]["expected"] == single["expected"] and cards[1]["time_s"] == single["time_s"]
    ttft = [c["expected"]["time_s"] for c in cards]
    assert ttft[1] < ttft[0] < ttft[2]  # B200 before H100 before L40S: compute-bound prompts
    code, text, _ = run(capsys, *argv, "--gpu", "h100,b200,l40s")
    assert code == 0 and "expected TTFT ms" in text and "2 x l40s" in text


def test_memory_is_what_the_driver_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """An L40S keeps a sixteenth of its 48 GiB for ECC: kv and decode budget the rest, less
    what the runtime keeps of it, the memory fit's engines find (device_memory_bytes)."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.hardware import device_memory_bytes

    l40s = resolve_accelerator("l40s")
    dep = Deployment.build(resolve_model("llama-3.1-8b"), l40s)
    assert l40s.ecc_visible_bytes and dep.memory_bytes == l40s.ecc_visible_bytes
    assert device_memory_bytes(l40s) < l40s.ecc_visible_bytes
    code, out, _ = run(capsys, "kv", "llama-3.1-8b", "--gpu", "l40s", "--context", "8k", "--json")
    assert code == 0
    assert json.loads(out)["budget_bytes"] == pytest.approx(
        device_memory_bytes(l40s) - dep.weight_bytes)
    _code, out, _ = run(capsys, "hardware", "l40s", "--json")
    assert json.loads(out)["ecc_visible_bytes"] == l40s.ecc_visible_bytes


def test_kv_says_when_the_weights_alone_do_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B bf16 on one H100: 141.1 GB of weights on 85.0 GB, 56.1 GB past it, said
    on line 1 as fit, decode and roofline put their verdicts."""
    code, out, _ = run(capsys, "kv", "llama-3.1-70b", "--gpu", "h100", "--context", "8k")
    assert code == 0
    assert out.splitlines()[0] == "DOES NOT FIT: the weights alone exceed the memory by 56.1 GB"


def test_utilization_compares_with_the_engines_pool(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["utilization", "--gpu", "h100", "--model", "llama-3.1-70b", "--num-gpus", "4",
            "--context", "4000", "--json"]
    code, out, _ = run(capsys, *argv, "--running", "8")
    assert code == 0
    limit = json.loads(out)["conversations"]
    _code, out, _ = run(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                       "--context", "4000", "--json")
    decode_limit = json.loads(out)["engine_max_batch"][0]["engine_max_batch"]
    assert limit >= decode_limit > 0  # the same pool; decode's also caps at the seats


@pytest.mark.parametrize(("model", "context", "reason"), [
    ("qwen2.5-32b", "131072", "would refuse to start"),
    ("llama-3.1-8b", "200000", "refuses --max-model-len 200,000")])
def test_utilization_holds_nothing_where_the_engine_would_not_start(
        capsys: pytest.CaptureFixture[str], model: str, context: str, reason: str) -> None:
    """As fit says: one conversation the pool cannot hold, or a context past the model's
    positions, is no running batch to read at all: a one-line 'does not fit' (exit 2), with
    the engine's reason, where fit holds 0 conversations."""
    code, out, err = run(capsys, "utilization", "--model", model, "--context", context,
                         "--running", "1", "--gpu", "h100")
    fit = json.loads(run(capsys, "fit", model, "--max-model-len", context, "--gpu", "h100",
                         "--json")[1])
    assert code == 2 and not out and "does not fit" in err and reason in err
    assert len(err.strip().splitlines()) == 1 and fit["conversations"] == 0


def test_a_context_past_the_models_length_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "prefill", "llama-2-7b", "--gpu", "h100", "--prompt-len", "8000")
    assert code == 0 and "exceed llama-2-7b's 4,096-token context" in out
    code, out, _ = run(capsys, "decode", "llama-2-7b", "--gpu", "h100", "--context", "4000")
    assert "caution" not in out


def test_fit_cautions_on_context_and_seats(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "gpt-j-6b", "--gpu", "h100", "--max-model-len", "128k",
                       "--json")
    assert code == 0 and "2,048-token context" in json.loads(out)["cautions"][0]
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "100",
                       "--target-concurrency", "2000", "--json")
    report = json.loads(out)
    assert report["conversations"] >= 2000 and report["engine_max_batch"] == report["max_num_seqs"]
    assert any("run at once" in c for c in report["cautions"])


def test_apple_silicon_defaults_to_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "apple-m2-ultra-76c")
    assert code == 0 and "expected on llama.cpp-metal" in out
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "apple-m2-ultra-76c",
                       "--engine", "vllm")
    assert code == 2 and "try --engine llama.cpp-metal" in err


def test_validate_does_not_price_a_deployment_that_cannot_load(tmp_path: Path) -> None:
    from ridgeline.measurements import read_measurements
    from ridgeline.predict import predict

    head = MEASUREMENTS.read_text().splitlines()[0]
    path = tmp_path / "rows.csv"
    path.write_text(head + "\nr1,meta-llama/Llama-3.1-405B,bf16,bf16,h100,1,1,8,0,128,1024,"
                    "decode_tok_s_per_user,50,tok/s,vllm,x,y\n"
                    "r2,meta-llama/Llama-3.1-8B,bf16,bf16,h100,1,1,1000000,0,128,1024,"
                    "decode_tok_s_per_user,50,tok/s,vllm,x,y\n")
    for row in read_measurements(path).rows:
        p = predict(row)
        assert p.predicted is None and p.reason.startswith("does not fit")


@pytest.mark.parametrize(("argv", "named"), [
    (("prefix", "--tokens-a", "-1,2", "--tokens-b", "1,2"), "'-1' is not one"),
    (("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "-4"), "got '-4'"),
    (("decode", "llama-3.1-8b", "--gpu", "h100", "--context", "-0.5"), "-0.5"),
])
def test_a_negative_value_is_named_not_taken_for_an_option(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], named: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and named in err and "expected one argument" not in err and not out


def test_simulate_says_why_one_token_requests_leave_no_running_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's scheduler reads num_requests_running after the step's finished requests leave
    (update_from_output, then make_stats): 1-token requests never show in it."""
    base = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "5", "--input-len", "2000",
            "--num-requests", "50"]
    code, out, _ = run_cli(capsys, *base, "--output-len", "1")
    assert code == 0 and "max 0;" in out and "a 1-token request leaves" in out
    code, out, _ = run_cli(capsys, *base, "--output-len", "50")
    assert code == 0 and "max 0;" not in out and "a 1-token request leaves" not in out


H100_RECORD = {"id": "my-h100", "name": "my H100", "memory_bytes": 80e9,
               "memory_bandwidth_bytes_per_s": 3.35e12, "peak_flops": {"bf16": 9.894e14},
               "link": {"kind": "nvlink4", "bytes_per_s_per_direction": 4.5e11}}


@pytest.mark.parametrize(("change", "names"), [
    ({"link": {"kind": 5, "bytes_per_s_per_direction": 4.5e11}}, "link: kind must be"),
    ({"link": {"kind": "nvlink4", "bytes_per_s_per_direction": -4.5e11}},
     "bytes_per_s_per_direction must be in"),
    ({"link": {"kind": "nvlink4", "bytes_per_s_per_direction": 1e-300}},
     "bytes_per_s_per_direction must be in"),
    ({"price_per_hour_usd": -2.99}, "price_per_hour_usd must be in"),
    ({"memory_bytes": 1e300}, "memory_bytes must be in"),
    ({"memory_bytes": True}, "memory_bytes must be a number"),
    ({"id": None}, "lacks 'id'"),
    ({"id": ""}, "id must be a non-empty string"),
    ({"memory_bandwidth_bytes_per_s": None}, "lacks 'memory_bandwidth_bytes_per_s'"),
    ({"peak_flops": [1e15]}, "peak_flops must be an object"),
])
def test_an_accelerator_record_is_read_field_by_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, names: str) -> None:
    card = tmp_path / "card.json"
    card.write_text(json.dumps({**H100_RECORD, **change}))
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu-file", str(card),
                             "--num-gpus", "2")
    assert code == 2 and names in err and len(err.strip().splitlines()) == 1 and not out
    card.write_text(json.dumps(H100_RECORD))
    assert run_cli(capsys, "decode", "llama-3.1-8b", "--gpu-file", str(card))[0] == 0


@pytest.mark.parametrize(("change", "names"), [
    ({"step_overhead_s": -1.0}, "step_overhead_s must be in [0, 10]"),
    ({"step_overhead_s": "nan"}, "step_overhead_s must be a number"),
    ({"layer_overhead_s": float("inf")}, "layer_overhead_s must be in"),
    ({"group_bandwidth": {"nvidia-datacenter": 0.0}}, "group_bandwidth[nvidia-datacenter]"),
    ({"group_compute": {"nvidia-datacenter": -1.0}}, "group_compute[nvidia-datacenter]"),
    ({"band_low": 2.0, "band_high": 0.5}, "band_low must be in [0.01, 1]"),
    ({"dequant_compute": 0}, "dequant_compute must be in"),
    ({"bandwidth_efficiency": None}, "lacks 'bandwidth_efficiency'"),
])
def test_an_engine_profile_is_read_field_by_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, names: str) -> None:
    from dataclasses import asdict

    from ridgeline.engines import bundled_profiles

    good = {k: v for k, v in asdict(bundled_profiles()["vllm"]).items()
            if not isinstance(v, tuple)}
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"engines": {"vllm": {**good, **change}}}))
    code, out, err = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                             "4", "--profile", str(profile))
    assert code == 2 and names in err and len(err.strip().splitlines()) == 1 and not out
    profile.write_text(json.dumps({"engines": {"vllm": good}}))
    assert run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                   "--profile", str(profile))[0] == 0


def test_files_and_names_no_path_can_hold_are_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    config = json.loads((Path(__file__).parent.parent / "src/ridgeline/data/models/"
                         "meta-llama--Llama-3.1-8B.json").read_text())
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(config).replace('"hidden_size": 4096', '"hidden_size": 1' + "0" * 400))
    for argv, names in ((["model", "x" * 300], "unknown model 'xxx"),
                        (["model", str(deep)], "nested too deeply"),
                        (["hardware", "--gpu-file", str(deep)], "nested too deeply"),
                        (["validate", str(loop)], "Symlink loop"),
                        (["model", str(huge)], "hidden_size must be at most 2,147,483,647"),
                        (["evalstats", "--discordant", "9" * 23 + ",1"], "more than any benchmark holds"),
                        (["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                          "--num-requests", "1000000000000"], "at most 10000000 (10m)"),
                        (["plan", "llama-3.1-8b", "--rate", "2", "--slo-ttft-ms", "500",
                          "--slo-tpot-ms", "50", "--workers", "100000"], "at most 256")):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and not out and names in err and len(err.strip().splitlines()) == 1, argv
        assert len(err) < 400  # the echoed value is cut short


def test_a_closed_loop_wider_than_the_requests_runs_them_all(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100",
                           "--num-requests", "60", "--concurrency", "1000000")
    assert code == 0 and "completed 60 of 60" in out


@pytest.mark.parametrize(("argv", "code_past", "said"), [
    (["amdahl", "--model", "llama-2-7b", "--gpu", "h100", "--context", "8000", "--speedup", "2"],
     2, "vllm refuses --max-model-len 8,000, past llama-2-7b's 4,096 positions"),
    (["utilization", "--gpu", "h100", "--running", "8", "--model", "llama-2-7b", "--context",
      "8000"], 2, "vllm refuses --max-model-len 8,000, past llama-2-7b's 4,096 positions"),
    (["kv", "llama-2-7b", "--context", "8000"], 0, "exceed llama-2-7b's 4,096-token context"),
])
def test_a_context_past_the_trained_one_is_cautioned_or_refused_as_the_engine_would(
        capsys: pytest.CaptureFixture[str], argv: list[str], code_past: int, said: str) -> None:
    """kv is arithmetic: a caution. amdahl and utilization read vLLM's step and pool, and
    vLLM refuses the length, as decode and fit say: they stop (exit 2)."""
    code, out, err = run_cli(capsys, *argv)
    assert code == code_past and said in out + err
    code, out, _ = run_cli(capsys, *[("4000" if a == "8000" else a) for a in argv])
    assert code == 0 and "4,096" not in out


def test_attention_and_roofline_caution_a_prompt_past_the_trained_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["attention", "--model", "llama-3.1-8b", "--context", "500000"],
                 ["roofline", "--gpu", "h100", "--model", "llama-3.1-8b", "--prompt-len",
                  "500000"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "exceed llama-3.1-8b's 131,072-token context" in out
        code, out, _ = run(capsys, *argv, "--json")
        assert json.loads(out)["cautions"]
    code, out, _ = run(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-8b")
    assert "caution" not in out


def test_validate_prints_large_figures_whole(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    hybrid = Path(__file__).resolve().parent.parent / "validation" / "hybrid.csv"
    code, out, _ = run(capsys, "validate", str(hybrid))
    assert code == 0 and "973,760" in out and "e+05" not in out


def test_kv_json_never_gives_a_negative_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-70B's 138 GB of fp16 weights overflow an H100 (79.18 GiB, 85.0 GB, as the
    runtime reports it) by 52.9 GB: the cache's budget is 0, and the overflow its own field."""
    code, out, _ = run(capsys, "kv", "llama-2-70b", "--gpu", "h100", "--context", "4096",
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["budget_bytes"] == 0 and data["conversations"] == 0
    assert data["weights_overflow_bytes"] / 1e9 == pytest.approx(52.93, abs=0.01)


@pytest.mark.parametrize(("gpu", "build"), [("apple-m3-ultra-80c", "llama.cpp-metal"),
                                            ("mi300x", "llama.cpp-rocm"),
                                            ("h100", "llama.cpp-cuda")])
def test_llama_cpp_unqualified_is_the_build_for_the_card(
        capsys: pytest.CaptureFixture[str], gpu: str, build: str) -> None:
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", gpu, "--engine", "llama.cpp",
                       "--max-model-len", "4096")
    assert code == 0 and f", {build}, " in out.splitlines()[1]


def test_no_speed_past_the_models_positions_or_for_a_prompt_that_does_not_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM refuses a max_model_len past max_position_embeddings, so decode and prefill give
    no expected speed there; a prefill that does not fit is labelled arithmetic only."""
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "8",
                       "--context", "500000", "--json")
    assert code == 0 and json.loads(out)["points"][0]["expected"] is None
    code, out, _ = run(capsys, "prefill", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "8",
                       "--prompt-len", "500000")
    assert "vllm refuses --max-model-len 500,000" in out
    code, out, _ = run(capsys, "prefill", "llama-3.1-405b", "--gpu", "h100", "--prompt-len",
                       "2000")
    assert "(arithmetic only: no engine can run this)" in out


def test_a_byte_order_mark_is_read_past_in_every_file_a_user_hands_in(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Spreadsheets and Windows editors save UTF-8 with a BOM: a trace, a lengths file, a
    metrics page and a config all read as without one."""
    bom = "\ufeff"
    trace = tmp_path / "trace.csv"
    trace.write_text(bom + "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,200,20\n",
                     "utf-8")
    lengths = tmp_path / "lengths.txt"
    lengths.write_text(bom + "100\n200\n", "utf-8")
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(bom + "vllm:num_requests_running 8\n", "utf-8")
    config = tmp_path / "config.json"
    models = Path(__file__).parent.parent / "src/ridgeline/data/models"
    config.write_text(bom + (models / "meta-llama--Llama-3.2-1B.json").read_text("utf-8"),
                      "utf-8")
    for argv in (["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(trace)],
                 ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests",
                  "5", "--input-len", f"file:{lengths}"],
                 ["observe", str(metrics), "--model", "llama-3.1-8b", "--gpu", "h100"],
                 ["model", str(config)]):
        code, _, err = run(capsys, *argv)
        assert code == 0, (argv, err)


def test_moe_says_when_the_weights_do_not_fit_the_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "moe", "deepseek-v3", "--gpu", "rtx-4090")
    assert code == 0 and out.startswith("DOES NOT FIT: 673.2 GB of weights")
    code, out, _ = run(capsys, "moe", "qwen3.6-35b-a3b", "--weights", "bf16", "--json")
    assert json.loads(out)["weights_fit"] is True


def test_llama_cpp_unqualified_picks_each_compared_cards_build(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for command in (["decode", "--batch", "1"], ["fit", "--max-model-len", "4096"],
                    ["prefill", "--prompt-len", "512"]):
        code, out, err = run(capsys, command[0], "llama-3.1-8b", "--gpu", "h100,mi300x",
                             "--engine", "llama.cpp", *command[1:])
        assert code == 0, err
        assert "llama.cpp-cuda, llama.cpp-rocm" in out.splitlines()[0]
    # calibrate takes several --gpu-file records: the first names the vendor
    record = json.loads(run(capsys, "hardware", "h100", "--json")[1])
    record["id"] = "my-h100"
    path = tmp_path / "g.json"
    path.write_text(json.dumps(record))
    out_path = tmp_path / "p.json"
    rows = MEASUREMENTS.read_text(encoding="utf-8").splitlines()  # the H100 PCIe and RTX 4090
    few = [rows[0]] + [r for r in rows[1:] if ",llama.cpp" in r  # llama.cpp rows: a quick fit
                       and (",h100-pcie," in r or ",rtx-4090," in r)]
    subset = tmp_path / "rows.csv"
    subset.write_text("\n".join(few) + "\n", encoding="utf-8")
    from ridgeline import calibrate_folds

    # the engine named and the profile written, without the held-out folds' refits
    # (test_validate_honesty's)
    monkeypatch.setattr(calibrate_folds, "HELD_OUT_MAX_ROWS", 0)
    code, _, err = run(capsys, "calibrate", str(subset), "--gpu-file", str(path),
                       "--engine", "llama.cpp", "-o", str(out_path))
    assert code == 0, err
    assert json.loads(out_path.read_text())  # a profile written


def test_an_accelerator_record_may_not_take_a_catalog_id_or_anothers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A record named 'H100' would re-card every row that names the catalog's H100."""
    record = json.loads(run(capsys, "hardware", "h200", "--json")[1])
    for n, name in enumerate(("h100-sxm", "H100")):
        path = tmp_path / f"g{n}.json"
        path.write_text(json.dumps({**record, "id": name}))
        code, _, err = run(capsys, "validate", str(MEASUREMENTS), "--gpu-file", str(path))
        assert code == 2 and f"record id {name!r} is the catalog's h100-sxm" in err
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path in (first, second):
        path.write_text(json.dumps({**record, "id": "lab-card", "name": path.name}))
    code, _, err = run(capsys, "validate", str(MEASUREMENTS), "--gpu-file", str(first),
                       "--gpu-file", str(second))
    assert code == 2 and "both hold the id 'lab-card'" in err


def test_fit_refuses_a_context_past_the_models_positions_as_decode_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "8",
                       "--max-model-len", "500000", "--json")
    data = json.loads(out)
    assert code == 0 and data["conversations"] == 0 and data["verdict"] == "does not fit"
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h200", "--max-model-len",
                       "131072")
    assert out.startswith("fits") or out.startswith("clears")


def test_nvfp4_is_refused_only_where_the_record_names_a_platform_without_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A custom record with no vendor or family is taken at its word."""
    record = json.loads(run(capsys, "hardware", "b200", "--json")[1])
    for key in ("vendor", "family"):
        record.pop(key, None)
    record["id"] = "my-card"
    path = tmp_path / "card.json"
    path.write_text(json.dumps(record))
    for engine in ("vllm", "trtllm"):
        code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu-file", str(path),
                           "--weights", "nvfp4", "--engine", engine)
        assert code == 0, err


def test_validate_strict_fails_a_run_with_an_unreadable_row(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = MEASUREMENTS.read_text("utf-8").splitlines()
    bad = rows[1].split(",")
    bad[0], bad[12] = "broken-row", "-7"  # the value column
    path = tmp_path / "m.csv"
    path.write_text("\n".join([rows[0], rows[1], ",".join(bad)]) + "\n", "utf-8")
    code, out, err = run(capsys, "validate", str(path), "--summary")
    assert code == 0 and "1 unreadable" in out
    code, out, err = run(capsys, "validate", str(path), "--summary", "--strict")
    assert code == 2 and "1 unreadable" in out
    assert err == "ridgeline: error: --strict: 1 row unreadable and 0 without a prediction " \
        "(each named above)\n"


def test_an_nvfp4_checkpoint_is_refused_off_nvidia_and_plan_skips_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.6-35B-A3B is NVIDIA's NVFP4 (W4A16) checkpoint: vLLM on an MI300X cannot load
    it, so plan leaves the MI300X out rather than recommending it."""
    code, _, err = run(capsys, "fit", "qwen3.6-35b-a3b", "--gpu", "mi300x", "--max-model-len",
                       "4096")
    assert code == 2 and "runs no nvfp4-w4a16 weights on mi300x" in err
    code, out, err = run(capsys, "plan", "qwen3.6-35b-a3b", "--gpus", "h100,mi300x", "--rate",
                         "1", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--max-gpus", "2",
                         "--json")
    assert code == 0, err
    assert "mi300x" not in json.dumps(json.loads(out).get("winner"))


def test_the_page_offers_each_cards_llama_cpp_build(tmp_path: Path) -> None:
    from ridgeline.page import page_data

    data = page_data(["llama-3.1-8b"], ["h100-sxm", "mi300x"], [1], ["bf16"], ["fp16"],
                     "llama.cpp")
    engines = {key.split("|")[1]: c["engine"] for key, c in data["combos"].items()}
    assert engines == {"h100-sxm": "llama.cpp-cuda", "mi300x": "llama.cpp-rocm"}


def test_a_measurement_row_naming_llama_cpp_runs_its_cards_build() -> None:
    from ridgeline.measurements import Measurement
    from ridgeline.predict import row_engine

    row = Measurement(id="x", model="llama-3.1-8b", weights_dtype="q4_k_m", kv_dtype="f16",
                      gpu="mi300x", num_gpus=1, tp=1, batch=1, input_len=0, output_len=128,
                      context_len=128, metric="decode_tok_s_per_user", value=100.0,
                      unit="tok/s", engine="llama.cpp", source="", notes="")
    assert row_engine(row) == "llama.cpp-rocm"


def test_decode_runs_llamacpps_default_slots_as_fit_does_and_names_what_the_pool_holds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit, observe and decode run llama-server's default 4 slots; decode names the larger
    batch the cache holds given a slot per sequence, which --parallel N raises it to."""
    argv = ["llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp"]
    code, out, _ = run(capsys, "decode", *argv, "--context", "2000")
    data = json.loads(run(capsys, "decode", *argv, "--context", "2000", "--json")[1])
    (pool,) = data["engine_max_batch"]
    assert pool["settings"] == "one slot per sequence (-np), --fit-target 1,024 MiB left free"
    assert pool["conversations"] > 4
    assert code == 0 and (f"capped by llama-server's default 4 slots (-np): its KV pool holds "
                          f"{pool['conversations']:,}, a slot each (--parallel N raises it") in out
    fit = json.loads(run(capsys, "fit", *argv, "--max-model-len", "2000", "--json")[1])
    assert fit["engine_max_batch"] == pool["engine_max_batch"] == 4


def test_card_comparisons_say_which_card_cannot_hold_the_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    """roofline's table names the card whose row is arithmetic only, as its JSON does;
    prefill's JSON gives the expected rate its table shows, and none for a card that fails."""
    code, out, _ = run(capsys, "roofline", "--gpu", "h100,l40s", "--model", "llama-3.1-70b",
                       "--weights", "fp8")
    assert code == 0 and "l40s: DOES NOT FIT" in out and "h100-sxm: DOES NOT FIT" not in out
    data = json.loads(run(capsys, "prefill", "gpt-oss-120b", "--gpu", "h100,l40s",
                          "--prompt-len", "2000", "--json")[1])
    h100, l40s = data["accelerators"]
    assert h100["expected"]["prompt_tok_s"] == pytest.approx(2000 / h100["expected"]["time_s"])
    assert h100["expected"]["prompt_tok_s"] == h100["prompt_tok_s"]  # the text's figure
    assert h100["prompt_tok_s"] < h100["floor_prompt_tok_s"]  # the floor is faster
    assert l40s["expected"] is None and not l40s["fits"]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_nobody_writes_to_is_refused_rather_than_waited_on(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """validate on a FIFO with no writer had blocked forever in open(): it reads as empty,
    a one-line error, exit 2; a pipe that was written (what <(cat file) gives) is read whole."""
    import os

    from ridgeline.userfiles import read_bounded

    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "validate", str(fifo))
    assert code == 2 and "pipe.csv is empty" in err
    if Path("/dev/fd").is_dir():
        read_end, write_end = os.pipe()
        os.write(write_end, b"id,model\n")
        os.close(write_end)
        try:
            assert read_bounded(f"/dev/fd/{read_end}") == b"id,model\n"
        finally:
            os.close(read_end)


def test_user_files_are_read_with_a_bound_and_their_lines_named(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A file past the bound (a /dev/zero) is refused before it fills the memory; a CSV field
    past the csv module's limit, a trace arriving in milliseconds and two accelerator records
    whose ids differ only in case are each one line, exit 2; a .json trace may be an array."""
    from ridgeline.errors import InputError
    from ridgeline.userfiles import read_bounded

    big = tmp_path / "big.csv"
    big.write_text("x" * 2000)
    assert read_bounded(big, 2000) == b"x" * 2000
    with pytest.raises(InputError, match=r"big\.csv is larger than 0 MiB"):
        read_bounded(big, 1000)
    long_field = tmp_path / "long.csv"
    header = Path(MEASUREMENTS).read_text().splitlines()[0]
    long_field.write_text(f"{header}\n" + "a" * 200_000 + "\n")
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1e15,10,5\n")
    record = json.loads(run(capsys, "hardware", "h200", "--json")[1])
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({**record, "id": "lab-card"}))
    second.write_text(json.dumps({**record, "id": "LAB-card"}))
    rtx = tmp_path / "rtx.json"
    rtx.write_text(json.dumps({**record, "id": "rtx-6000"}))
    for argv, said in (
            (["validate", str(long_field)], "field larger than field limit"),
            (["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(trace)],
             "line 3: arrival time must be seconds from 0 to 1e+11"),
            (["validate", str(MEASUREMENTS), "--gpu-file", str(first), "--gpu-file",
              str(second)], "both hold the id 'LAB-card'"),
            (["validate", str(MEASUREMENTS), "--gpu-file", str(rtx)],
             "is the catalog's rtx-6000-ada")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and said in err, (argv, err)
    array = tmp_path / "t.json"
    array.write_text(json.dumps([{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}]))
    code, out, _ = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(array))
    assert code == 0 and "completed 1 of 1" in out


@pytest.mark.parametrize("command", [
    ["decode", "qwen3-8b", "--weights", "q4_k_m", "--context", "512"],
    ["prefill", "qwen3-8b", "--weights", "q4_k_m", "--prompt-len", "512"],
    ["simulate", "qwen3-8b", "--weights", "q4_k_m", "--max-model-len", "4096", "--rate", "1",
     "--num-requests", "20", "--input-len", "256", "--output-len", "32"]])
def test_an_expectation_on_a_class_of_card_the_profile_never_saw_says_so(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """On an RX 7900 XTX, llama.cpp's Vulkan profile (fitted mostly on Intel Arc rows) says
    its expectation rests on few Radeon rows; the ROCm profile, fitted on dozens, does not."""
    from ridgeline.engines import profile_for

    seen = profile_for("llama.cpp-vulkan").fitted_groups.get("amd-radeon", 0)
    code, out, _ = run_cli(capsys, *command, "--gpu", "rx-7900-xtx", "--engine",
                           "llama.cpp-vulkan")
    assert code == 0 and (f"caution: the llama.cpp-vulkan profile saw only {seen} row"
                          f"{'' if seen == 1 else 's'} (fewer than 8) on amd-radeon") in out
    code, out, _ = run_cli(capsys, *command, "--gpu", "rx-7900-xtx", "--engine", "llama.cpp")
    assert code == 0 and "profile saw" not in out


@pytest.mark.parametrize(("model", "grows"), [("llama-3.1-8b", "context (the only term"),
                                              ("qwen3-30b-a3b", "experts the batch touches")])
def test_decodes_footer_names_what_grows_with_the_batch(
        capsys: pytest.CaptureFixture[str], model: str, grows: str) -> None:
    """A dense model's step grows with batch only through the cache; an MoE model's also
    through the experts more tokens touch (Qwen3-30B-A3B on an H100: 6.1 GB of weights read
    at batch 1, 59.5 GB at batch 64)."""
    assert main(["decode", model, "--gpu", "h100", "--batch", "1,64", "--context", "1000"]) == 0
    assert grows in capsys.readouterr().out


def test_a_cache_copied_over_tp_ranks_says_so_where_its_bytes_are_counted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3's latent is kept whole on each of 8 ranks: one 4,000-token sequence is
    (512 + 64) × 61 layers × 2 bytes × 4,000 = 281 MB, counted 8 times, and decode says so."""
    code, out, _ = run(capsys, "decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                       "--batch", "256", "--context", "4000", "--explain")
    assert code == 0
    one_copy = (512 + 64) * 61 * 2 * 4000 / 1e6
    assert "(×8: copied over the tensor-parallel ranks)" in out.splitlines()[0]
    assert f"(one copy: {one_copy:,.3g} MB)" in out


def test_every_flag_of_every_command_says_what_it_is() -> None:
    """`--help` is where a user learns a flag: none is left bare."""
    import argparse

    from ridgeline.cli import build_parser

    bare = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                bare += [f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
                         for a in sub._actions
                         if not a.help and not isinstance(a, argparse._HelpAction)]
    assert bare == []


@pytest.mark.parametrize("command", [["kv", "llama-3.1-8b", "--context", "4096"],
                                     ["utilization", "--running", "4"]])
def test_a_one_card_command_given_several_says_which_commands_take_several(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, _, err = run_cli(capsys, *command, "--gpu", "h100,h200")
    assert code == 2 and err.count("\n") == 1
    assert "answers for one accelerator" in err and "unknown accelerator" not in err


def test_decode_sizes_the_pool_with_the_engine_settings_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on one H100: vllm serve's defaults leave no room for a 2,000-token
    sequence, so decode prints no expectation; with the settings a serving engineer would
    try (a 97 % budget, 16 seats, a 2,048-token profile, an fp8 cache) it runs, and the batch
    decode allows is the one `fit` finds under the same settings."""
    base = ["llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "fp8",
            "--context", "2000"]
    code, out, _ = run(capsys, "decode", *base, "--json")
    assert code == 0 and json.loads(out)["points"][0]["expected"] is None
    tuned = ["--gpu-memory-utilization", "0.97", "--max-num-seqs", "16",
             "--max-num-batched-tokens", "2048"]
    code, out, _ = run(capsys, "decode", *base, *tuned, "--usage", "serve", "--max-model-len",
                       "2000", "--json")  # as fit's below: 131,072 would not start
    report = json.loads(out)
    assert code == 0 and report["points"][0]["expected"] is not None
    seats = report["engine_max_batch"][0]
    assert "max_num_seqs 16" in seats["settings"]
    code, out, _ = run(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
                       "--kv-dtype", "fp8", "--max-model-len", "2000", *tuned, "--json")
    assert code == 0 and json.loads(out)["engine_max_batch"] == seats["engine_max_batch"] == 16
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                       "llama.cpp", "--gpu-memory-utilization", "0.9")
    assert code == 2 and "sizes a serving engine's pool" in err
    # under llama.cpp the seats are llama-server's slots (-np), as fit reads them
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                       "llama.cpp", "--max-num-seqs", "4", "--json")
    assert code == 0 and json.loads(out)["engine_max_batch"][0]["engine_max_batch"] == 4


def test_utilization_gives_the_whole_steps_share_beside_the_articles_headline(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 at 64 running on 8 H200s: the weights every token reads are at 29 % of the
    ridge, but the step, routed experts and KV reads included, keeps under 5 % of the peak
    busy; the whole-step figure is the share of its floor time its arithmetic takes, each
    matmul at its own dtype's peak as the step is priced (compute time ÷ step time)."""
    from ridgeline import Deployment, decode_floor, resolve_accelerator, resolve_model

    code, out, _ = run(capsys, "utilization", "--gpu", "h200", "--num-gpus", "8", "--running",
                       "64", "--model", "deepseek-v3", "--context", "8192", "--json")
    report = json.loads(out)
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=8)
    f = decode_floor(dep, 64, 8192)
    assert code == 0 and report["step_fraction_of_peak"] == pytest.approx(
        f.compute_time_s / f.step_time_s)
    assert report["step_fraction_of_peak"] < 0.07 < 0.25 < report["fraction_of_arithmetic"]


@pytest.mark.parametrize(("model", "gpu", "weights", "running", "context"), [
    ("deepseek-v3", "h200", None, 64, 8192),  # fp8 step, bf16 router, LM head and QKᵀ·PV
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "h200", None, 120, 32768),  # bf16 step, fp8 attention
    ("llama-3.1-8b", "h100", "fp8", 32, 1024),  # fp8 step, bf16 LM head
])
def test_the_whole_steps_share_is_of_the_peaks_the_step_is_priced_at(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, weights: str | None,
        running: int, context: int) -> None:
    """utilization's whole-step share of peak measures the step against the peaks its FLOPs
    are priced at (each weight category at Deployment.compute_dtype_of's, attention at its
    cache's), not the step dtype's alone: that had read DeepSeek-V3's 8 H200s at 4.0 % (fp8's
    peak for its bf16 matmuls too) where its arithmetic takes 6.5 % of the floor, and
    Qwen3.6-NVFP4's at 5.7 % (bf16's peak for its fp8 attention) where it takes 5.1 %. The
    text and --explain name the dtypes, and the explained division redoes."""
    from ridgeline import Deployment, decode_floor, resolve_accelerator, resolve_model

    num_gpus = 8 if model == "deepseek-v3" else 1
    argv = ["utilization", "--gpu", gpu, "--num-gpus", str(num_gpus), "--running",
            str(running), "--model", model, "--context", str(context),
            *(["--weights", weights] if weights else [])]
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights=weights,
                           num_gpus=num_gpus)
    f = decode_floor(dep, running, context)
    code, out, _ = run(capsys, *argv, "--json")
    report = json.loads(out)
    expected = f.compute_time_s / f.step_time_s  # the step's arithmetic at its priced rates
    assert code == 0 and report["step_fraction_of_peak"] == pytest.approx(expected)
    # the step dtype's peak alone reads another share here
    assert f.flops / (f.step_time_s * dep.peak_flops_per_s) != pytest.approx(expected, rel=1e-3)
    assert report["step_peak_matmuls"] == dep.matmuls_label
    code, out, _ = run(capsys, *argv, "--explain")
    assert code == 0 and f"{expected:.1%} of " in out
    assert f"as the step is priced: {dep.matmuls_label}" in out
    peak = f.flops / f.compute_time_s / 1e12
    assert f"=> peak = {peak:,.4g} TFLOP/s" in out


def test_fit_offers_vllms_own_budget_settings_where_they_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on one H100 at 2,000 tokens, its pool sized from the profile
    (--no-enable-extensible-kv-cache): vLLM's 0.92 budget leaves no room for one sequence; a
    0.95 budget or a 2,048-token profiling pass are the first things to try, and each lever's
    number is the pool those settings leave. Sized after warm-up (v0.34's default) the budget
    is the whole card already: no fraction is offered."""
    argv = ("fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--max-model-len",
            "2000", "--json")
    code, out, _ = run(capsys, *argv, "--no-enable-extensible-kv-cache")
    levers = {lv["name"]: lv["conversations"] for lv in json.loads(out)["levers"]}
    code2, out2, _ = run(capsys, *argv, "--no-enable-extensible-kv-cache",
                         "--gpu-memory-utilization", "0.95")
    assert code == code2 == 0
    assert levers["--gpu-memory-utilization 0.95"] == json.loads(out2)["conversations"] > 0
    assert "--max-num-batched-tokens 2048" in levers
    code, out, _ = run(capsys, *argv)
    measured = json.loads(out)
    assert code == 0 and measured["reserved_fraction"] == 1.0
    names = [lv["name"] for lv in measured["levers"]]
    assert "--max-num-batched-tokens 2048" in names
    assert not any(n.startswith("--gpu-memory-utilization") for n in names)


@pytest.mark.parametrize(("gpu", "engine"), [("mi50", "llama.cpp-rocm"), ("radeon-vii", "llama.cpp-rocm"),
                                             ("rx-6900-xt", "llama.cpp-rocm"), ("mi300x", "vllm"),
                                             ("rx-7900-xtx", "vllm")])
def test_the_default_engine_is_one_that_runs_on_the_card(
        capsys: pytest.CaptureFixture[str], gpu: str, engine: str) -> None:
    """vLLM's ROCm build leaves out Vega 20, MI100 and RDNA2: there the default is llama.cpp."""
    code, out, err = run(capsys, "fit", "qwen3-8b", "--gpu", gpu, "--max-model-len", "4k",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["engine"] == engine


def test_a_strix_halo_of_less_ram_gives_its_gpu_the_same_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The catalog takes a 128 GiB Strix Halo's GPU to be given 96 GiB; a 64 GiB machine
    gives it 48, as a Mac's working set shrinks with its RAM; and one chip has no second GPU
    to add."""
    code, out, _ = run(capsys, "fit", "llama-3.1-8b", "--gpu", "radeon-8060s",
                       "--gpu-memory-gib", "64", "--max-model-len", "4k", "--json")
    report = json.loads(out)
    assert code == 0 and report["memory_bytes_per_gpu"] == 48 * 2**30
    assert not any("GPUs" in lv["name"] for lv in report["levers"])


def test_hardware_takes_gpu_as_every_other_command_spells_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hardware", "--gpu", "h100")
    assert code == 0 and out.startswith("h100-sxm:")
    code, _, err = run(capsys, "hardware", "h100", "--gpu", "h200")
    assert code == 2 and "give one" in err


def test_decodes_footer_names_the_arithmetic_where_a_step_is_past_the_ridge(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's Q4_K_M Llama-3.1-8B on an RX 7900 XTX turns compute-bound by batch 64: each
    user's speed falls there because the arithmetic grows, not the context."""
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "rx-7900-xtx", "--engine",
                       "llama.cpp", "--weights", "q4_k_m", "--batch", "1,4,64", "--context",
                       "128,4096")
    assert code == 0 and "the arithmetic, once the step is past the ridge" in out


def test_an_moe_that_clears_the_ridge_says_its_experts_do_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s at 2,000 tokens: 351 conversations clear the ridge of the
    weights every token reads, while its routed experts, at B × 8/256 tokens each, stay far
    under theirs, and the whole step stays memory-bound: the headline says so, and the
    cautions below it say why (the experts, the cache reads)."""
    code, out, _ = run(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                       "--max-model-len", "2k")
    head = out.splitlines()[0]
    assert code == 0 and head.startswith("clears the ridge")
    assert "but the MoE step stays memory-bound there" in head
    assert "and the routed experts stay under their ridge" in head
    assert f"caution: MoE: the routed experts see B × {8 / 256:.3f} tokens each" in out


def test_a_prefill_table_whose_band_reaches_100_s_reads_every_row_in_seconds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on one H200, 4 prompts of 100,000 tokens: expected ~98 s, its band's
    slow edge past 100 s, so the table's floors, TTFTs and bands are all in seconds (the
    4,000-token row too), and --json keeps its seconds."""
    argv = ["prefill", "llama-3.1-70b", "--gpu", "h200", "--weights", "fp8", "--kv-dtype", "fp8",
            "--prompt-len", "4k,100k", "--batch", "4"]
    code, out, _ = run(capsys, *argv, "--json")
    prompts = json.loads(out)["prompts"]
    assert code == 0 and prompts[1]["expected"]["high_s"] >= 100
    code, text, _ = run(capsys, *argv)
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("prompt "))
    assert "floor s  expected TTFT s" in lines[head]
    for p, row in zip(prompts, lines[head + 1:head + 3], strict=True):
        e = p["expected"]
        band = f"{latency_figure(e['low_s'], 's')}–{latency_figure(e['high_s'], 's')}"
        assert row.split()[1:4] == [latency_figure(p["floor_time_s"], "s"),
                                    latency_figure(e["time_s"], "s"), band]
        assert abs(float(row.split()[2].replace(",", "")) - e["time_s"]) < 0.01  # not ms


def test_prefill_sizes_the_pool_with_the_engine_settings_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An 8,000-token prompt for Llama-3.1-70B fp8 on one H100: no room at vllm serve's
    defaults, a TTFT under a 97 % budget, a 2,048-token step and an fp8 cache."""
    base = ["prefill", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--prompt-len",
            "8000", "--kv-dtype", "fp8"]
    code, out, _ = run(capsys, *base)
    assert code == 0 and "would refuse to start" in out
    code, out, _ = run(capsys, *base, "--gpu-memory-utilization", "0.97",
                       "--max-num-batched-tokens", "2048", "--max-model-len", "8000")
    assert code == 0 and "= TTFT" in out and "refuse" not in out


def test_a_table_where_some_points_run_says_how_many_do_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "decode", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "4",
                       "--batch", "32,128", "--context", "8192")
    assert code == 0
    assert out.splitlines()[0].startswith("1 of 2 points does not fit; the worst, batch 128 at "
                                          "8,192 tokens: ")


def test_a_closed_loop_of_equal_lengths_cautions_that_it_runs_in_lockstep(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4",
            "--num-requests", "40", "--output-len", "64", "--json"]
    code, out, _ = run(capsys, *argv, "--input-len", "512")
    fixed = json.loads(out)
    assert code == 0 and any("lockstep" in c for c in fixed["cautions"])
    code, out, _ = run(capsys, *argv, "--input-len", "uniform:400,600")
    assert code == 0 and not any("lockstep" in c for c in json.loads(out)["cautions"])


@pytest.mark.parametrize(("argv", "said"), [
    (["--model", "deepseek-v3"], "deepseek-v3: MLA and attention-free models are not built"),
    (["--model", "qwen3-30b-a3b", "--fp8"], "fp8 weights are built for dense models only"),
])
def test_measure_refuses_a_model_it_cannot_build_before_touching_the_device(
        argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before the device probes' minutes, and without PyTorch installed at all."""
    assert main(["measure", *argv, "-o", str(tmp_path / "rows.csv")]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_an_id_not_bundled_is_hinted_at_as_the_command_can_take_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--fetch where the command takes it (amdahl now does); where it does not (measure,
    page), the path to a config.json, and how to fetch one."""
    assert main(["amdahl", "--model", "foo/bar", "--gpu", "h100", "--speedup", "2"]) == 2
    assert "--fetch reads its config.json" in capsys.readouterr().err
    assert main(["measure", "--model", "foo/bar", "-o", str(tmp_path / "r.csv")]) == 2
    assert "give the path to its config.json (`ridgeline model foo/bar --fetch`" \
        in capsys.readouterr().err
    assert main(["amdahl", "--fraction", "0.3", "--speedup", "2", "--fetch"]) == 2
    assert "--fetch applies only with --model" in capsys.readouterr().err


def test_fetch_refuses_a_local_file_before_going_to_the_hub(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    assert main(["model", str(config), "--fetch"]) == 2
    assert "is a local file: drop --fetch" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "gpu", "context", "argv"), [
    ("qwen2.5-72b", "apple-m2-ultra-76c", "32768", []),   # llama.cpp keeps the embedding off
    ("mistral-7b", "apple-m2-ultra-76c", "32768", []),    # … and caches Mistral's windows whole
    ("llama-3.1-70b", "h100", "8192", ["--num-gpus", "2"]),
])
def test_kv_and_decode_count_a_cards_memory_alike(
        model: str, gpu: str, context: str, argv: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """kv counted a vLLM deployment where decode counted the card's own engine (llama.cpp on
    a Mac): Qwen2.5-72B at 32K did not fit for kv and fit for decode. The largest batch kv
    says fits, decode fits too, and one more does not."""
    assert main(["kv", model, "--gpu", gpu, "--context", context, *argv, "--json"]) == 0
    held = json.loads(capsys.readouterr().out)["conversations"]
    assert held >= 1
    for batch, fits in ((held, True), (held + 1, False)):
        assert main(["decode", model, "--gpu", gpu, "--context", context, *argv,
                     "--batch", str(batch), "--json"]) == 0
        point = json.loads(capsys.readouterr().out)["points"][0]
        assert point["fits"] is fits, (batch, point)


@pytest.mark.parametrize("argv", [
    ["kv", "qwen3.6-35b-a3b", "--gpu", "mi300x", "--context", "4096"],
    ["roofline", "--model", "qwen3.6-35b-a3b", "--gpu", "mi300x"],
    ["moe", "qwen3.6-35b-a3b", "--gpu", "mi300x"],
])
def test_engine_free_arithmetic_takes_a_format_no_kernel_of_the_card_runs(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An NVFP4 checkpoint on an MI300X: kv, roofline and moe run no kernel and take no
    --engine, so vLLM's NVFP4 kernels being NVIDIA's refused nothing they compute (exit 2)."""
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["decode", "qwen3.6-35b-a3b", "--gpu", "mi300x"]) == 2  # vLLM's, named
    assert "NVFP4 kernels are NVIDIA's" in capsys.readouterr().err


def test_a_memory_fraction_past_one_names_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """A share of memory past 1 is refused as the flag's, as a negative one is (it had been
    "memory fraction must be in (0, 1]", naming no flag, from the settings' own check)."""
    flag = "--gpu-memory-utilization"
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", flag, "1.5")
    assert code == 2 and not out and err.count("\n") == 1
    assert f"argument {flag}: memory fraction must be between 0.001 and 1, got 1.5" in err


def test_the_model_list_starts_each_word_column_under_its_heading(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ridgeline model` lists ids, Hugging Face ids and kinds as words: each column starts
    under its heading (they had been right-aligned under left-aligned headings)."""
    code, out, _ = run(capsys, "model")
    assert code == 0
    lines = out.splitlines()
    header, rows = lines[0], [line for line in lines[1:] if "/" in line]
    hf, kind = header.index("Hugging Face id"), header.index("kind")
    for line in rows:
        assert line[hf - 1] == " " and line[hf] != " " and line[kind] != " "

"""The article-arithmetic audit's findings, held: what --explain shows for each figure, and
what the text says of a point the engine would not run."""

from __future__ import annotations

import json
import math

import pytest

from ridgeline import Deployment, decode_floor, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.engine_versions import engine_release
from ridgeline.kvcache import kv_footprint
from ridgeline.reports.utilization import WEIGHTS_SHARE_LABEL
from ridgeline.units import GB

ARTICLE = ["llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _explain(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    return json.loads(_run(capsys, *argv, "--json", "--explain"))["explain"]


def test_a_point_the_engine_would_not_start_leads_with_the_refusal_and_gives_no_speed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Batch 1 at 2,000 tokens fits the H100 but vLLM would not start: decode leads with that
    verdict, as a deployment that does not fit leads with its DOES NOT FIT, and gives the
    floor's step as arithmetic only, no tok/s; prefill says it alike of the same deployment."""
    decode = _run(capsys, "decode", *ARTICLE, "--batch", "1", "--context", "2000")
    prefill = _run(capsys, "prefill", *ARTICLE, "--prompt-len", "2000")
    # the release a run without --engine-version is priced as, the engine as vLLM spells it
    on = engine_release("vllm", None, named=True)
    assert f"expected on {on}: nothing" in decode and "  fits in memory only: " in decode
    assert "  fits: " not in decode  # 'fits' alone would read as 'runs', beside a refusal
    qualifier = "(arithmetic only: vLLM would not run this)"
    assert qualifier in decode.splitlines()[2] and qualifier in prefill
    assert decode.startswith(f"DOES NOT FIT on {on}: ") and prefill.startswith(
        f"DOES NOT FIT on {on}: ")
    assert "  per user" not in decode and "  aggregate" not in decode
    assert "  tok/s      none: vLLM would not run it (first line)" in decode
    assert "  throughput none: vLLM would not run it (first line)" in prefill
    runs = _run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1",
                "--context", "2000")
    assert "arithmetic only" not in runs and "the floor's" not in runs


def test_the_json_gives_no_floor_speed_the_engine_would_not_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode --json gives a point that fits but that the engine would not run (vLLM would not
    start at its default max_model_len) no speed, floor's or expected, as the text prints
    "tok/s none"; the floor's step time stays, ``engine_runs`` says why not (the text's
    "arithmetic only"), and prefill's JSON says it alike."""
    decode = json.loads(_run(capsys, "decode", *ARTICLE, "--batch", "1", "--context", "2000",
                             "--json"))["points"]
    prefill = json.loads(_run(capsys, "prefill", *ARTICLE, "--prompt-len", "2000", "--json"))
    assert decode[0]["fits"] and prefill["fits"]
    assert decode[0]["floor_per_user_tok_s"] is None \
        and decode[0]["floor_aggregate_tok_s"] is None and prefill["floor_prompt_tok_s"] is None
    assert decode[0]["floor_step_time_s"] > 0 and prefill["floor_time_s"] > 0
    assert decode[0]["expected_none_reason"] and prefill["expected_none_reason"]
    assert decode[0]["per_user_tok_s"] is None and prefill["prompt_tok_s"] is None
    assert decode[0]["engine_runs"] is False and prefill["engine_runs"] is False
    points = json.loads(_run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch",
                             "1,64,2000", "--context", "8k", "--json"))["points"]
    runs = [p["engine_runs"] for p in points]
    assert True in runs and False in runs
    assert runs == [p["expected"] is not None for p in points]
    assert json.loads(_run(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                           "2000", "--json"))["engine_runs"] is True


def test_the_kv_step_divides_per_token_bytes_by_the_tokens_each_sequence_moves(
        capsys: pytest.CaptureFixture[str]) -> None:
    """32 users at 2,000 tokens: batch × the cache's bytes per token × the tokens a step reads
    and writes is the 21 GB the step reads, the per-token figure kv_footprint's."""
    kv = next(s for s in _explain(capsys, "decode", *ARTICLE, "--batch", "32", "--context",
                                  "2000") if s["label"] == "KV bytes read")
    shown = {i["name"]: i["value"] for i in kv["inputs"]}
    per_token = kv_footprint(resolve_model("llama-3.1-70b"), 2000, 2.0).bytes_per_token_growing
    assert shown["KV per token"] == per_token
    assert shown["tokens read and written"] > 2000
    product = shown["batch"] * shown["KV per token"] * shown["tokens read and written"]
    assert product / GB == pytest.approx(kv["result"]["value"], rel=1e-9)


def test_a_hybrid_models_kv_step_adds_what_its_other_layers_move(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss's sliding layers stop at their window: their traffic is its own input, and the
    inputs still add up to the KV read."""
    kv = next(s for s in _explain(capsys, "decode", "gpt-oss-120b", "--gpu", "h100",
                                  "--batch", "8", "--context", "8000")
              if s["label"] == "KV bytes read")
    shown = {i["name"]: i["value"] for i in kv["inputs"]}
    full = shown["KV per token"] * shown["tokens read and written"]
    total = shown["batch"] * (full + shown["window layers' traffic"] * 1e6)
    assert shown["window layers' traffic"] > 0
    assert total / GB == pytest.approx(kv["result"]["value"], rel=1e-9)


@pytest.mark.parametrize("argv", [
    ["decode", *ARTICLE, "--batch", "1,32", "--context", "2000"],
    ["decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "-pp", "2", "--batch", "8",
     "--context", "8000"],
    ["prefill", *ARTICLE, "--prompt-len", "4000"],
    ["roofline", "--gpu", "h100", "--batch", "32", "--intensity", "100"],
    ["utilization", "--gpu", "h100", "--running", "8"],
])
def test_every_explained_step_lists_its_inputs(capsys: pytest.CaptureFixture[str],
                                               argv: list[str]) -> None:
    """'One division you can repeat': no step gives a result without what it divides."""
    bare = [s["label"] for s in _explain(capsys, *argv) if not s["inputs"]]
    assert bare == []


def test_the_speed_steps_repeat_from_their_inputs() -> None:
    """1 ÷ step and batch ÷ step, with the step and the batch listed."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8",
                           "bf16")
    floor = decode_floor(dep, 32, 2000)
    steps = {s.label: s for s in floor.steps}
    per_user = {i.name: i.value for i in steps["per-user speed"].inputs}
    aggregate = {i.name: i.value for i in steps["aggregate speed"].inputs}
    assert isinstance(per_user["step"], float) and isinstance(aggregate["step"], float)
    assert 1e3 / per_user["step"] == pytest.approx(steps["per-user speed"].result.value)
    assert aggregate["batch"] * 1e3 / aggregate["step"] == pytest.approx(
        steps["aggregate speed"].result.value)


def test_moe_keeps_one_word_for_one_quantity(capsys: pytest.CaptureFixture[str]) -> None:
    """The headline's B × k/E counts every expert as read; the table's FLOP/byte is over the
    experts a batch touches (1.6 at batch 32, not 32 × 0.031 = 1.0). Only the headline says
    'intensity', and the column says what it is over."""
    out = _run(capsys, "moe", "qwen3.6-35b-a3b", "--weights", "bf16")
    lines = out.splitlines()
    assert [line for line in lines if "intensity" in line] == [lines[1]]
    header = next(line for line in lines if line.startswith("batch "))
    row = next(line for line in lines if line.startswith("32 "))
    column = header.split("  ")
    assert any("experts read" in c for c in column)
    headline_at_32 = 32 * float(lines[1].split("= B × ")[1].split(";")[0])
    assert not math.isclose(float(row.split()[3]), headline_at_32, rel_tol=0.1)


def test_utilization_sources_the_running_count_from_the_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The running count is the user's --running, which they read from the engine's metric."""
    share = next(s for s in _explain(capsys, "utilization", "--gpu", "h100", "--running", "8")
                 if s["label"] == WEIGHTS_SHARE_LABEL)
    running = next(i for i in share["inputs"] if i["name"] == "running")
    assert running["source"].startswith("--running")


def test_the_model_tables_weights_and_their_working_are_one_figure(
        capsys: pytest.CaptureFixture[str]) -> None:
    """params × bytes per parameter, computed once: the table's 2 B/param figure is the
    --explain step's, and weight_bytes_at's."""
    from ridgeline.params import count_params
    from ridgeline.precision import weight_bytes_at

    data = json.loads(_run(capsys, "model", "llama-3.1-70b", "--json", "--explain"))
    step = next(s for s in data["explain"] if s["label"] == "weights at 2 B/param")
    total = count_params(resolve_model("llama-3.1-70b")).total
    assert step["result"]["value"] == pytest.approx(weight_bytes_at(total, 2.0) / GB)
    table = next(v for k, v in data["weight_bytes"].items() if k.startswith("2 B/param"))
    assert table / GB == pytest.approx(step["result"]["value"])

"""--json as a dashboard reads it: the obvious keys hold the figures the text shows (decode's
and prefill's speeds are the engine's expectation, the floor's under floor_ keys), every answer
names its deployment by the same keys (reports.identity), the one-card form carries what each
item of the several-card form does, fit's verdict has a bool and a code beside its prose, and
a decode point's keys do not come and go."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ridgeline.reports.fit_verdict import VERDICT_CODES
from ridgeline.reports.identity import IDENTITY_KEYS
from tests.conftest import cli_json, run_cli


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return out


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _table_rows(text: str, head: str) -> list[list[str]]:
    """The rows under the table header that starts with ``head``, split on whitespace."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or not line[0].isdigit():
            break
        rows.append(line.split())
    return rows


DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,64", "--context", "2000")


def test_decode_points_speeds_are_the_text_columns(capsys: pytest.CaptureFixture[str]) -> None:
    """The table's expected ms, tok/s/user and tok/s total are each point's step_time_s,
    per_user_tok_s and aggregate_tok_s (the engine's expectation), the floor ms its
    floor_step_time_s: Llama-3.1-8B on an H100 at batch 1, 125.8 tok/s a user, not the
    floor's 219.3."""
    rows = _table_rows(_text(capsys, *DECODE), "batch")
    points = cli_json(capsys, *DECODE)["points"]
    assert [int(r[0]) for r in rows] == [p["batch"] for p in points]
    for row, p in zip(rows, points):
        assert f"{p['floor_step_time_s'] * 1e3:,.2f}" == row[2]
        assert f"{p['step_time_s'] * 1e3:,.2f}" == row[3]
        assert f"{p['per_user_tok_s']:,.1f}" == row[5]
        assert p["aggregate_tok_s"] == pytest.approx(_number(row[6]), abs=0.5)
        assert f"{p['floor_gain_over_batch_1']:,.1f}x" == row[7]
        assert p["step_time_s"] == p["expected"]["time_s"]
        assert p["per_user_tok_s"] < p["floor_per_user_tok_s"]  # the floor is the faster


def test_a_point_the_engine_will_not_run_has_no_speed_but_its_floor(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on one H100 at its 131,072 tokens: vLLM won't start, the text leads
    with that verdict and gives no speed, only the floor's step; the JSON nulls the speeds
    and keeps the floor's under floor_ keys, with the text's reason."""
    argv = ("decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--batch", "1",
            "--context", "2000")
    text = _text(capsys, *argv)
    p = cli_json(capsys, *argv)["points"][0]
    assert (p["step_time_s"], p["per_user_tok_s"], p["aggregate_tok_s"]) == (None, None, None)
    assert not p["engine_runs"] and p["expected"] is None
    floor = re.search(r"step\s+([\d,.]+) ms", text)
    assert floor is not None and f"{p['floor_step_time_s'] * 1e3:,.2f}" == floor.group(1)
    assert "  tok/s      none: vLLM would not run it (first line)" in text
    assert text.startswith(f"DOES NOT FIT on vLLM 0.34: {p['expected_none_reason']}")


def test_decode_points_carry_the_same_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 2,000 tokens: vLLM's pool runs batch 1, not 240 (it holds
    236): the two points have one key set, the absent figures null."""
    data = cli_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,240",
                    "--context", "2000")
    points = data["points"]
    assert {p["engine_runs"] for p in points} == {True, False}
    assert len({tuple(p) for p in points}) == 1
    ran = next(p for p in points if p["engine_runs"])
    assert ran["expected_none_reason"] is None and ran["speculative"] is None
    refused = next(p for p in points if not p["engine_runs"])
    assert refused["expected_none_code"] and refused["per_user_tok_s"] is None
    assert len({tuple(s) for s in data["engine_max_batch"]}) == 1


def test_prefill_time_and_rate_are_the_expected_line(capsys: pytest.CaptureFixture[str]) -> None:
    """prefill's time_s and prompt_tok_s are the 'expected on' line's TTFT and prompt tok/s;
    the floor's the 'time' and 'throughput' lines'."""
    argv = ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "2000")
    text = _text(capsys, *argv)
    data = cli_json(capsys, *argv)
    said = re.search(r"expected on .*: ([\d,.]+) ms \(.*\) = TTFT, ([\d,]+) prompt tok/s", text)
    assert said is not None
    assert f"{data['time_s'] * 1e3:,.1f}" == said.group(1)
    assert f"{data['prompt_tok_s']:,.0f}" == said.group(2)
    floor = re.search(r"time\s+([\d,.]+) ms .*\n\s+throughput ([\d,]+) prompt tok/s", text)
    assert floor is not None
    assert f"{data['floor_time_s'] * 1e3:,.1f}" == floor.group(1)
    assert f"{data['floor_prompt_tok_s']:,.0f}" == floor.group(2)


COMMANDS = {
    "fit": ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"),
    "decode": ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1"),
    "prefill": ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "1000"),
    "kv": ("kv", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--context", "8192"),
    "roofline": ("roofline", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "vllm"),
    "moe": ("moe", "qwen3-30b-a3b", "--gpu", "h100", "--engine", "vllm"),
    "utilization": ("utilization", "--gpu", "h100", "--running", "8", "--model",
                    "llama-3.1-8b"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_answer_names_its_deployment_by_fits_keys(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Each answer carries the deployment's keys fit gives: the card's id, the count and the
    split, the weights, the cache and the engine, with the value fit gives them."""
    data = cli_json(capsys, *COMMANDS[command])
    assert set(IDENTITY_KEYS) <= set(data)
    fit = cli_json(capsys, "fit", data["model"], "--gpu", "h100", "--max-model-len", "8192")
    same = {"accelerator", "num_gpus", "tensor_parallel_size", "pipeline_parallel_size",
            "weights", "kv_dtype", "engine"}
    assert {k: data[k] for k in same} == {k: fit[k] for k in same}


def test_an_answer_without_a_model_names_its_card(capsys: pytest.CaptureFixture[str]) -> None:
    """roofline and utilization without --model: the card and its count, the model's keys
    null, one key set with the answer about a model."""
    for argv in (("roofline", "--gpu", "h100"),
                 ("utilization", "--gpu", "h100", "--running", "8")):
        data = cli_json(capsys, *argv)
        assert set(IDENTITY_KEYS) <= set(data)
        assert (data["accelerator"], data["num_gpus"], data["model"]) == ("h100-sxm", 1, None)


@pytest.mark.parametrize("argv", [
    ("decode", "llama-3.1-8b", "--batch", "1", "--context", "1000"),
    ("prefill", "llama-3.1-8b", "--prompt-len", "1000"),
])
def test_one_card_carries_what_each_of_several_does(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """--gpu h100 alone gives the keys --gpu h100,h200 gives each card (its id, engine and
    catalog price among them), with the same values."""
    one = cli_json(capsys, *argv, "--gpu", "h100")
    several = cli_json(capsys, *argv, "--gpu", "h100,h200")["accelerators"]
    # ridgeline_version and notes stamp the whole answer, not each card
    assert set(several[0]) == set(one) - {"ridgeline_version", "notes"}
    for key in ("accelerator", "engine", "price_per_gpu_hour_usd", "first_whole_batch_to_ridge"):
        assert one[key] == several[0][key]
    assert one["price_per_gpu_hour_usd"] is not None


def test_fit_says_whether_it_fits_as_a_bool_and_a_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit's fits is whether the verdict is not 'does not fit', and verdict_code the
    verdict's snake_case code."""
    for model in ("llama-3.1-70b", "llama-3.1-8b"):
        data = cli_json(capsys, "fit", model, "--gpu", "h100")
        assert data["verdict_code"] == VERDICT_CODES[data["verdict"]]
        assert data["fits"] is (data["verdict_code"] != "does_not_fit")
        assert data["fits"] is (data["conversations"] > 0)


def test_fits_more_gpus_answer_is_in_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B at 131,072 tokens on one H100: the text's 'none alone is enough; N GPUs
    … hold M' is gpus_needed's, its figures as keys."""
    text = _text(capsys, "fit", "llama-3.1-70b", "--gpu", "h100")
    data = cli_json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100")
    more = data["gpus_needed"]
    assert f"levers: none alone is enough; {more['text']}" in text
    said = re.search(r"(\d+) GPUs of (\S+) \(.*\) hold ([\d,]+) at this context", more["text"])
    assert said is not None and more["found"]
    assert (more["num_gpus"], more["accelerator"], more["conversations"]) == (
        int(said.group(1)), said.group(2), int(said.group(3).replace(",", "")))
    assert more["num_gpus"] == more["tensor_parallel_size"] * more["pipeline_parallel_size"]
    assert cli_json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100")["gpus_needed"] is None


def _weights_line(text: str) -> dict[str, float]:
    said = re.search(r"DOES NOT FIT: ([\d,.]+) GB of weights > ([\d,.]+) GB of memory, short by "
                     r"([\d,.]+) GB", text)
    assert said is not None, text
    return dict(zip(("weight_bytes", "capacity_bytes", "shortfall_bytes"),
                    (_number(g) for g in said.groups())))


@pytest.mark.parametrize("argv", [
    ("roofline", "--gpu", "h100", "--model", "llama-3.1-70b"),
    ("moe", "qwen3-235b-a22b", "--gpu", "h100"),
])
def test_weights_that_do_not_load_give_their_figures_as_keys(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """roofline's and moe's DOES NOT FIT line ('141.1 GB of weights > 85.0 GB of memory, short
    by 56.1 GB') is weight_bytes, capacity_bytes and shortfall_bytes, beside weights_fit."""
    said = _weights_line(_text(capsys, *argv))
    data = cli_json(capsys, *argv)
    assert data["weights_fit"] is False
    for key, gb in said.items():
        assert f"{data[key] / 1e9:,.1f}" == f"{gb:,.1f}"


def test_weights_fit_is_null_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    data: dict[str, Any] = cli_json(capsys, "roofline", "--gpu", "h100")
    assert (data["weights_fit"], data["weight_bytes"], data["shortfall_bytes"]) == (
        None, None, None)

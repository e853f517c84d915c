"""Two mends. --explain at a point that fits the memory but the engine refuses (a vLLM that
would not start, a batch past its pool) keeps the floor's arithmetic, the article's figures
among them, and says why the engine does not run it, in an engine check beside the memory
check (the table and --json give it no speed). And an unknown card (--gpu, --gpus, --gpu-file) is refused
before the model loads, so before a --fetch download."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import explain_by_label, explain_inputs, explained, refused_line

# Llama-3.1-70B fp8 with a bf16 cache on one H100: vllm serve would not start at the model's
# 131,072 tokens; at --max-model-len 12,032 it starts, and its pool runs 5 of 2,000 tokens
REFUSED_70B = ["llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16"]
STARTS_AT = "12032"


def speed_steps(steps: list[dict]) -> list[str]:
    """The labels of the steps whose result is a speed."""
    return [s["label"] for s in steps if s["result"]["unit"] == "tok/s"]


def own_block(steps: list[dict], point: str) -> list[dict]:
    """The steps of one point's block (a sweep's, or the block before at_longest's)."""
    return [s for s in steps if s.get("point", point) == point]


def test_decode_explain_at_a_start_vllm_refuses_says_why_beside_the_floor(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The table says "won't start" and --json nulls the speeds: --explain keeps the floor's
    per-user speed (the article's 47 tok/s) and puts the engine's refusal beside the memory
    check."""
    data, steps = explained(capsys, "decode", *REFUSED_70B, "--batch", "1", "--context", "2000")
    point = data["points"][0]
    assert not point["engine_runs"] and point["floor_per_user_tok_s"] is None
    mine = own_block(steps, "batch 1 at 2,000 tokens of context")
    assert "per-user speed" in speed_steps(mine)
    assert not [label for label in speed_steps(mine) if label.startswith("expected")]
    labels = [s["label"] for s in mine]
    assert labels.index("engine check") == labels.index("memory check") + 1
    check = explain_by_label(mine, "engine check")
    assert check["result"]["value"] == "no"
    assert check["result"]["source"] == point["expected_none_reason"]
    assert explain_inputs(check) == {"sequences asked": 1, "sequences vLLM runs at once": 0}
    # the step's own arithmetic stays
    assert explain_by_label(mine, "step time")["result"]["value"] == pytest.approx(
        point["floor_step_time_s"] * 1e3)


def test_decode_explain_where_it_starts_keeps_the_speeds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same point at the length that starts runs: its speeds stay, and no engine check."""
    data, steps = explained(capsys, "decode", *REFUSED_70B, "--batch", "1", "--context", "2000",
                            "--max-model-len", STARTS_AT)
    assert data["points"][0]["engine_runs"]
    labels = speed_steps(steps)
    assert "per-user speed" in labels and "expected per-user speed" in labels
    assert not [s for s in steps if s["label"] == "engine check"]


def test_decode_explain_past_the_pool_names_the_seats_and_no_expected_speed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Batch 8 where the pool runs 5 ("runs ≤ 5" in the table): the floor's gain over batch 1,
    the seats' step, then the engine check naming 8 against them; no expected speed."""
    data, steps = explained(capsys, "decode", *REFUSED_70B, "--batch", "1,8", "--context",
                            "2000", "--max-model-len", STARTS_AT)
    one, eight = data["points"]
    assert one["engine_runs"] and not eight["engine_runs"]
    assert eight["expected_none_code"] == "over_engine_pool"
    held = data["engine_max_batch"][0]["engine_max_batch"]
    assert 1 <= held < 8
    mine = own_block(steps, "batch 8 at 2,000 tokens of context")
    assert not [label for label in speed_steps(mine) if label.startswith("expected")]
    assert [s["label"] for s in mine][-1] == "engine check"
    check = explain_by_label(mine, "engine check")
    assert explain_inputs(check) == {"sequences asked": 8, "sequences vLLM runs at once": held}
    assert check["result"]["source"] == eight["expected_none_reason"]
    gain = explain_by_label(mine, "gain over batch 1")
    assert gain["result"]["value"] == pytest.approx(eight["floor_gain_over_batch_1"])
    # batch 1, which runs, keeps its speeds in its own block
    assert speed_steps(own_block(steps, "batch 1 at 2,000 tokens of context"))


def test_decode_explain_text_prints_the_floor_and_the_engine_check_for_a_refused_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "decode", *REFUSED_70B, "--batch", "1,32", "--context",
                           "2000", "--explain")
    assert code == 0
    working = out.split("How each number was computed:", 1)[1]
    refused = working.split("  batch 32 at", 1)[0]  # batch 1's block: vLLM won't start
    assert "won't start" in out
    assert "=> per user = 47.03 tok/s" in refused  # the article's figure, the floor's
    assert "expected" not in refused
    assert "engine check:" in refused and "vLLM runs it = no" in refused


def test_prefill_explain_at_a_start_vllm_refuses_says_why_beside_the_floor(
        capsys: pytest.CaptureFixture[str]) -> None:
    """prefill's table and --json give no prompt tok/s where vLLM would not start: --explain's
    own block keeps the floor's throughput and says why the engine does not run it; the
    expected throughput is priced at the length that starts."""
    data, steps = explained(capsys, "prefill", *REFUSED_70B, "--prompt-len", "2000")
    assert not data["engine_runs"] and data["floor_prompt_tok_s"] is None
    mine = own_block(steps, "1 x 2,000-token prompt")
    assert speed_steps(mine) == ["throughput"]
    check = explain_by_label(mine, "engine check")
    assert check["result"]["source"] == data["expected_none_reason"]
    assert explain_inputs(check) == {"prompts asked": 1, "prompts vLLM runs at once": 0}
    later = [s for s in steps if s not in mine]
    assert speed_steps(later) == ["expected prompt throughput"]  # priced at 12,032
    ran, run_steps = explained(capsys, "prefill", *REFUSED_70B, "--prompt-len", "2000",
                               "--max-model-len", STARTS_AT)
    assert ran["engine_runs"] and "throughput" in speed_steps(run_steps)


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """fetch_model replaced by one that records the id asked and refuses: a command that
    downloads before it reads its cards names the download, not the card."""
    from ridgeline.errors import InputError

    asked: list[str] = []

    def fetch(model_id: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(model_id)
        raise InputError(f"downloaded {model_id}")

    monkeypatch.setattr("ridgeline.hub.fetch_model", fetch)
    return asked


PLAN_LOAD = ["--rate", "1", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100"]


@pytest.mark.parametrize(("argv", "said"), [
    (["plan", "org/model", "--fetch", "--gpus", "nocard", *PLAN_LOAD],
     "--gpus: unknown accelerator 'nocard'"),
    (["plan", "org/model", "--fetch", "--gpus", "h100,nocard", *PLAN_LOAD],
     "--gpus: unknown accelerator 'nocard'"),
    (["plan", "org/model", "--fetch", "--gpu-file", "/no/such/card.json", *PLAN_LOAD],
     "no such accelerator file: /no/such/card.json"),
    (["fit", "org/model", "--fetch", "--gpu", "nocard", "--max-model-len", "4096"],
     "unknown accelerator 'nocard'"),
    (["fit", "org/model", "--fetch", "--gpu", "h100,nocard", "--max-model-len", "4096"],
     "unknown accelerator 'nocard'"),
    (["fit", "org/model", "--fetch", "--gpu-file", "/no/such/card.json"],
     "no such accelerator file: /no/such/card.json"),
    (["decode", "org/model", "--fetch", "--gpu", "nocard", "--spec-tokens", "1",
      "--spec-method", "mtp"], "unknown accelerator 'nocard'"),
])
def test_an_unknown_card_is_refused_before_the_model_downloads(
        capsys: pytest.CaptureFixture[str], no_download: list[str], argv: list[str],
        said: str) -> None:
    line = refused_line(capsys, *argv)
    assert said in line
    assert no_download == []


def test_a_known_card_still_loads_the_model(capsys: pytest.CaptureFixture[str],
                                            no_download: list[str]) -> None:
    """The check refuses only the unknown: with a known card, the model is fetched (here,
    refused by the stub), as before."""
    line = refused_line(capsys, "plan", "org/model", "--fetch", "--gpus", "h100", *PLAN_LOAD)
    assert "downloaded org/model" in line and no_download == ["org/model"]
    line = refused_line(capsys, "fit", "org/model", "--fetch", "--gpu", "h100",
                        "--max-model-len", "4096")
    assert no_download == ["org/model", "org/model"]

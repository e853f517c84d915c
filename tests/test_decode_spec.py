"""decode --spec-tokens: one speculative verify step per point, priced as simulate prices it,
with the tokens it keeps from the simulator's own formula."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import build_parser
from ridgeline.cost import decode_batch, step_cost
from ridgeline.engines import profile_for
from ridgeline.sim.config import spec_step_s, tokens_per_step
from ridgeline.spec_decode import SpecDecode, spec_step
from tests.conftest import run_cli

VLLM = profile_for("vllm")
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--context", "4096",
          "--max-model-len", "8192")


def _dep() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            engine="vllm")


def test_speeds_are_the_simulators_tokens_a_step_over_the_whole_step() -> None:
    spec = SpecDecode(3, 0.7, 0.05)
    s = spec_step(_dep(), spec, 8, 4096, VLLM)
    assert spec.tokens_per_step == tokens_per_step(3, 0.7)
    assert s.per_user_tok_s == pytest.approx(tokens_per_step(3, 0.7) / s.step_s)
    assert s.aggregate_tok_s == pytest.approx(8 * s.per_user_tok_s)
    assert s.step_s > s.verify_s  # the drafter's passes


def test_a_batch_1_verify_on_a_bandwidth_bound_8b_costs_about_one_decode_step() -> None:
    dep = _dep()
    s = spec_step(dep, SpecDecode(3, 0.7, 0.0), 1, 4096, VLLM)
    plain = step_cost(dep, decode_batch(1, 4096), VLLM).time_s
    assert s.plain_s == pytest.approx(plain)
    assert s.step_s == s.verify_s  # a free drafter adds nothing
    assert 1.0 < s.verify_s / plain < 1.1  # four tokens read the weights once
    assert s.speedup == pytest.approx(tokens_per_step(3, 0.7) * plain / s.verify_s)


def test_drafts_never_accepted_only_slow_decoding_down() -> None:
    assert spec_step(_dep(), SpecDecode(3, 0.0, 0.05), 8, 4096, VLLM).speedup < 1


def test_the_drafter_docstrings_worked_number() -> None:
    assert spec_step_s(20e-3, 15e-3, 3, 0.05) == pytest.approx(22.5e-3)
    assert spec_step_s(20e-3, 15e-3, 3, 0.0) == 20e-3


def test_decode_prints_and_exports_the_verify_step(capsys) -> None:
    code, plain, _ = run_cli(capsys, *DECODE)
    code_spec, text, _ = run_cli(capsys, *DECODE, "--spec-tokens", "3")
    assert code == code_spec == 0
    assert "speculative" not in plain
    assert f"{tokens_per_step(3, 0.7):,.2f} tokens a verify step" in text
    code, out, _ = run_cli(capsys, *DECODE, "--spec-tokens", "3", "--spec-acceptance", "0.5",
                           "--spec-method", "ngram", "--json")
    point = json.loads(out)["points"][0]
    assert point["speculative"]["tokens_per_step"] == tokens_per_step(3, 0.5)
    assert point["speculative"]["method"] == "ngram"


@pytest.mark.parametrize("extra", [("--spec-acceptance", "0.5"),
                                   ("--spec-tokens", "2", "--spec-draft-cost", "2"),
                                   ("--spec-tokens", "500")])
def test_decode_refuses_what_simulate_refuses(capsys, extra: tuple[str, ...]) -> None:
    code, _, err = run_cli(capsys, *DECODE, *extra)
    assert code == 2 and err.count("\n") == 1
    assert run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                   "--max-model-len", "8192", "--concurrency", "1", "--num-prompts", "2",
                   *extra)[2] == err


def test_decode_and_simulate_share_the_flag_definitions() -> None:
    commands = next(a for a in build_parser()._actions if hasattr(a, "choices")
                    and isinstance(a.choices, dict))
    def spec_options(command: str) -> list[tuple[tuple[str, ...], str | None]]:
        return [(tuple(a.option_strings), a.help) for a in commands.choices[command]._actions
                if any(o.startswith("--spec-") for o in a.option_strings)]
    assert len(spec_options("decode")) == 4
    assert spec_options("decode") == spec_options("simulate")


def test_decode_across_cards_prints_each_cards_verify_step_as_one_card_does(capsys) -> None:
    """--gpu h100,h200 with --spec-tokens: each card's speculative line is the one
    `--gpu NAME` alone prints for it, headed by the card, and its speed is the JSON's."""
    argv = ("decode", "llama-3.1-8b", "--batch", "8", "--context", "2048", "--spec-tokens",
            "3", "--spec-acceptance", "0.7")
    code, text, _ = run_cli(capsys, *argv, "--gpu", "h100,h200")
    code_json, out, _ = run_cli(capsys, *argv, "--gpu", "h100,h200", "--json")
    assert code == code_json == 0
    cards = json.loads(out)["accelerators"]
    assert len(cards) == 2
    for card, gpu in zip(cards, ("h100", "h200")):
        spec = card["points"][0]["speculative"]
        alone = [line.strip() for line in run_cli(capsys, *argv, "--gpu", gpu)[1].splitlines()
                 if line.strip().startswith("speculative (")]
        assert len(alone) == 1
        label = card["deployment"].split(" on ")[1].split(",")[0]  # '1 x h100-sxm'
        assert f"{label}: {alone[0]}" in text.splitlines()
        assert f"{spec['per_user_tok_s']:,.1f} tok/s per user" in alone[0]


def test_an_ngram_drafter_adds_no_gpu_time_unless_told(capsys) -> None:
    """vLLM's V1 runner matches an n-gram drafter's tokens on the CPU with no model (0.31): its
    step is the verify alone, where an EAGLE head's adds a drafter pass; --spec-draft-cost
    still prices one. Model Runner V2 (the default release) looks them up on the GPU."""
    steps = {}
    for method, cost in (("ngram", ()), ("eagle", ()), ("ngram", ("--spec-draft-cost", "0.05"))):
        code, out, err = run_cli(capsys, *DECODE, "--engine-version", "0.31", "--spec-tokens",
                                 "3", "--spec-method", method, *cost, "--json")
        assert code == 0, err
        spec = json.loads(out)["points"][0]["speculative"]
        steps[method, cost] = spec
    ngram, eagle = steps["ngram", ()], steps["eagle", ()]
    assert ngram["spec_draft_cost"] == 0 and ngram["step_s"] == ngram["verify_s"]
    assert ngram["lookup_s"] == 0
    assert eagle["step_s"] > eagle["verify_s"]
    told = steps["ngram", ("--spec-draft-cost", "0.05")]
    assert told["step_s"] > told["verify_s"] and told["spec_draft_cost"] == 0.05
    code, out, _ = run_cli(capsys, *DECODE, "--spec-tokens", "3", "--spec-method", "ngram",
                           "--json")
    gpu = json.loads(out)["points"][0]["speculative"]
    assert code == 0 and gpu["lookup_s"] > 0
    assert gpu["step_s"] == pytest.approx(gpu["verify_s"] + gpu["lookup_s"])


def test_an_mtp_drafter_is_named_as_given_and_priced_as_eagle(capsys) -> None:
    """DeepSeek-V3's MTP layer drafts as an EAGLE head is priced; the line names the drafter
    the user gave, then the pricing, and the step is eagle's to the digit."""
    argv = ("decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--spec-tokens", "1")
    steps = {}
    for method in ("mtp", "eagle"):
        code, out, err = run_cli(capsys, *argv, "--spec-method", method)
        assert code == 0, err
        line = next(ln for ln in out.splitlines() if "speculative (" in ln)
        steps[method] = line.split(": ", 1)[1]
        named = "mtp, priced as eagle, " if method == "mtp" else "eagle, "
        assert f"speculative ({named}1 draft accepted" in line
    assert steps["mtp"] == steps["eagle"]

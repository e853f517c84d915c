import dataclasses
import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridgeline.amdahl import (
    end_to_end_speedup,
    explain_lines,
    required_part_speedup,
    speedup_ceiling,
)
from tests.conftest import run_cli

fractions = st.floats(min_value=0.0, max_value=1.0)
speedups = st.floats(min_value=1e-3, max_value=1e3)


def test_2x_attention_kernel_at_18_percent_of_time_is_worth_1_10x() -> None:
    result = end_to_end_speedup(0.18, 2.0)
    assert result.new_time_fraction == pytest.approx(0.91)
    assert round(result.end_to_end_speedup, 2) == 1.10


def test_2x_attention_kernel_at_85_percent_of_time_is_worth_1_74x() -> None:
    assert round(end_to_end_speedup(0.85, 2.0).end_to_end_speedup, 2) == 1.74


def test_ceiling_at_18_percent_is_1_22x_and_at_85_percent_is_6_67x() -> None:
    assert round(speedup_ceiling(0.18).ceiling_speedup, 2) == 1.22
    assert round(speedup_ceiling(0.85).ceiling_speedup, 2) == 6.67


def test_ceiling_is_infinite_when_the_part_is_the_whole_step() -> None:
    assert math.isinf(speedup_ceiling(1.0).ceiling_speedup)


def test_85_percent_part_needs_1_65x_for_a_1_5x_step() -> None:
    result = required_part_speedup(0.85, 1.5)
    assert result.possible
    assert result.required_part_speedup == pytest.approx(1.645, abs=1e-3)


def test_required_speedup_round_trips_through_the_end_to_end_formula() -> None:
    needed = required_part_speedup(0.85, 1.74).required_part_speedup
    assert needed is not None
    assert end_to_end_speedup(0.85, needed).end_to_end_speedup == pytest.approx(1.74)


def test_1_5x_step_from_an_18_percent_part_is_impossible_past_the_1_22x_ceiling() -> None:
    result = required_part_speedup(0.18, 1.5)
    assert not result.possible
    assert result.required_part_speedup is None
    assert "impossible" in result.verdict and "1.22x" in result.verdict


def test_target_equal_to_the_ceiling_is_impossible() -> None:
    ceiling = speedup_ceiling(0.5).ceiling_speedup
    assert not required_part_speedup(0.5, ceiling).possible


def test_any_target_is_reachable_when_the_part_is_the_whole_step() -> None:
    result = required_part_speedup(1.0, 40.0)
    assert result.required_part_speedup == pytest.approx(40.0)


def test_a_part_that_takes_no_time_cannot_change_the_step() -> None:
    assert not required_part_speedup(0.0, 1.1).possible
    assert required_part_speedup(0.0, 1.0).required_part_speedup == 1.0


def test_a_target_below_1_is_a_slowdown_budget_for_the_part() -> None:
    needed = required_part_speedup(0.5, 0.8).required_part_speedup
    assert needed is not None and needed < 1.0
    assert end_to_end_speedup(0.5, needed).end_to_end_speedup == pytest.approx(0.8)


@pytest.mark.parametrize("fraction", [-0.1, 1.1, math.nan])
def test_fraction_outside_0_to_1_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        end_to_end_speedup(fraction, 2.0)


@pytest.mark.parametrize("bad", [0.0, -2.0, math.nan, math.inf])
def test_non_positive_part_speedup_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="part_speedup"):
        end_to_end_speedup(0.5, bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_non_positive_target_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="target_speedup"):
        required_part_speedup(0.5, bad)


def test_explain_lines_substitute_the_numbers_into_the_formula() -> None:
    text = "\n".join(explain_lines(end_to_end_speedup(0.18, 2.0)))
    assert "1 / ((1 - P) + P / S)" in text
    assert "1 / (0.82 + 0.18 / 2)" in text
    assert "1.10x" in text
    assert "1 / 0.15 = 6.67x" in "\n".join(explain_lines(speedup_ceiling(0.85)))
    assert "0.85 / " in "\n".join(explain_lines(required_part_speedup(0.85, 1.5)))
    assert "impossible" in "\n".join(explain_lines(required_part_speedup(0.18, 1.5)))


def test_results_serialise_to_json() -> None:
    for result in (
        end_to_end_speedup(0.18, 2.0),
        speedup_ceiling(0.85),
        required_part_speedup(0.18, 1.5),
    ):
        json.dumps(dataclasses.asdict(result))


@given(fractions, speedups, speedups)
def test_speedup_is_monotone_in_the_part_speedup(p: float, s1: float, s2: float) -> None:
    low, high = sorted((s1, s2))
    slower = end_to_end_speedup(p, low).end_to_end_speedup
    faster = end_to_end_speedup(p, high).end_to_end_speedup
    assert slower <= faster * (1 + 1e-12)


@given(fractions, speedups)
def test_speedup_never_exceeds_the_ceiling(p: float, s: float) -> None:
    gain = end_to_end_speedup(p, s).end_to_end_speedup
    assert gain <= speedup_ceiling(p).ceiling_speedup * (1 + 1e-12)


@given(st.floats(min_value=0.01, max_value=1.0), st.floats(min_value=0.01, max_value=0.999))
def test_required_speedup_round_trips_for_any_reachable_target(p: float, share: float) -> None:
    ceiling = speedup_ceiling(p).ceiling_speedup
    target = 1.0 + share * (min(ceiling, 1e6) - 1.0) if ceiling > 1.0 else 1.0
    needed = required_part_speedup(p, target).required_part_speedup
    assert needed is not None
    assert end_to_end_speedup(p, needed).end_to_end_speedup == pytest.approx(target, rel=1e-6)


# --- the command: the source in --json, the ceiling at P = 1, flags --fraction ignores ---


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "amdahl", *argv)


STEP = ["--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--op", "attention",
        "--batch", "32", "--context", "32k", "--speedup", "2"]  # 141 GB + 343 GB of cache


def test_json_names_the_step_the_fraction_came_from_as_the_text_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, text, _ = _cli(capsys, *STEP)
    assert code == 0
    _, out, _ = _cli(capsys, *STEP, "--json")
    source = json.loads(out)["source"]
    assert source["model"] == "llama-3.1-70b" and source["op"] == "attention"
    assert source["batch"] == 32 and not source["given"]
    first = text.splitlines()[0]
    for shown in (source["model"], source["accelerator"], f"batch {source['batch']}",
                  f"context {source['context_len']:,}", f"{source['engine']} profile",
                  f"{source['fraction']:.1%}"):
        assert shown in first
    assert source["part_time_s"] / source["step_time_s"] == pytest.approx(source["fraction"])
    assert json.loads(out)["end_to_end_speedup"]["fraction"] == source["fraction"]


def test_a_given_fraction_is_marked_given_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _cli(capsys, "--fraction", "0.18", "--speedup", "2", "--json")
    source = json.loads(out)["source"]
    assert source["given"] and source["fraction"] == 0.18 and source["model"] is None


def test_the_whole_step_has_an_unbounded_ceiling_not_infx(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, text, _ = _cli(capsys, "--fraction", "1", "--speedup", "4")
    assert code == 0
    assert "ceiling if the part took no time: unbounded" in text and "inf" not in text
    assert "4.00x end to end" in text
    _, out, _ = _cli(capsys, "--fraction", "1", "--json")
    assert json.loads(out)["speedup_ceiling"]["ceiling_speedup"] is None  # JSON has no inf


@pytest.mark.parametrize(
    "extra",
    [["--batch", "4"], ["--context", "4k"], ["--op", "weights"], ["--engine", "sglang"],
     ["--num-gpus", "2"], ["--batch", "1"]],  # even a value equal to the default
)
def test_a_step_flag_beside_a_given_fraction_is_refused_not_ignored(
    capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    code, out, err = _cli(capsys, "--fraction", "0.3", "--speedup", "2", *extra)
    assert code == 2 and not out
    assert len(err.splitlines()) == 1 and f"{extra[0]} applies only with --model" in err


def test_the_step_defaults_still_apply_with_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _cli(capsys, "--model", "llama-3.1-8b", "--gpu", "h100", "--json")
    source = json.loads(out)["source"]
    assert (source["op"], source["engine"], source["batch"], source["context_len"],
            source["num_gpus"]) == ("attention", "vllm", 1, 2000, 1)


def test_an_op_left_out_is_said_to_be_attention(capsys: pytest.CaptureFixture[str]) -> None:
    _, text, _ = _cli(capsys, "--model", "llama-3.1-8b", "--gpu", "h100")
    assert "--op not given: the attention share" in text
    _, text, _ = _cli(capsys, "--model", "llama-3.1-8b", "--gpu", "h100", "--op", "attention")
    assert "--op not given" not in text


def test_explain_shows_the_share_as_a_division_of_step_cost_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = _cli(capsys, *STEP, "--json", "--explain")
    data = json.loads(out)
    source = data["source"]
    share = next(s for s in data["explain"] if s["label"] == "the part's share")
    # the times as numbers, unrounded (the text shows them to 5 digits)
    times = [i["value"] for i in share["inputs"] if i["unit"] == "ms"]
    assert times == [pytest.approx(source["part_time_s"] * 1e3),
                     pytest.approx(source["step_time_s"] * 1e3)]
    assert share["result"]["value"] == source["fraction"]


def test_the_weights_share_names_only_the_operators_the_model_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dense model's weights share adds up its projections, MLP and lm_head: --explain named
    experts, mamba and linear attention too, parts llama-3.1-8b does not have."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.cost import decode_batch, step_cost
    from ridgeline.engines import profile_for
    from ridgeline.step_share import OP_GROUPS, decode_share

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16",
                           None, 1)
    source = decode_share(dep, "weights", 1, 2000, profile_for("vllm"))
    present = {op.name for op in step_cost(dep, decode_batch(1, 2000), profile_for("vllm")).ops}
    assert source.ops and set(source.ops) <= present & set(OP_GROUPS["weights"])
    assert "experts" not in source.ops and "mamba" not in source.ops
    _, out, _ = _cli(capsys, "--model", "llama-3.1-8b", "--gpu", "h100", "--op", "weights",
                     "--json", "--explain")
    data = json.loads(out)
    assert data["source"]["ops"] == list(source.ops)
    share = next(s for s in data["explain"] if s["label"] == "the part's share")
    assert share["formula"].startswith(f"P = time in ({' + '.join(source.ops)}) ÷ ")


def _within_its_last_digit(value: float, shown: float) -> bool:
    """``value`` is ``shown`` (printed to 4 significant digits) to within one unit of its
    last digit: what a reader's division of printed inputs can promise."""
    return abs(value - shown) <= 10 ** (math.floor(math.log10(shown)) - 3)


@pytest.mark.parametrize("context", ["2000", "8000"])
def test_the_shares_printed_division_reproduces_it(capsys: pytest.CaptureFixture[str],
                                                   context: str) -> None:
    """P = part ÷ step, each as printed: at batch 32 and 8,000 tokens the times printed to 4
    digits, 13.44 / 21.33, gave 0.6301 beside a printed 0.6305."""
    _, out, _ = _cli(capsys, "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "32",
                     "--context", context, "--explain")
    found = re.search(r"time in attention = ([\d.]+) ms\n\s+decode step time = ([\d.]+) ms"
                      r"\n(?:.*\n)*?\s+=> P = ([\d.]+)", out)
    assert found, out
    part, step_ms, share = (float(x) for x in found.groups())
    assert _within_its_last_digit(part / step_ms, share), found.group(0)


def test_a_target_below_1x_is_a_slowdown_budget_not_a_speedup() -> None:
    """0.5x end to end with the part at half the step: 1 / (0.5 + 0.5 / S) = 0.5 gives
    S = 1/3, the part may get 3x slower."""
    r = required_part_speedup(0.5, 0.5)
    assert r.required_part_speedup == pytest.approx(1 / 3)
    assert "slowdown budget" in r.verdict and "3x slower" in r.verdict
    assert "faster" not in r.verdict
    assert required_part_speedup(0.5, 1.0).verdict == "the part may stay as it is"


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.3, 0.7, 0.99])
def test_a_1x_target_leaves_the_part_as_it_is_at_any_share(fraction: float) -> None:
    """G = 1 gives S = P / (1 − (1 − P)) = 1 exactly; in floating point 1 − (1 − 0.3) is
    0.30000000000000004, and the verdict read "the part may get up to 1x slower"."""
    r = required_part_speedup(fraction, 1.0)
    assert r.required_part_speedup == 1.0
    assert r.verdict == "the part may stay as it is"


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "llama-3.1-70b", "--weights", "fp8", "--batch", "8"],
     "vllm's KV pool runs 5 of batch 8"),
    (["--model", "llama-3.1-8b", "--batch", "256"], "vllm's KV pool runs 236 of batch 256")])
def test_a_step_the_engines_pool_cannot_run_has_no_share(
        capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    """As decode: a batch past what vLLM's pool runs at this context is no step to speed up
    (vllm serve's pool, as decode and fit size it: 236 of 2,000 tokens under vLLM 0.34)."""
    code, _, err = run_cli(capsys, "amdahl", *argv, "--gpu", "h100", "--context", "2000")
    assert code == 2 and f"does not fit: {message}" in err


def test_a_share_from_a_profile_that_never_saw_the_card_class_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's Vulkan profile saw few Radeon rows: its share on an RX 7900 XTX is read
    with the same caution decode gives; the ROCm profile's, fitted on dozens, is not."""
    argv = ["--model", "qwen3-8b", "--weights", "q4_k_m", "--op", "weights", "--gpu",
            "rx-7900-xtx"]
    code, out, _ = _cli(capsys, *argv, "--engine", "llama.cpp-vulkan")
    assert code == 0 and "caution: the llama.cpp-vulkan profile saw" in out
    assert "on amd-radeon cards" in out
    code, out, _ = _cli(capsys, *argv, "--engine", "llama.cpp")
    assert code == 0 and "profile saw" not in out


@pytest.mark.parametrize("flag", ["--target", "--speedup"])
@pytest.mark.parametrize("tiny", ["1e-320", "1e-10"])
def test_a_speedup_too_small_to_compute_is_a_one_line_error(
        capsys: pytest.CaptureFixture[str], flag: str, tiny: str) -> None:
    """--target 1e-320 made 1/G overflow to inf, a required S of 0 and a ZeroDivisionError
    (exit 1); --speedup 1e-320 printed '0.00x end to end'. Both stop at MIN_SPEEDUP."""
    from ridgeline.amdahl import MIN_SPEEDUP

    code, out, err = _cli(capsys, "--fraction", "0.5", flag, tiny)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert f"must be at least {MIN_SPEEDUP:g}" in err
    with pytest.raises(ValueError, match="at least"):
        required_part_speedup(0.5, float(tiny))
    with pytest.raises(ValueError, match="at least"):
        end_to_end_speedup(0.5, float(tiny))


def test_a_billionfold_slowdown_is_the_least_read_and_stays_finite(
        capsys: pytest.CaptureFixture[str]) -> None:
    """G = 1e-9 at P = 0.5: S = 0.5 / (1e9 − 0.5), a 2e9x slowdown budget; S = 1e-9 on the
    part gives 1 / (0.5 + 0.5e9) = 2e-9 end to end, shown as such, not 0.00x."""
    need = required_part_speedup(0.5, 1e-9)
    assert need.required_part_speedup == pytest.approx(0.5 / (1e9 - 0.5))
    assert "2,000,000,000x slower" in need.verdict
    code, out, _ = _cli(capsys, "--fraction", "0.5", "--speedup", "1e-9")
    assert code == 0 and f"-> {1 / (0.5 + 0.5 / 1e-9):.3g}x end to end" in out


def test_a_communication_share_on_one_gpu_says_why_it_is_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--op communication without --num-gpus read "part at 0.0% of the time" and a 1.00x
    ceiling, and nothing said one GPU has no collectives to speed up."""
    code, out, _ = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--op", "communication", "--speedup", "2", "--json")
    one = json.loads(out)
    assert code == 0
    assert one["source"]["fraction"] == 0.0
    assert any("one GPU runs no collectives" in n for n in one["notes"])
    code, out, _ = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--op", "communication", "--num-gpus", "2", "--speedup", "2",
                           "--json")
    two = json.loads(out)
    assert code == 0
    assert two["source"]["fraction"] > 0.0 and not two.get("notes")


@pytest.mark.parametrize(("target", "side"), [(1.0000000001, "faster"), (1.001, "faster"),
                                              (0.9999999999, "slower")])
def test_a_target_a_hair_from_1x_prints_a_part_speedup_that_is_not_1x(
        capsys: pytest.CaptureFixture[str], target: float, side: str) -> None:
    """G = 1.0000000001 at P = 0.5 needs S = 1.0000000002, which printed "the part must get
    1x faster" (and G itself "for 1x end to end"): each now prints with the digits that keep
    it off 1, which is what the verdict is about."""
    need = required_part_speedup(0.5, target)
    assert need.required_part_speedup is not None
    shown = re.search(r"([\d.e+]+)x " + side, need.verdict)
    assert shown and float(shown.group(1)) != 1.0, need.verdict
    factor = need.required_part_speedup if side == "faster" else 1 / need.required_part_speedup
    assert _within_its_last_digit(factor, float(shown.group(1)))
    code, out, _ = _cli(capsys, "--fraction", "0.5", "--target", repr(target))
    said = re.search(r"for ([\d.e+]+)x end to end", out)
    assert code == 0 and said and float(said.group(1)) == target, out


def test_a_target_just_inside_the_ceiling_is_not_printed_as_the_ceiling(
        capsys: pytest.CaptureFixture[str]) -> None:
    """G = 1.9999999 at P = 0.5 is possible (S = 2e7): "for 2x end to end" beside a 2.00x
    ceiling read as a contradiction; a ceiling just under a target of 2 read "the ceiling
    is 2.00x" as the reason 2x is impossible."""
    code, out, _ = _cli(capsys, "--fraction", "0.5", "--target", "1.9999999")
    assert code == 0 and "for 1.9999999x end to end: the part must get" in out
    fraction = 0.49999997
    ceiling = speedup_ceiling(fraction).ceiling_speedup
    assert ceiling < 2.0
    verdict = required_part_speedup(fraction, 2.0).verdict
    shown = re.search(r"the ceiling is ([\d.]+)x", verdict)
    assert shown and float(shown.group(1)) < 2.0, verdict


def test_a_share_a_hair_from_0_or_100_percent_is_not_printed_as_either(
        capsys: pytest.CaptureFixture[str]) -> None:
    for fraction in ("0.99999999", "1e-12"):
        code, out, _ = _cli(capsys, "--fraction", fraction, "--speedup", "2")
        shown = re.search(r"part at ([\d.e+-]+)% of the time", out)
        assert code == 0 and shown and 0.0 < float(shown.group(1)) < 100.0, out


@pytest.mark.parametrize("argv", [
    ("--fraction", "0.5", "--target", "1.0000000001"),
    ("--fraction", "0.5", "--target", "0.9999999999"),
    ("--fraction", "0.5", "--target", "2.0000000001"),
    ("--fraction", "0.9999999999", "--speedup", "1.00000000001", "--target", "1.9999999"),
    ("--fraction", "0.85", "--speedup", "2", "--target", "1.5")])
def test_explain_keeps_each_figure_on_the_side_of_1x_the_ceiling_and_the_target_the_verdict_does(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """--explain printed explain's four-to-nine digits whatever they hid: "G = 1 x" and
    "S = 1 x" beside the verdict "the part must get 1.0000000002x faster", a target of
    2.0000000001 as "G = 2 x" beside a ceiling of 2, a 0.9999999999 share as "P = 1"."""
    code, out, err = _cli(capsys, *argv, "--explain")
    assert code == 0, err
    data = json.loads(_cli(capsys, *argv, "--json")[1])
    ceiling = data["speedup_ceiling"]["ceiling_speedup"]
    need, target = data["required_part_speedup"], float(argv[argv.index("--target") + 1])
    truth = {"P": (data["source"]["fraction"], (0.0, 1.0)), "G": (target, (1.0, ceiling)),
             "ceiling": (ceiling, (1.0, target))}
    if need["required_part_speedup"] is not None:
        truth["S"] = (need["required_part_speedup"], (1.0,))
    if (gain := data.get("end_to_end_speedup")) is not None:
        truth["end to end"] = (gain["end_to_end_speedup"], (1.0,))
        truth["new step time"] = (gain["new_time_fraction"], (1.0,))
    seen = set()
    for name, shown in re.findall(r"^ +(?:=> )?(P|G|S|ceiling|end to end|new step time) = "
                                  r"([\d.,e+-]+)", out, re.MULTILINE):
        if name == "S" and "--speedup" in out.split(f"S = {shown}")[1].split("\n")[0]:
            continue  # the part's speedup given, not the one the target needs
        value, marks = truth[name]
        printed = float(shown.replace(",", ""))
        assert all((printed > m) - (printed < m) == (value > m) - (value < m) for m in marks), \
            (name, shown, value)
        seen.add(name)
    assert seen == set(truth), out


def test_the_libraries_explain_lines_keep_g_and_s_off_1x_as_the_verdict_does() -> None:
    """amdahl.explain_lines, the text rendering beside the steps, printed G = 1.0000000001 as
    "G = 1" and the S it needs as "1x" with format(.3g), beside the verdict's 1.0000000002."""
    need = required_part_speedup(0.5, 1.0000000001)
    assert need.required_part_speedup is not None
    text = "\n".join(explain_lines(need))
    s = re.search(r"= ([\d.]+)x$", text)
    g = re.search(r"G = ([\d.]+) ", text)
    assert s and g and float(s.group(1)) > 1.0 and float(g.group(1)) > 1.0, text
    assert s.group(1) in need.verdict
    share = speedup_ceiling(0.9999999999)
    p = re.search(r"1 - ([\d.]+)\)", "\n".join(explain_lines(share)))
    assert p and float(p.group(1)) < 1.0


def test_a_ceiling_in_the_millions_reads_whole_with_separators(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 99.9999 % share: its ceiling, 1 ÷ (1 − P), printed 1000000.00x, the part's
    1e6 on it 1e+06x and the end-to-end 500000.25x; each now reads as a whole number with
    separators, on the same side of 1x and of the target as the figure."""
    code, out, err = run_cli(capsys, "amdahl", "--fraction", "0.999999", "--speedup",
                             "1000000", "--target", "200000")
    assert code == 0, err
    ceiling = speedup_ceiling(0.999999).ceiling_speedup
    gain = end_to_end_speedup(0.999999, 1e6).end_to_end_speedup
    assert f"ceiling if the part took no time: {ceiling:,.0f}x" in out
    assert f"1,000,000x on the part -> {gain:,.0f}x end to end" in out
    assert "e+" not in out and ".00x" not in out


@pytest.mark.parametrize(("fraction", "speedup"), [("0.5", "0.5"), ("0.18", "0.25"),
                                                  ("1", "0.1")])
def test_a_slower_part_is_read_and_called_a_slowdown(
        capsys: pytest.CaptureFixture[str], fraction: str, speedup: str) -> None:
    """--speedup 0.5 is a fair question (a slower kernel, a slower link): Amdahl's division
    holds for S < 1. It was printed "0.5x on the part -> 0.67x end to end", a speedup's
    words for a slowdown; now each figure below 1x also says how many times slower it is,
    1 ÷ the figure --json gives."""
    code, out, err = _cli(capsys, "--fraction", fraction, "--speedup", speedup, "--json")
    assert code == 0, err
    gain = json.loads(out)["end_to_end_speedup"]
    assert gain["end_to_end_speedup"] < 1  # a slower part slows the step
    line = _cli(capsys, "--fraction", fraction, "--speedup", speedup)[1].splitlines()[1]
    slower = re.fullmatch(r"  \S+x on the part \(([\d.,]+)x slower\) -> \S+x end to end "
                          r"\(([\d.,]+)x slower\)", line)
    assert slower, line
    part, whole = (float(x.replace(",", "")) for x in slower.groups())
    assert math.isclose(part, 1 / float(speedup), rel_tol=5e-3)
    assert math.isclose(whole, 1 / gain["end_to_end_speedup"], rel_tol=5e-3)
    assert whole <= part  # the rest of the step dilutes it


def test_a_faster_part_says_nothing_of_slowing(capsys: pytest.CaptureFixture[str]) -> None:
    for speedup in ("1", "2"):
        assert "slower" not in _cli(capsys, "--fraction", "0.5", "--speedup", speedup)[1]


def test_amdahl_says_does_not_fit_alike_and_names_the_weights_where_the_pool_holds_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.1-70b on one H100 said DOES NOT FIT, llama-3.1-8b on a TPU v5e 'does not fit:
    vllm's KV pool runs 0 of batch 1', where its weights leave the pool nothing."""
    code, _, over = run_cli(capsys, "amdahl", "--model", "llama-3.1-70b", "--gpu", "h100",
                            "--speedup", "2")
    assert code == 2 and over.startswith("ridgeline: error: does not fit: 141.1 GB of weights")
    code, _, none = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "tpu-v5e",
                            "--speedup", "2")
    assert code == 2 and len(none.strip().splitlines()) == 1
    assert "KV pool holds no sequence of 2,000 tokens" in none and "GB of weights" in none
    assert "runs 0 of batch" not in none

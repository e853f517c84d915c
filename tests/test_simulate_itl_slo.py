"""simulate --slo-itl-ms: the run's ITL at --percentile (else plan's 90) judged against it as
plan judges a check (serving_load.itl_kept), named in the text, --json and --explain; goodput
stays per request (TTFT and TPOT); without the flag nothing says so. plan's printed check
command carries it, and reads the check's ITL and verdict back."""

from __future__ import annotations

import json
import shlex

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.plan import plan
from ridgeline.reports.plan import PlanReport
from ridgeline.serving_load import SLO_PERCENTILE, Load, Slo, itl_kept
from tests.conftest import run_cli

SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "6", "--num-requests", "200")


def _json(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    code, out, err = run_cli(capsys, *SIM, *flags, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("percentile", [None, "99"])
def test_the_itl_slo_is_the_runs_itl_at_the_percentile_judged_as_plan_does(
        capsys: pytest.CaptureFixture[str], percentile: str | None) -> None:
    asked = ["--percentile", percentile] if percentile else []
    base = _json(capsys, *asked)
    p = float(percentile) if percentile else SLO_PERCENTILE
    itl_s = base["itl_s"]["p99" if percentile else "p90"]
    for limit_s in (0.5 * itl_s, 2 * itl_s):
        data = _json(capsys, *asked, "--slo-itl-ms", repr(limit_s * 1e3))
        verdict = data["itl_slo"]
        assert verdict["percentile"] == p and verdict["itl_s"] == pytest.approx(itl_s)
        assert verdict["met"] is itl_kept(verdict["itl_s"], limit_s)
        assert verdict["met"] is (limit_s > itl_s)
        assert data["settings"]["slo_itl_s"] == pytest.approx(limit_s)
        # goodput is per request: an ITL SLO alone gives none, and leaves the rest as it was
        assert data["goodput_req_s"] is None and data["itl_s"] == base["itl_s"]


def test_text_and_explain_name_the_itl_slo(capsys: pytest.CaptureFixture[str]) -> None:
    itl_s = _json(capsys)["itl_s"]["p90"]
    code, out, _ = run_cli(capsys, *SIM, "--slo-ttft-ms", "500", "--slo-itl-ms",
                           repr(0.5 * itl_s * 1e3), "--explain")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("ITL SLO:"))
    assert f"p90 ITL {itl_s * 1e3:,.1f} ms >" in line and "MISSED" in line
    assert "  ITL SLO: the p90 of the gaps between streamed chunks" in out
    assert out.index("goodput:") < out.index("ITL SLO:")  # goodput as before, then the ITL


def test_without_the_flag_nothing_names_an_itl_slo(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--slo-ttft-ms", "500")
    assert "itl_slo" not in data and "slo_itl_s" not in data["settings"]
    code, out, _ = run_cli(capsys, *SIM, "--slo-ttft-ms", "500", "--explain")
    assert code == 0 and "ITL SLO" not in out


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "fast"])
def test_a_bad_itl_slo_is_refused_in_one_line(capsys: pytest.CaptureFixture[str],
                                             value: str) -> None:
    code, out, err = run_cli(capsys, *SIM, f"--slo-itl-ms={value}")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "argument --slo-itl-ms: ITL SLO must be" in err


def test_plans_check_command_reads_the_checks_itl_and_verdict_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B at 4 req/s on L40S with a 60 ms p90 ITL SLO: the printed simulate command
    carries --slo-itl-ms, and its --window reads the winner's check: the same ITL, kept."""
    model = resolve_model("llama-3.1-8b")
    result = plan(model, Load(4.0, "1000", "250"), Slo(0.5, 0.05, 90, 0.06), ("l40s",),
                  workers=1)
    win = result.winner
    assert win is not None and win.verified and win.sim_itl_s is not None
    report = PlanReport(model, "meta-llama/Llama-3.1-8B", result, win.max_model_len)
    check = report.launch.check_command(win)
    assert "--slo-itl-ms 60" in check
    argv = shlex.split(check)[1:]  # past "ridgeline"
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    verdict = json.loads(out)["itl_slo"]
    assert verdict["itl_s"] == pytest.approx(win.sim_itl_s, rel=1e-9) and verdict["met"]


PREEMPTING = ("simulate", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8",
              "--input-len", "2048", "--output-len", "500", "--max-model-len", "4096")


@pytest.mark.parametrize(("rate", "requests"), [("5", "200"), ("0.1", "100")])
def test_an_itl_mean_past_its_p99_says_why(capsys: pytest.CaptureFixture[str], rate: str,
                                           requests: str) -> None:
    """Llama-3.1-70B fp8 on one H100 with 188 blocks at 5 req/s: ITL mean 38.0 ms against a
    p99 of 34.5 ms, unexplained, read as a misprint. The few preempted requests' gaps (each a
    wait to be readmitted and a recompute) carry the mean past 99 of every 100, and a line
    under the table says so, naming the preemptions; at 0.1 req/s nothing is preempted, the
    mean stays under the p99, and no line is printed."""
    argv = (*PREEMPTING, "--rate", rate, "--num-requests", requests)
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    run = json.loads(out)
    itl, preempted = run["itl_s"], run["preemptions"]
    text = run_cli(capsys, *argv)[1]
    said = [line for line in text.splitlines() if "ITL's mean" in line]
    if rate == "0.1":
        assert preempted == 0 and itl["mean"] <= itl["p99"] and not said
        return
    assert preempted > 0 and itl["mean"] > itl["p99"]
    assert said == [f"  (ITL's mean, {itl['mean'] * 1e3:,.1f} ms, is above its p99, "
                    f"{itl['p99'] * 1e3:,.1f} ms: fewer than 1 in 100 gaps are far longer than "
                    f"the rest, those of the {preempted:,} preemptions, each a preempted "
                    "request's wait to be readmitted and the recompute of its tokens before its "
                    "next one)"]
    table = text.splitlines()
    assert table.index(said[0]) == next(i for i, line in enumerate(table)
                                        if line.startswith("queueing")) + 1

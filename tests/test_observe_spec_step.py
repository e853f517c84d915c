"""observe on a server that drafts, its acceptance length known: each step priced as the
verify step decode --spec-tokens prices (spec_decode.spec_step), a token's time that step over
the tokens it keeps a request; without an acceptance length, plain decoding, and a note says so."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli_spec import SPEC_DRAFT_COST
from ridgeline.cost import decode_batch, step_time_s
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.observe import read_source
from ridgeline.prometheus import split_scrapes
from ridgeline.sim.config import acceptance_for_tokens, tokens_per_step
from ridgeline.spec_decode import SpecDecode, spec_step
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
SGLANG_SPEC = FIXTURES / "sglang_spec_metrics.txt"  # three scrapes 10 s apart, a drafter's
L8 = ("--model", "llama-3.1-8b", "--gpu", "h100", "--context", "4000")
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3")
RUNNING, ITL_S = 40, 0.006  # the window's batch and mean time between a request's tokens


def sglang_scrapes(tmp_path: Path, accept_length: float | None, itl_s: float = ITL_S) -> str:
    """Two SGLang scrapes ten seconds apart at 40 running, 10,000 tokens timed ``itl_s``
    apart in its ITL histogram between them; its accept-length gauge (0 before any drafted
    step), where asked."""
    text = ""
    for time_s, accepted, count in ((1000, 0.0, 1000), (1010, accept_length, 11_000)):
        text += (f"# scrape_time {time_s}\n"
                 f"sglang:num_running_reqs{{model_name=\"m\"}} {RUNNING}\n"
                 "sglang:num_queue_reqs{model_name=\"m\"} 0\n"
                 "sglang:token_usage{model_name=\"m\"} 0.3\n"
                 "# TYPE sglang:inter_token_latency_seconds histogram\n"
                 f"sglang:inter_token_latency_seconds_bucket{{model_name=\"m\",le=\"+Inf\"}} "
                 f"{count}\n"
                 f"sglang:inter_token_latency_seconds_sum{{model_name=\"m\"}} {count * itl_s}\n"
                 f"sglang:inter_token_latency_seconds_count{{model_name=\"m\"}} {count}\n")
        if accept_length is not None:
            text += f"sglang:spec_accept_length{{model_name=\"m\"}} {accepted}\n"
    path = tmp_path / "sglang.prom"
    path.write_text(text)
    return str(path)


def observe_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, "observe", *argv, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def l8_sglang() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            engine="sglang")


@pytest.mark.parametrize("drafts,acceptance", [(1, 0.5), (3, 0.7), (5, 0.9), (3, 0.0)])
def test_acceptance_for_tokens_inverts_tokens_per_step(drafts: int, acceptance: float) -> None:
    kept = tokens_per_step(drafts, acceptance)
    assert acceptance_for_tokens(drafts, kept) == pytest.approx(acceptance, abs=1e-12)
    assert SpecDecode.observed(drafts, kept, SPEC_DRAFT_COST).tokens_per_step \
        == pytest.approx(kept)


def test_sglangs_accept_length_is_read_as_its_drafted_readings_mean(tmp_path: Path) -> None:
    """The first scrape's 0 is no drafted step, and is left out of the mean."""
    obs = read_source(sglang_scrapes(tmp_path, 2.5))
    assert obs.spec_tokens_per_step == pytest.approx(2.5) == obs.spec_accept_length
    assert read_source(sglang_scrapes(tmp_path, None)).spec_tokens_per_step is None


def accept_lengths(text: str) -> list[float]:
    """sglang:spec_accept_length at each scrape of a saved file."""
    return [s.value("sglang:spec_accept_length") or 0.0 for s in split_scrapes(text)]


def test_sglangs_accept_length_is_the_windows_readings_mean() -> None:
    """Each reading is the mean over the logging interval before its scrape: the first
    scrape's is from before the window, so only the later scrapes' are averaged."""
    text = SGLANG_SPEC.read_text()
    readings = accept_lengths(text)
    obs = read_source(str(SGLANG_SPEC))
    assert len(readings) >= 3
    assert obs.spec_tokens_per_step == pytest.approx(statistics.fmean(readings[1:]))
    assert obs.spec_tokens_per_step != pytest.approx(statistics.fmean(readings))
    assert obs.spec_accept_length == max(readings)  # the sign a drafter serves, as before


def test_one_sglang_scrape_reads_its_own_accept_length(tmp_path: Path) -> None:
    first = SGLANG_SPEC.read_text().split("# scrape_time 1010\n")[0]
    path = tmp_path / "one.prom"
    path.write_text(first)
    assert read_source(str(path)).spec_tokens_per_step == pytest.approx(
        accept_lengths(first)[0])


def test_an_accept_length_only_before_the_window_gives_none(tmp_path: Path) -> None:
    """The later scrapes read 0 (no drafted step reported): the first scrape's reading is
    the interval before the window, not read as the window's."""
    text = re.sub(r"(\n# scrape_time 1010\n(?s:.*))", lambda m: re.sub(
        r"(sglang:spec_accept_length\{[^}]*\}) [\d.]+", r"\1 0.0", m[1]),
        SGLANG_SPEC.read_text())
    path = tmp_path / "before.prom"
    path.write_text(text)
    readings = accept_lengths(text)
    assert readings[0] > 0 and not any(readings[1:])
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step is None
    assert any("only at the first scrape" in note for note in obs.notes)


def test_a_drafted_sglang_step_is_priced_as_decodes_verify_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """EAGLE3's 3 drafts keeping 2.5 tokens a step: the step is spec_step's for 40 requests
    at 4,000 tokens, a token's time that step ÷ 2.5, and the ITL gap moves with it."""
    source = sglang_scrapes(tmp_path, 2.5)
    drafted = observe_json(capsys, source, *L8, *EAGLE3)
    plain = observe_json(capsys, source, *L8)  # the gauge alone: no draft length to price
    spec = SpecDecode(3, acceptance_for_tokens(3, 2.5), SPEC_DRAFT_COST)
    verify = spec_step(l8_sglang(), spec, RUNNING, 4000, profile_for("sglang"))
    assert drafted["predicted_step_s"] == pytest.approx(verify.step_s)
    assert drafted["predicted_itl_s"] == pytest.approx(verify.step_s / 2.5)
    assert drafted["tokens_per_step"] == pytest.approx(spec.tokens_per_step) \
        == pytest.approx(2.5)
    assert drafted["speculative"]["spec_acceptance"] == pytest.approx(spec.acceptance)
    plain_ms = step_time_s(l8_sglang(), decode_batch(RUNNING, 4000),
                           profile_for("sglang")) * 1e3
    assert plain["predicted_itl_s"] * 1e3 == pytest.approx(plain_ms) \
        == pytest.approx(plain["predicted_step_s"] * 1e3)
    assert plain["speculative"] is None and plain["tokens_per_step"] == 1
    measured = ITL_S * 1e3
    assert drafted["gap"]["itl"] == pytest.approx(drafted["predicted_itl_s"] * 1e3 / measured - 1)
    assert drafted["gap"]["itl"] < plain_ms / measured - 1  # what plain pricing would say
    # a token's floor is the step's over the tokens it keeps, so 6 ms is no longer under it,
    # priced or not: the gauge's 2.5 tokens a step are a drafter's, its flags given or not
    floor_ms = decode_floor(l8_sglang(), RUNNING, 4000).step_time_s * 1e3
    assert drafted["floor_itl_s"] * 1e3 == pytest.approx(floor_ms / 2.5) \
        == pytest.approx(plain["floor_itl_s"] * 1e3)
    assert drafted["floor_itl_s"] * 1e3 < measured < floor_ms
    assert not plain["likely_weights"]  # no lighter format blamed for the drafter's speed
    # a plain step against a drafting server's token: no percentage, the drafter the reason
    assert plain["gap"] == {} and "drafts are not priced" in plain["gap_not_comparable"]
    assert not drafted["gap_not_comparable"]
    assert any("nor its drafts priced" in note for note in plain["notes"])


def test_without_an_acceptance_length_the_drafters_step_stays_plain_and_a_note_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = sglang_scrapes(tmp_path, None)
    drafted = observe_json(capsys, source, *L8, *EAGLE3)
    plain = observe_json(capsys, source, *L8)
    assert drafted["predicted_itl_s"] == pytest.approx(plain["predicted_itl_s"])
    assert drafted["speculative"] is None and drafted["tokens_per_step"] == 1
    assert any(note.startswith("drafts are not priced") for note in drafted["notes"])
    assert not any("drafts are not priced" in note for note in plain["notes"])


def test_a_vllm_bench_with_an_acceptance_length_prices_its_verify_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vllm bench serve's spec_decode_acceptance_length with --spec-tokens 2: a token's time
    is the mean step ÷ 2.2, set against the bench's TPOT; the load's prompts arrive 2.2 times
    as often a step, as each request finishes in fewer steps."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**bench, "spec_decode_acceptance_length": 2.2}))
    base = (str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    drafted = observe_json(capsys, *base, "--spec-tokens", "2")
    plain = observe_json(capsys, *base)
    assert drafted["tokens_per_step"] == pytest.approx(2.2)
    assert drafted["predicted_itl_s"] == pytest.approx(drafted["predicted_step_s"] / 2.2)
    assert drafted["prompts_per_step"] == pytest.approx(plain["prompts_per_step"] * 2.2)
    assert drafted["gap"]["itl"] == pytest.approx(
        drafted["predicted_itl_s"] * 1e3 / bench["mean_tpot_ms"] - 1)
    assert any("drafts are not priced" in note for note in plain["notes"])


def test_no_measurement_row_is_written_from_a_drafted_window(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The measurements format has no speculative-decoding column: a drafted window's
    per-token speed, read by calibrate as plain decoding, would be wrong; a plain one's is
    written (20 ms a token: over either's floor)."""
    for drafting in (True, False):
        rows = tmp_path / f"rows-{drafting}.csv"
        source = sglang_scrapes(tmp_path, 2.5 if drafting else None, 0.020)
        report = observe_json(capsys, source, *L8, *(EAGLE3 if drafting else ()),
                              "--emit-measurements", str(rows))
        assert rows.exists() is not drafting
        assert any("a drafter served the window" in note for note in report["notes"]) \
            is drafting


def test_an_accept_length_past_the_drafts_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "observe", sglang_scrapes(tmp_path, 2.5), *L8,
                           "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1")
    assert code == 2 and "2.50 tokens a verify step" in err
    assert len(err.strip().splitlines()) == 1


def test_spec_draft_cost_prices_observes_verify_step_as_decode_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-draft-cost reaches observe's verify step: a costlier drafter predicts a longer
    step (decode's spec_step at that cost), and --json says the cost it priced."""
    source = sglang_scrapes(tmp_path, 2.5)
    default = observe_json(capsys, source, *L8, *EAGLE3)
    costly = observe_json(capsys, source, *L8, *EAGLE3, "--spec-draft-cost", "0.2")
    spec = SpecDecode(3, acceptance_for_tokens(3, 2.5), 0.2)
    verify = spec_step(l8_sglang(), spec, RUNNING, 4000, profile_for("sglang"))
    assert costly["predicted_step_s"] == pytest.approx(verify.step_s)
    assert costly["predicted_step_s"] > default["predicted_step_s"]
    assert costly["speculative"]["spec_draft_cost"] == 0.2
    assert default["speculative"]["spec_draft_cost"] == SPEC_DRAFT_COST


@pytest.mark.parametrize("cost", ["1.5", "nan", "-0.1"])
def test_a_drafter_cost_outside_0_to_1_is_refused_by_observe(
        cost: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check decode and simulate make, in one line, exit 2."""
    code, _, err = run_cli(capsys, "observe", sglang_scrapes(tmp_path, 2.5), *L8, *EAGLE3,
                           "--spec-draft-cost", cost)
    assert code == 2 and "a drafter pass's cost is a share of the target's time" in err
    assert len(err.strip().splitlines()) == 1

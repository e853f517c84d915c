"""observe reads a vLLM drafter's acceptance from vLLM's own sources: its /metrics counters
(1 + accepted ÷ drafts over the window, vllm/v1/spec_decode/metrics.py) and its log's
SpecDecoding lines (their mean acceptance lengths weighted by the tokens each drafted); with
--spec-tokens each step is priced as decode's verify step, as SGLang's gauge is priced
(test_observe_spec_step.py); a source without them reads as it did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli_spec import SPEC_DRAFT_COST
from ridgeline.engine_metrics import SPEC_ACCEPTED_TOKENS, SPEC_COUNTERS, SPEC_DRAFTS
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor
from ridgeline.observe import read_source
from ridgeline.prometheus import split_scrapes
from ridgeline.sim.config import acceptance_for_tokens
from ridgeline.spec_decode import SpecDecode, spec_step
from tests.conftest import run_cli
from tests.test_observe_spec_step import L8, RUNNING, observe_json

FIXTURES = Path(__file__).parent / "fixtures"
SPEC_METRICS = FIXTURES / "vllm_spec_metrics.txt"  # two scrapes 10 s apart, an EAGLE of 3
SPEC_LOG = FIXTURES / "vllm_spec_server.log"  # two SpecDecoding lines, two formats
# an n-gram drafter's window: many steps proposed no draft (no match), each timed all the same
NGRAM_METRICS = FIXTURES / "vllm_ngram_metrics.txt"
ITL = "vllm:inter_token_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"


def counter(text: str, name: str) -> list[float]:
    """A counter's value at each scrape of a saved file."""
    return [s.value(name) or 0.0 for s in split_scrapes(text)]


def kept_over_window(text: str) -> float:
    """1 + accepted ÷ drafts, each the counter's rise between the file's two scrapes."""
    drafts, accepted = (counter(text, names[0]) for names in (SPEC_DRAFTS, SPEC_ACCEPTED_TOKENS))
    return 1 + (accepted[1] - accepted[0]) / (drafts[1] - drafts[0])


def rise(text: str, name: str) -> float:
    """A counter's rise between the file's first and last scrapes."""
    values = counter(text, name)
    return values[-1] - values[0]


def tokens_per_itl_reading(text: str) -> float:
    """(generation tokens − TTFT readings) ÷ ITL readings over the window: every output's
    tokens, less each request's first (timed as its TTFT), over the later outputs timed."""
    return ((rise(text, "vllm:generation_tokens_total") - rise(text, f"{TTFT}_count"))
            / rise(text, f"{ITL}_count"))


def step_ms(text: str) -> float:
    """The ITL histogram's mean reading over the window, a request's step."""
    return rise(text, f"{ITL}_sum") / rise(text, f"{ITL}_count") * 1e3


def l8_vllm() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))


def test_vllms_counters_give_one_plus_accepted_over_drafts_and_a_tokens_itl() -> None:
    """26,000 drafts keeping 39,000 tokens over the window: 2.5 a verify step; an EAGLE
    drafts at every step, so the 65,500 generation tokens less 500 first tokens over the
    26,000 ITL readings are 2.5 too, and the histogram's 15 ms a request's step is 6 ms a
    token."""
    text = SPEC_METRICS.read_text()
    obs = read_source(str(SPEC_METRICS))
    kept = kept_over_window(text)
    assert obs.spec_tokens_per_step == pytest.approx(kept) == pytest.approx(2.5)
    drafted = counter(text, "vllm:spec_decode_num_draft_tokens_total")
    assert obs.spec_draft_tokens == pytest.approx(drafted[1] - drafted[0])
    assert tokens_per_itl_reading(text) == pytest.approx(kept)
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(step_ms(text)
                                                          / tokens_per_itl_reading(text))
    assert obs.latency_ms["itl"]["count"] == rise(text, f"{ITL}_count")
    assert any("tokens an ITL reading covered over the window" in note for note in obs.notes)
    drafts = counter(text, SPEC_DRAFTS[0])
    by_position = [[v for _, v in s.samples[SPEC_COUNTERS[-1]]] for s in split_scrapes(text)]
    rates = [(b - a) / (drafts[1] - drafts[0]) for a, b in zip(*by_position, strict=True)]
    assert sum(rates) == pytest.approx(kept - 1)  # a draft's accepted tokens, by position
    shown = ", ".join(f"{r:.2f}" for r in rates)
    assert any(shown in note and "over the window" in note for note in obs.notes)


def test_one_scrape_reads_the_counters_since_the_server_started(tmp_path: Path) -> None:
    last = SPEC_METRICS.read_text().split("# scrape_time 1010\n")[1]
    path = tmp_path / "one.prom"
    path.write_text(last)
    obs = read_source(str(path))
    accepted, drafts = (counter(last, names[0])[0] for names in (SPEC_ACCEPTED_TOKENS,
                                                                SPEC_DRAFTS))
    assert obs.spec_tokens_per_step == pytest.approx(1 + accepted / drafts)
    assert any("since the server started (a single scrape)" in note for note in obs.notes)


def test_a_restart_reads_the_drafts_of_the_run_after_it(tmp_path: Path) -> None:
    """The second scrape's counters below the first's, and its process started later: the
    server restarted, and the two scrapes after it are the run read: 600 drafts and 1,500
    accepted tokens between them (1 + 1,500 ÷ 600), not a fall, nor the run before it. (A fall
    with the process start unmoved and the prompt counter held is no restart:
    test_observe.py.)"""
    text = SPEC_METRICS.read_text()
    first, second = text.split("# scrape_time 1010\n")

    def restarted(drafts: float, accepted: float) -> str:
        page = second
        for name, value in (("drafts", drafts), ("draft_tokens", 3 * drafts),
                            ("accepted_tokens", accepted)):
            page = re.sub(rf"(spec_decode_num_{name}_total\{{[^}}]*\}}) [\d.]+",
                          rf"\g<1> {value}", page)
        return page.rstrip("\n") + "\nprocess_start_time_seconds 1005\n"

    path = tmp_path / "restart.prom"
    path.write_text(first.rstrip("\n") + "\nprocess_start_time_seconds 900\n"
                    "# scrape_time 1010\n" + restarted(1000, 3000)
                    + "# scrape_time 1020\n" + restarted(1600, 4500))
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step == pytest.approx(1 + (4500 - 3000) / (1600 - 1000))
    assert obs.duration_s == 10
    assert any("between the scrapes 0 s and 10 s" in note
               and "read the 2 scrapes after it" in note for note in obs.notes)


def test_more_accepted_than_drafted_tokens_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Draft tokens rising 30,000 while 39,000 are accepted: no drafter's counters."""
    first, second = SPEC_METRICS.read_text().split("# scrape_time 1010\n")
    broken = re.sub(r"(spec_decode_num_draft_tokens_total\{[^}]*\}) [\d.]+", r"\1 60000.0",
                    second)
    path = tmp_path / "broken.prom"
    path.write_text(first + "# scrape_time 1010\n" + broken)
    code, _, err = run_cli(capsys, "observe", str(path), *L8)
    assert code == 2 and "not one server's counters" in err
    assert len(err.strip().splitlines()) == 1


def test_a_drafted_vllm_step_is_priced_as_decodes_verify_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-tokens 3 (vLLM's EAGLE by default) keeping the counters' 2.5 tokens: the step
    is spec_step's for 40 requests at 4,000 tokens, a token's time that step ÷ 2.5; without
    the flags the step is plain and a note says the drafter's steps are not priced."""
    kept = kept_over_window(SPEC_METRICS.read_text())
    drafted = observe_json(capsys, str(SPEC_METRICS), *L8, "--spec-tokens", "3")
    plain = observe_json(capsys, str(SPEC_METRICS), *L8)
    spec = SpecDecode(3, acceptance_for_tokens(3, kept), SPEC_DRAFT_COST)
    verify = spec_step(l8_vllm(), spec, RUNNING, 4000, profile_for("vllm"))
    assert drafted["predicted_step_s"] == pytest.approx(verify.step_s)
    assert drafted["predicted_itl_s"] == pytest.approx(verify.step_s / kept)
    assert drafted["tokens_per_step"] == pytest.approx(kept)
    assert drafted["speculative"]["spec_acceptance"] == pytest.approx(spec.acceptance)
    assert plain["speculative"] is None and plain["tokens_per_step"] == 1
    assert any("vLLM's drafter proposed" in note and "nor its drafts priced" in note
               for note in plain["notes"])
    assert not any("vLLM's drafter proposed" in note for note in drafted["notes"])


def test_the_logs_spec_lines_are_weighted_by_their_drafts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Lines of 2.00 over 900 draft tokens and 3.00 over 300 (drafts of 3: 300 and 100):
    1 + 500 accepted ÷ 400 drafts = 2.25, not the lines' plain mean of 2.5."""
    text = SPEC_LOG.read_text()
    accepted = [float(n) for n in re.findall(r"\bAccepted: (\d+) tokens", text)]
    drafted = [float(n) for n in re.findall(r"\bDrafted: (\d+) tokens", text)]
    means = [float(n) for n in re.findall(r"Mean acceptance length: ([\d.]+)", text)]
    assert len(means) == 2
    drafts = sum(d / 3 for d in drafted)  # each draft holds the drafter's 3 tokens
    obs = read_source(str(SPEC_LOG))
    assert obs.spec_tokens_per_step == pytest.approx(1 + sum(accepted) / drafts)
    assert obs.spec_tokens_per_step != pytest.approx(sum(means) / len(means))
    assert obs.spec_draft_tokens == sum(drafted)
    report = observe_json(capsys, str(SPEC_LOG), *L8, "--spec-tokens", "3")
    # what a token's time divides by: over all steps, as the lines' throughputs give it
    assert report["tokens_per_step"] == pytest.approx(obs.spec_tokens_per_decode_step)
    assert report["speculative"]["spec_acceptance"] == pytest.approx(
        acceptance_for_tokens(3, obs.spec_tokens_per_step))
    assert report["predicted_itl_s"] == pytest.approx(report["predicted_step_s"]
                                                       / obs.spec_tokens_per_decode_step)


def test_a_spec_lines_negative_accepted_count_is_refused_by_its_line_and_field(
        tmp_path: Path) -> None:
    """A SpecDecoding line's numbers are read with their sign so that a negative one is
    refused naming its line and field, as a negative Drafted is: 'Accepted: -10 tokens'
    beside 'Drafted: 300 tokens' is no drafter's count, not a weight to average by."""
    stats = next(line for line in SPEC_LOG.read_text().splitlines() if "Avg prompt" in line)
    spec = ("INFO 11-29 12:00:01 [loggers.py:1] SpecDecoding metrics: Mean acceptance length: "
            "2.00, Accepted: {} tokens, Drafted: 300 tokens\n")
    path = tmp_path / "negative.log"
    path.write_text(stats + "\n" + spec.format(-10))
    with pytest.raises(InputError, match=r"negative\.log, line 2: Accepted is -10"):
        read_source(str(path))
    path.write_text(stats + "\n" + spec.format(150))  # the same line, counted: read
    assert read_source(str(path)).spec_tokens_per_step == pytest.approx(2.0)


def test_an_older_spec_line_says_a_drafter_serves_but_not_what_it_keeps(tmp_path: Path) -> None:
    """v0.8.3-0.8.4's line has no mean acceptance length: a drafter, its tokens unread."""
    stats = next(line for line in SPEC_LOG.read_text().splitlines() if "Avg prompt" in line)
    path = tmp_path / "old.log"
    path.write_text(stats + "\nINFO 11-29 12:00:01 [loggers.py:1] SpecDecoding metrics: Draft "
                    "acceptance rate: 40.0%, Accepted: 120 tokens, Drafted: 300 tokens\n")
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step is None and obs.spec_draft_tokens == 300
    assert any("without a mean acceptance length" in note for note in obs.notes)


def test_without_the_spec_counters_the_window_reads_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same scrapes, the drafter's counters left out: no acceptance, the ITL histogram's
    readings as they are, no drafter note, and a measurements row written (a drafted window
    writes none)."""
    text = SPEC_METRICS.read_text()
    plain_text = "\n".join(line for line in text.splitlines()
                           if not any(name.removesuffix("_total") in line
                                      for name in SPEC_COUNTERS)) + "\n"
    path = tmp_path / "plain.prom"
    path.write_text(plain_text)
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step is None and obs.spec_draft_tokens is None
    seconds, outputs = counter(text, f"{ITL}_sum"), counter(text, f"{ITL}_count")
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(
        (seconds[1] - seconds[0]) / (outputs[1] - outputs[0]) * 1e3)
    for source, drafting in ((path, False), (SPEC_METRICS, True)):
        rows = tmp_path / f"rows-{drafting}.csv"
        report = observe_json(capsys, str(source), *L8, "--emit-measurements", str(rows))
        assert any("drafter" in note for note in report["notes"]) is drafting
        assert rows.exists() is not drafting


def test_an_unpriced_drafter_divides_the_floor_by_the_tokens_a_step_keeps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --spec-tokens the step is priced plain, but the measured time is still a
    token's of a drafting server (the histogram's step ÷ the counters' 2.5): set against the
    floor of a whole step, it read as a server outrunning its hardware ("check --weights").
    A token's floor is the step's ÷ the tokens a step keeps; with the drafter's flags and no
    acceptance read, ÷ its drafts + 1, the most a verify step keeps. Nor is the plain step set
    against that token as a percentage (it measured the drafter: "+172%")."""
    kept = kept_over_window(SPEC_METRICS.read_text())
    step_floor_ms = decode_floor(l8_vllm(), RUNNING, 4000).step_time_s * 1e3
    plain = observe_json(capsys, str(SPEC_METRICS), *L8)
    assert plain["speculative"] is None
    measured = read_source(str(SPEC_METRICS)).latency_ms["itl"]["mean"]
    assert step_floor_ms / kept < measured < step_floor_ms  # a token's floor, a step's
    assert plain["floor_itl_s"] * 1e3 == pytest.approx(step_floor_ms / kept)
    assert not plain["likely_weights"]
    assert not any("under the" in c and "floor" in c for c in plain["cautions"])
    # nor a percentage between a plain step and a drafting server's token (16.3 against 6.0)
    assert plain["gap"] == {} and "drafts are not priced" in plain["gap_not_comparable"]
    priced = observe_json(capsys, str(SPEC_METRICS), *L8, "--spec-tokens", "3")
    assert priced["gap"]["itl"] == pytest.approx(priced["predicted_itl_s"] * 1e3 / measured - 1)
    counters_left_out = "\n".join(
        line for line in SPEC_METRICS.read_text().splitlines()
        if not any(name.removesuffix("_total") in line for name in SPEC_COUNTERS)) + "\n"
    path = tmp_path / "unread.prom"
    path.write_text(counters_left_out)
    flagged = observe_json(capsys, str(path), *L8, "--spec-tokens", "3")
    assert flagged["speculative"] is None  # no acceptance read: the step priced plain
    assert flagged["floor_itl_s"] * 1e3 == pytest.approx(step_floor_ms / (3 + 1))


def test_an_ngram_drafters_itl_is_divided_by_the_tokens_a_reading_covered() -> None:
    """An n-gram drafter without a match proposes nothing: its step is timed (one ITL
    reading) and keeps 1 token, but is no draft. 20,000 drafts keep 2.2 tokens each, while
    the 36,000 readings covered 60,400 − 400 first tokens, 1.67 each: the step's 12 ms is
    7.2 ms a token, not 5.5."""
    text = NGRAM_METRICS.read_text()
    obs = read_source(str(NGRAM_METRICS))
    kept, covered = kept_over_window(text), tokens_per_itl_reading(text)
    assert rise(text, SPEC_DRAFTS[0]) < rise(text, f"{ITL}_count")  # steps that drafted none
    assert 1 < covered < kept
    assert obs.spec_tokens_per_step == pytest.approx(kept)  # the verify step's, as before
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(step_ms(text) / covered)
    assert obs.latency_ms["itl"]["mean"] > step_ms(text) / kept
    assert any(f"the {covered:,.2f} tokens an ITL reading covered" in note
               and f"1 + accepted ÷ drafts, {kept:,.2f}" in note for note in obs.notes)


def test_an_ngram_drafters_token_is_its_verify_step_over_the_tokens_of_all_its_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--spec-tokens 3: the verify step's acceptance is the drafted steps' (1 + accepted ÷
    drafts, 2.2), but a token's time is that step over the tokens a request's step kept over
    all its steps, (60,400 − 400 first) ÷ (60,000 − 24,000 accepted) = 1.67, as the measured
    ITL is: the 20,000 drafts came in 36,000 steps, so the verify step carries the drafts of
    20,000 ÷ 36,000 of its rows, not every row's."""
    text = NGRAM_METRICS.read_text()
    kept = kept_over_window(text)
    generated = rise(text, "vllm:generation_tokens_total") - rise(text, f"{TTFT}_count")
    steps = generated - rise(text, SPEC_ACCEPTED_TOKENS[0])
    every = generated / steps
    drafted = observe_json(capsys, str(NGRAM_METRICS), *L8, "--spec-tokens", "3")
    spec = SpecDecode(3, acceptance_for_tokens(3, kept), SPEC_DRAFT_COST)
    drafts = rise(text, SPEC_DRAFTS[0])
    verify = spec_step(l8_vllm(), spec, RUNNING, 4000, profile_for("vllm"), drafts / steps,
                       rise(text, "vllm:spec_decode_num_draft_tokens_total") / drafts)
    assert drafted["speculative"]["drafted_share"] == pytest.approx(drafts / steps)
    assert drafted["speculative"]["verify_tokens"] == verify.verify_tokens < RUNNING * (3 + 1)
    assert every == pytest.approx(tokens_per_itl_reading(text)) and every < kept
    assert drafted["speculative"]["spec_acceptance"] == pytest.approx(spec.acceptance)
    assert drafted["tokens_per_step"] == pytest.approx(every)
    assert drafted["tokens_per_step_over"] == "all decode steps"
    assert drafted["predicted_itl_s"] == pytest.approx(verify.step_s / every)
    measured = step_ms(text) / tokens_per_itl_reading(text)
    assert drafted["gap"]["itl"] == pytest.approx(drafted["predicted_itl_s"] * 1e3 / measured - 1)
    assert not any("acceptance length, which counts only" in c for c in drafted["cautions"])


def test_without_a_ttft_histogram_the_itl_is_divided_by_the_tokens_the_counters_give(
        tmp_path: Path) -> None:
    """The first tokens unknown (no TTFT histogram), the readings' tokens are not measured:
    each is divided by the tokens a request's step kept over all its steps as the generation
    and accepted counters give them, each request's first token counted as a step (60,400 ÷
    36,400: 1.66, where the readings covered 1.67 and the drafted steps kept 2.2)."""
    text = NGRAM_METRICS.read_text()
    path = tmp_path / "no-ttft.prom"
    path.write_text("\n".join(line for line in text.splitlines() if TTFT not in line) + "\n")
    obs = read_source(str(path))
    generated = rise(text, "vllm:generation_tokens_total")
    every = generated / (generated - rise(text, SPEC_ACCEPTED_TOKENS[0]))
    assert obs.spec_tokens_per_request_step == pytest.approx(every)
    assert tokens_per_itl_reading(text) > every
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(step_ms(text) / every)
    assert any(f"the {every:,.2f} tokens a request's decode step kept over all its steps (no "
               f"reading of {TTFT}" in note for note in obs.notes)
    assert any("first token counted as a step (no TTFT histogram)" in note
               for note in obs.notes)


def test_counters_that_cover_under_a_token_a_reading_fall_back(tmp_path: Path) -> None:
    """Generation tokens that rose less than the readings they were timed in (no two
    counters of one server): not a measure, the acceptance length instead."""
    text = NGRAM_METRICS.read_text()
    first, second = text.split("# scrape_time 1010\n")
    low = re.sub(r"(vllm:generation_tokens_total\{[^}]*\}) [\d.]+", r"\1 110000.0", second)
    path = tmp_path / "low.prom"
    path.write_text(first + "# scrape_time 1010\n" + low)
    obs = read_source(str(path))
    covered = tokens_per_itl_reading(path.read_text())
    assert covered < 1
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(step_ms(text)
                                                          / kept_over_window(text))
    assert any(f"is {covered:,.2f}, outside 1 to" in note for note in obs.notes)

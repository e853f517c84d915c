"""A drafting server's verify step carries the drafts its rows proposed, not every row's whole
draft: vLLM schedules a request with no draft this step (an n-gram drafter without a match, a
request near max_model_len) its one fed token, and counts no draft for it. Its counters give
the share of the decode steps that drafted (drafts ÷ steps) and the draft tokens a drafting
step proposed (draft tokens ÷ drafts); the target then runs rows × (1 + share × drafts a
drafted row) tokens (spec_decode.verify_row_tokens). A model drafter (EAGLE) still runs its
passes for every row, an n-gram lookup for the drafting rows alone; where no counts are given
(SGLang, an older bench), every row is priced drafting, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli_spec import SPEC_DRAFT_COST
from ridgeline.engines import profile_for
from ridgeline.observe import read_source
from ridgeline.sim.config import acceptance_for_tokens
from ridgeline.spec_decode import SpecDecode, drafted_rows, spec_step, verify_row_tokens
from tests.conftest import run_cli
from tests.test_observe_request_steps import FIXTURES, HALF, vllm_window
from tests.test_observe_spec_step import EAGLE3, L8, RUNNING, observe_json, sglang_scrapes

DRAFTS = 3  # the windows' drafter: 3 draft tokens a draft (vllm_window)


def l8_vllm() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))


def spec_for(obs_kept: float, method: str = "eagle") -> SpecDecode:
    return SpecDecode(DRAFTS, acceptance_for_tokens(DRAFTS, obs_kept), SPEC_DRAFT_COST, method)


@pytest.mark.parametrize("rows,share,each", [(40, 0.5, 3.0), (40, 1.0, 2.5), (7, 0.3, 2.2),
                                             (33, 0.9, 1.4), (1, 1.0, 3.0)])
def test_a_verify_steps_rows_carry_the_share_that_drafted_their_drafts(
        rows: int, share: float, each: float) -> None:
    """rows × (1 + share × drafts a drafted row) tokens in all, rounded; each row its fed
    token and no more than the drafter's whole draft; round(share × rows) rows drafting."""
    tokens = verify_row_tokens(rows, DRAFTS, share, each)
    assert len(tokens) == rows
    assert sum(tokens) == rows + round(rows * share * each)
    assert all(1 <= n <= DRAFTS + 1 for n in tokens)
    assert sum(n > 1 for n in tokens) == min(rows, max(-(-round(rows * share * each) // DRAFTS),
                                                       round(rows * share)))
    assert verify_row_tokens(rows, DRAFTS) == [DRAFTS + 1] * rows  # every row its whole draft


def test_the_docstrings_worked_numbers() -> None:
    """40 rows, half drafting 3: 100 tokens (20 of 4, 20 of 1); 36,000 steps, 18,000 drafts
    of 54,000 draft tokens: half the rows drafting 3.0."""
    half = verify_row_tokens(40, DRAFTS, 0.5)
    assert sum(half) == 40 * (1 + 0.5 * DRAFTS) == 100
    assert sorted(set(half)) == [1, DRAFTS + 1] and half.count(DRAFTS + 1) == 20
    assert drafted_rows(36_000, 18_000, 54_000) == (0.5, 3.0)
    assert drafted_rows(19_900, 20_000, None) == (1.0, None)  # a few fewer steps: all drafted
    with pytest.raises(ValueError, match="a draft proposes at least one"):
        drafted_rows(36_000, 18_000, 9_000)
    with pytest.raises(ValueError, match="at most its 3"):
        verify_row_tokens(40, DRAFTS, 0.5, 3.5)


def test_half_the_rows_drafting_price_a_verify_step_of_their_tokens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The counters: 18,000 drafts of 54,000 draft tokens in 36,000 steps. The priced step
    carries 40 × (1 + 0.5 × 3) tokens, the verify step the code prices for that share, and
    the predicted ITL is that step over the tokens of all steps: below the all-rows step's."""
    path = vllm_window(tmp_path, **HALF)
    obs = read_source(str(path))
    share = HALF["drafts"] / HALF["steps"]
    assert obs.spec_drafted_share == pytest.approx(share) == 0.5
    assert obs.spec_drafts_per_draft == pytest.approx(DRAFTS)
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", str(DRAFTS))
    drafted = report["speculative"]
    assert drafted["verify_tokens"] == RUNNING * (1 + share * DRAFTS) == 100
    assert drafted["drafted_share"] == pytest.approx(share)
    assert obs.spec_tokens_per_step is not None and obs.spec_tokens_per_request_step
    spec = spec_for(obs.spec_tokens_per_step)
    half = spec_step(l8_vllm(), spec, RUNNING, 4000, profile_for("vllm"), share, DRAFTS)
    every_row = spec_step(l8_vllm(), spec, RUNNING, 4000, profile_for("vllm"))
    assert half.verify_tokens == drafted["verify_tokens"]
    assert every_row.verify_tokens == RUNNING * (DRAFTS + 1)
    assert drafted["step_s"] == pytest.approx(half.step_s)
    assert half.verify_s < every_row.verify_s and half.step_s < every_row.step_s
    every = obs.spec_tokens_per_request_step
    assert report["predicted_itl_s"] == pytest.approx(half.step_s / every)
    assert report["predicted_itl_s"] < every_row.step_s / every
    code, out, _ = run_cli(capsys, "observe", str(path), *L8, "--spec-tokens", str(DRAFTS))
    assert code == 0 and "50% of the rows drafting, 3.00 draft tokens each: " \
        f"{half.verify_tokens:,} tokens a verify step" in out


def test_an_ngram_lookup_is_charged_for_the_drafting_rows_an_eagle_for_every_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """At the same half share the target's pass is one step, but EAGLE's drafter runs its
    passes for all 40 rows (vLLM keeps every request in them), an n-gram's for the 20 that
    drafted: the n-gram's step is the shorter, its drafter's part half the passes' rows.
    An n-gram lookup on the V1 runner (0.31) is priced only where --spec-draft-cost asks: it
    runs on the CPU and its step is the verify alone; Model Runner V2 (the default release)
    adds its GPU lookup over every row (vllm_mrv2_drafter.ngram_lookup_s)."""
    path = vllm_window(tmp_path, **HALF)
    obs = read_source(str(path))
    assert obs.spec_tokens_per_step is not None
    dep, profile = l8_vllm(), profile_for("vllm")
    eagle = spec_step(dep, spec_for(obs.spec_tokens_per_step), RUNNING, 4000, profile, 0.5)
    ngram = spec_step(dep, spec_for(obs.spec_tokens_per_step, "ngram"), RUNNING, 4000,
                      profile, 0.5)
    assert eagle.verify_s == pytest.approx(ngram.verify_s)
    assert 0 < ngram.step_s - ngram.verify_s < eagle.step_s - eagle.verify_s
    v1 = (*L8, "--engine-version", "0.31")
    report = observe_json(capsys, str(path), *v1, "--spec-tokens", str(DRAFTS),
                          "--spec-method", "ngram", "--spec-draft-cost", str(SPEC_DRAFT_COST))
    assert report["speculative"]["step_s"] == pytest.approx(ngram.step_s)
    report = observe_json(capsys, str(path), *v1, "--spec-tokens", str(DRAFTS),
                          "--spec-method", "ngram")
    assert report["speculative"]["step_s"] == pytest.approx(ngram.verify_s)
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", str(DRAFTS),
                          "--spec-method", "ngram")
    lookup = report["speculative"]["lookup_s"]
    assert lookup > 0 and report["speculative"]["step_s"] == pytest.approx(ngram.verify_s + lookup)
    # every row drafting, the two drafters' passes cover the same rows, as before
    whole = [spec_step(dep, spec_for(2.0, m), RUNNING, 4000, profile) for m in ("eagle", "ngram")]
    assert whole[0].step_s == pytest.approx(whole[1].step_s)


def test_an_eagle_window_every_step_of_which_drafted_prices_as_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """26,000 drafts in 26,000 steps, every one whole: the share is 1 and the verify step the
    all-rows step, as SGLang's (no counts) is."""
    path = vllm_window(tmp_path, steps=26_000, drafts=26_000, accepted=39_000)
    obs = read_source(str(path))
    assert obs.spec_drafted_share == 1.0 and obs.spec_drafts_per_draft == DRAFTS
    assert obs.spec_tokens_per_step is not None
    report = observe_json(capsys, str(path), *L8, "--spec-tokens", str(DRAFTS))
    before = spec_step(l8_vllm(), spec_for(obs.spec_tokens_per_step), RUNNING, 4000,
                       profile_for("vllm"))
    assert report["speculative"]["step_s"] == before.step_s
    assert report["speculative"]["verify_tokens"] == RUNNING * (DRAFTS + 1)
    sglang = observe_json(capsys, sglang_scrapes(tmp_path, 2.5), *L8, *EAGLE3)
    assert sglang["speculative"]["drafted_share"] == 1.0
    assert sglang["speculative"]["verify_tokens"] == RUNNING * (DRAFTS + 1)


def test_explain_shows_the_drafted_share_and_its_source(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = vllm_window(tmp_path, **HALF)
    code, out, _ = run_cli(capsys, "observe", str(path), *L8, "--spec-tokens", str(DRAFTS),
                           "--explain")
    assert code == 0
    share = next(line for line in out.splitlines() if "drafted share =" in line)
    assert "0.5" in share and "vllm:spec_decode_num_drafts_total ÷ the decode steps" in share
    assert any("verify tokens" in line and "100" in line for line in out.splitlines())


def test_more_draft_tokens_a_draft_than_the_flags_draft_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = vllm_window(tmp_path, **HALF)
    code, _, err = run_cli(capsys, "observe", str(path), *L8, "--spec-tokens", "2")
    assert code == 2 and "3.00 draft tokens a draft" in err and len(err.strip().splitlines()) == 1


def test_a_benchs_drafts_and_draft_tokens_give_the_share(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vllm bench serve's spec_decode_num_drafts over the 67,500 steps its output leaves
    (128,000 tokens less 500 first and 60,000 accepted), its spec_decode_draft_tokens over
    the drafts: 30,000 drafts of 75,000 tokens, 0.44 of the rows drafting 2.5."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    run = {**bench, "spec_decode_acceptance_length": 3.0, "spec_decode_num_drafts": 30_000,
           "spec_decode_draft_tokens": 75_000, "spec_decode_accepted_tokens": 60_000}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(run))
    obs = read_source(str(path))
    steps = bench["total_output_tokens"] - bench["completed"] - 60_000
    assert obs.spec_drafted_share == pytest.approx(30_000 / steps)
    assert obs.spec_drafts_per_draft == pytest.approx(2.5)
    report = observe_json(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                          "--spec-tokens", str(DRAFTS))
    rows = round(report["batch"])
    assert report["speculative"]["verify_tokens"] == rows + round(rows * 30_000 / steps * 2.5)
    older = {k: v for k, v in run.items() if k != "spec_decode_num_drafts"}
    path.write_text(json.dumps(older))
    assert read_source(str(path)).spec_drafted_share is None

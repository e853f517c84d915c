"""observe on a server that drafts: its seats and modelled pool as fit and simulate size them,
from the drafter's launch flags, or SGLang's own accept-length gauge where no flag says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec
from ridgeline.engines import EngineProfile, profile_for
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.observe import read_source
from ridgeline.reports.observe import observe_report
from ridgeline.sglang_memory import sglang_max_running_requests, sglang_speculative_requests
from tests.conftest import run_cli

L8 = ("--model", "llama-3.1-8b", "--gpu", "h100")
EAGLE3 = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3")
POOL_TOKENS = 400_000


def scrape_file(tmp_path: Path, accept_length: float | None, pool: bool = True) -> str:
    """Two SGLang scrapes ten seconds apart, 40 then 46 running and 5 waiting; the gauge of
    its accept length (0 in the first: no step had drafted yet), and its pool, where asked."""
    text = ""
    for time_s, running, accepted in ((1000, 40, 0.0), (1010, 46, accept_length)):
        text += (f"# scrape_time {time_s}\nsglang:num_running_reqs{{model_name=\"m\"}} "
                 f"{running}\nsglang:num_queue_reqs{{model_name=\"m\"}} 5\n"
                 "sglang:token_usage{model_name=\"m\"} 0.3\n")
        if pool:
            text += f"sglang:max_total_num_tokens{{model_name=\"m\"}} {POOL_TOKENS}\n"
        if accept_length is not None:
            text += f"sglang:spec_accept_length{{model_name=\"m\"}} {accepted}\n"
    path = tmp_path / "sglang.prom"
    path.write_text(text)
    return str(path)


def l8() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            engine="sglang")


def profile() -> EngineProfile:
    return profile_for("sglang")


def test_sglangs_accept_length_gauge_is_read_as_its_largest(tmp_path: Path) -> None:
    assert read_source(scrape_file(tmp_path, 3.1)).spec_accept_length == pytest.approx(3.1)
    assert read_source(scrape_file(tmp_path, None)).spec_accept_length is None


def test_observe_seats_a_drafting_sglang_as_its_drafter_default(tmp_path: Path) -> None:
    """The pool it reports holds 100 sequences of 4,000 tokens; a drafter's server runs 48 of
    them (max_running_requests' default), not the 4,096 its tokens would give."""
    plain = observe_report(read_source(scrape_file(tmp_path, 0.0)), l8(), profile(), 4000)
    drafting = observe_report(read_source(scrape_file(tmp_path, 3.1)), l8(), profile(), 4000)
    assert plain.seats == sglang_max_running_requests(POOL_TOKENS, 4000)
    assert drafting.seats == sglang_speculative_requests("eagle") < plain.seats
    assert drafting.pool_batch == drafting.seats < plain.pool_batch
    assert drafting.queue_cause == "seats"
    assert any("sglang:spec_accept_length" in note for note in drafting.obs.notes)
    assert drafting.seats_label.endswith("SGLang's default with a drafter")


def test_observe_and_fit_agree_on_a_drafters_seats_from_its_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = scrape_file(tmp_path, None, pool=False)  # no pool, no gauge: the flags alone
    code, out, err = run_cli(capsys, "fit", *L8, "--engine", "sglang", "--max-model-len", "4000",
                             *EAGLE3, "--json")
    assert code == 0, err
    fitted = json.loads(out)
    code, out, err = run_cli(capsys, "observe", source, *L8, "--context", "4000", *EAGLE3,
                             "--json")
    assert code == 0, err
    observed = json.loads(out)
    assert observed["engine_max_batch"] == fitted["engine_max_batch"] == fitted["max_num_seqs"]
    code, out, err = run_cli(capsys, "observe", source, *L8, "--context", "4000", "--json")
    assert code == 0, err
    assert json.loads(out)["engine_max_batch"] > fitted["engine_max_batch"]  # without the flags: the tokens'


def test_observes_modelled_pool_holds_the_drafters_reserve_as_fits_does(
        tmp_path: Path) -> None:
    old = "0.5.9"  # a release whose default holds 2 GiB back for the drafter (none from 0.5.14)
    settings = EngineSettings(drafter=EngineSpec(3, "eagle"), speculative_decoding=True,
                              engine_version=old)
    report = observe_report(read_source(scrape_file(tmp_path, None, pool=False)), l8(),
                            profile(), 4000, settings)
    fitted = kv_pool(l8(), EngineSettings(max_model_len=4000, drafter=EngineSpec(3, "eagle"),
                                          speculative_decoding=True, engine_version=old))
    plain = kv_pool(l8(), EngineSettings(max_model_len=4000, engine_version=old))
    assert report.modelled_pool.tokens == fitted.tokens < plain.tokens  # SGLang's 2 GiB
    assert report.seats == fitted.max_num_seqs


def test_observe_refuses_a_drafter_flag_of_the_other_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "observe", scrape_file(tmp_path, None), *L8,
                           "--speculative-config", '{"method": "eagle", '
                           '"num_speculative_tokens": 3}')
    assert code == 2 and "vLLM's" in err and len(err.strip().splitlines()) == 1


def test_a_negative_accept_length_is_refused(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "observe", scrape_file(tmp_path, -1.0), *L8)
    assert code == 2 and "sglang:spec_accept_length" in err

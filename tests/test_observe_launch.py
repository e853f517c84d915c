"""observe under the server's launch: the release and seats a source states (a vLLM log's
start-up lines) or the flags fit takes give (--engine-version, --max-num-seqs and its SGLang
and TensorRT-LLM spellings), sizing its pool and seats as fit sizes them; a flag that
contradicts the source is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.observe import read_source
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_LOG = str(FIXTURES / "vllm_server.log")
SGLANG_METRICS = str(FIXTURES / "sglang_metrics.txt")
L8 = ("--model", "llama-3.1-8b", "--gpu", "h100")
CONTEXT = ("--context", "4000")


def launch_log(tmp_path: Path, version: str, seats: int) -> str:
    """The fixture's stats lines after the start-up lines vllm serve logs: its release, and
    the non-default arguments with max_num_seqs among them."""
    lines = (f"INFO 11-29 11:59:00 [api_server.py:1090] vLLM API server version {version}\n"
             "INFO 11-29 11:59:00 [utils.py:326] non-default args: {'model': "
             f"'meta-llama/Llama-3.1-8B', 'max_num_seqs': {seats}}}\n")
    path = tmp_path / "vllm.log"
    path.write_text(lines + Path(VLLM_LOG).read_text())
    return str(path)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_a_vllm_log_states_its_release_and_seats(tmp_path: Path) -> None:
    obs = read_source(launch_log(tmp_path, "0.9.1", 32))
    assert (obs.engine_version, obs.max_num_seqs) == ("0.9.1", 32)
    plain = read_source(VLLM_LOG)
    assert (plain.engine_version, plain.max_num_seqs) == (None, None)


def test_observe_sizes_a_vllm_pool_at_the_release_fit_sizes_it_at(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.9.1 leaves another pool than the newest release: observe's sequences of the
    context follow --engine-version as fit's do."""
    batches = {}
    for version in ("0.9.1", None):
        given = ("--engine-version", version) if version else ()
        observed = cli_json(capsys, "observe", VLLM_LOG, *L8, *CONTEXT, *given)
        fitted = cli_json(capsys, "fit", *L8, "--max-model-len", "4000", *given)
        assert observed["engine_max_batch"] == min(fitted["engine_max_batch"], fitted["max_num_seqs"])
        batches[version] = observed["engine_max_batch"]
    assert batches["0.9.1"] != batches[None]


def test_the_logs_own_launch_is_used_and_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = launch_log(tmp_path, "0.9.1", 48)  # seats above the 40 its stats lines run
    stated = cli_json(capsys, "observe", source, *L8, *CONTEXT)
    flagged = cli_json(capsys, "observe", VLLM_LOG, *L8, *CONTEXT, "--engine-version", "0.9.1",
                       "--max-num-seqs", "48")
    plain = cli_json(capsys, "observe", VLLM_LOG, *L8, *CONTEXT)
    assert stated["engine_max_batch"] == flagged["engine_max_batch"] == 48 < plain["engine_max_batch"]
    assert any("0.9.1" in n and "start-up lines" in n for n in stated["notes"])
    assert any("48" in n and "start-up lines" in n for n in stated["notes"])
    assert any("48" in n and "--max-num-seqs" in n for n in flagged["notes"])
    # the same values given again are no contradiction
    again = cli_json(capsys, "observe", source, *L8, *CONTEXT, "--engine-version", "0.9.1",
                     "--max-num-seqs", "48")
    assert again["engine_max_batch"] == stated["engine_max_batch"]


@pytest.mark.parametrize(("flag", "value", "stated"), [
    ("--max-num-seqs", "64", "32"), ("--engine-version", "0.10.0", "0.9.1")])
def test_a_flag_that_contradicts_the_log_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str,
        stated: str) -> None:
    err = refused(capsys, "observe", launch_log(tmp_path, "0.9.1", 32), *L8, flag, value)
    assert flag in err and stated in err


def test_a_release_the_log_states_but_ridgeline_does_not_model_is_sized_as_the_newest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stated = cli_json(capsys, "observe", launch_log(tmp_path, "99.0.0", 32), *L8, *CONTEXT)
    assert any("99.0.0" in n and "not modelled" in n for n in stated["notes"])


def test_observe_seats_an_sglang_server_at_its_max_running_requests(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = cli_json(capsys, "observe", SGLANG_METRICS, *L8, *CONTEXT)
    seated = cli_json(capsys, "observe", SGLANG_METRICS, *L8, *CONTEXT,
                      "--max-running-requests", "16")
    fitted = cli_json(capsys, "fit", *L8, "--engine", "sglang", "--max-model-len", "4000",
                      "--max-running-requests", "16")
    assert seated["engine_max_batch"] == fitted["max_num_seqs"] == 16 < plain["engine_max_batch"]


def test_observe_refuses_a_drafter_older_than_the_release_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "observe", SGLANG_METRICS, *L8, "--engine-version", "0.4.0",
                  "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3")
    assert "EAGLE" in err and "0.4.0" in err
    cli_json(capsys, "observe", SGLANG_METRICS, *L8, "--engine-version", "0.4.3",
             "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3")


def v0_log(tmp_path: Path, release: str) -> str:
    """The fixture's stats lines after the engine line a VLLM_USE_V1=0 server logs."""
    path = tmp_path / "vllm_v0.log"
    path.write_text(f"INFO 11-29 11:59:00 [llm_engine.py:240] Initializing a V0 LLM engine "
                    f"(v{release}) with config: model='meta-llama/Llama-3.1-8B'\n"
                    + Path(VLLM_LOG).read_text())
    return str(path)


def test_a_log_of_vllms_v0_engine_is_sized_as_fit_sizes_that_release_on_v0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0.9.1 ran V1 by default; a log whose engine line says V0 is V0's pool, as fit sizes
    "0.9.1 V0", and that flag (or the release alone) is no contradiction of it."""
    source = v0_log(tmp_path, "0.9.1")
    assert read_source(source).engine_version == "0.9.1 V0"
    stated = cli_json(capsys, "observe", source, *L8, *CONTEXT)
    fitted = cli_json(capsys, "fit", *L8, "--max-model-len", "4000", "--engine-version",
                      "0.9.1 V0")
    on_v1 = cli_json(capsys, "observe", VLLM_LOG, *L8, *CONTEXT, "--engine-version", "0.9.1")
    assert stated["engine_max_batch"] == min(fitted["engine_max_batch"], fitted["max_num_seqs"])
    assert stated["engine_max_batch"] != on_v1["engine_max_batch"]
    for given in ("0.9.1 V0", "0.9.1", "v0.9.1"):
        flagged = cli_json(capsys, "observe", source, *L8, *CONTEXT, "--engine-version", given)
        assert flagged["engine_max_batch"] == stated["engine_max_batch"]
    err = refused(capsys, "observe", source, *L8, "--engine-version", "0.9.1 V1")
    assert "--engine-version" in err


def test_a_release_spelt_otherwise_than_the_log_states_it_is_no_contradiction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stated = cli_json(capsys, "observe", launch_log(tmp_path, "0.9.0", 32), *L8, *CONTEXT)
    for given in ("v0.9.0", "0.9"):
        flagged = cli_json(capsys, "observe", launch_log(tmp_path, "0.9.0", 32), *L8,
                           *CONTEXT, "--engine-version", given)
        assert flagged["engine_max_batch"] == stated["engine_max_batch"]


def test_seats_the_running_batch_outgrew_are_refused_for_vllm(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM engine core runs at most max_num_seqs requests: a scrape of 8 running under
    --max-num-seqs 4 says the flag is not the server's. Seats at or above the batch run, a
    pipeline (V0: a scheduler a stage) and SGLang's gauges are left alone."""
    source = str(FIXTURES / "vllm_metrics.txt")
    running = max(read_source(source).running)
    base = ("observe", source, "--model", "llama-3.1-8b", "--gpu", "h100")
    code, _, err = run_cli(capsys, *base, "--max-num-seqs", str(int(running) - 1))
    assert code == 2 and f"shows {running:,.0f} requests running" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(capsys, *base, "--max-num-seqs", str(int(running)))
    assert code == 0 and "as --max-num-seqs gives it" in out
    code, _, _ = run_cli(capsys, "observe", str(FIXTURES / "sglang_metrics.txt"), "--model",
                         "llama-3.1-8b", "--gpu", "h100", "--max-running-requests", "1")
    assert code == 0


def test_a_context_read_off_the_fill_uses_the_pool_that_then_allows_the_sequences(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.5 (V0) profiles a max_model_len-token step, so its pool depends on the length
    it starts at. The fill was read against the pool at the model's 131,072 (347,776 tokens:
    7,729 a request), the sequences against one at 7,729 (28,041 blocks, 448,656 tokens):
    one line quoted both, "57 sequences". The fill now reads the pool the sequences divide:
    9,972 tokens a request, 44 sequences."""
    # 0.5.3: the first 0.5 release that loads Llama 3.1's rope_scaling (0.5.3.post1, read as 0.5.3)
    data = cli_json(capsys, "observe", VLLM_LOG, *L8, "--engine-version", "0.5.3")
    pool = data["pool_tokens_modelled"]
    kv, running = data["kv_usage"]["mean"], data["running"]["mean"]
    assert data["pool_tokens_reported"] is None and "KV cache's fill" in data["context_len_source"]
    assert data["context_len"] == round(kv * pool / running)
    assert f"modelled pool of {pool:,} tokens" in data["context_len_source"]
    fitted = cli_json(capsys, "fit", *L8, "--max-model-len", str(data["context_len"]),
                      "--engine-version", "0.5.3")
    assert data["engine_max_batch"] == min(fitted["engine_max_batch"], fitted["max_num_seqs"])

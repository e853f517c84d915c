"""Four user-side rules: a trace burst has no rate to plan for, a trace's dates read the same
whatever the machine's TZ, a --gpu-file record's id meets measure --gpu-id's rule, and a config
file's model that names the command line's model is not cautioned as another."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.serving_load import MIN_TRACE_SPAN_S, Load
from ridgeline.sim.workload import read_trace
from tests.conftest import run_cli

HEADER = "arrival_s,prompt_tokens,output_tokens\n"
PLAN = ("--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--gpus", "h100", "--workers", "1")


def test_a_trace_burst_has_no_rate_to_plan_for_but_is_replayed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3 requests stamped 1 ns apart had been planned at 1e9 req/s (ten million GPUs)."""
    burst = tmp_path / "burst.csv"
    burst.write_text(HEADER + "".join(f"1000.00000000{i},500,100\n" for i in range(3)))
    span_s = read_trace(str(burst))[-1].arrival_s
    assert 0 < span_s < MIN_TRACE_SPAN_S
    with pytest.raises(InputError, match=r"burst\.csv: 3 requests arrive within 2e-09 s"):
        Load.from_trace(str(burst))
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--trace", str(burst), *PLAN)
    assert code == 2 and not out and err.count("\n") == 1
    assert f"must span at least {MIN_TRACE_SPAN_S:g} s" in err and "simulate --trace" in err
    # simulate needs no rate: it replays the burst as recorded, and cautions its span
    code, out, err = run_cli(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace",
                             str(burst))
    assert code == 0 and "completed 3 of 3" in out and "the arrivals span 0.0 s" in out
    # a trace spanning the floor gives its rate
    (tmp_path / "second.csv").write_text(HEADER + f"0,500,100\n{MIN_TRACE_SPAN_S:g},500,100\n")
    assert Load.from_trace(str(tmp_path / "second.csv")).rate_req_s == 1 / MIN_TRACE_SPAN_S
    help_text = run_cli(capsys, "plan", "--help")[1]
    assert f"at least {MIN_TRACE_SPAN_S:g} s" in " ".join(help_text.split())


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="TZ is read through time.tzset")
def test_trace_dates_without_an_offset_read_the_same_whatever_the_tz(tmp_path: Path) -> None:
    """Naive stamps either side of New York's spring-forward hour, and a naive one beside a
    'Z' one: read in local time they moved with TZ (1 h apart in New York, 2 h in UTC)."""
    dst = tmp_path / "dst.csv"
    dst.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-03-12 01:30:00.0000000,500,100\n2023-03-12 03:30:00.0000000,500,100\n")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"timestamp": "2023-11-16 18:00:00", "input_tokens": 5, "output_len": 5}\n'
                     '{"timestamp": "2023-11-16T18:00:10Z", "input_tokens": 5, "output_len": 5}\n')
    utc = timezone.utc  # the spans as calendar arithmetic in UTC says
    expected = {dst: (datetime(2023, 3, 12, 3, 30, tzinfo=utc)
                      - datetime(2023, 3, 12, 1, 30, tzinfo=utc)).total_seconds(),
                mixed: (datetime(2023, 11, 16, 18, 0, 10, tzinfo=utc)
                        - datetime(2023, 11, 16, 18, tzinfo=utc)).total_seconds()}
    before = os.environ.get("TZ")
    try:
        for tz in ("UTC", "EST+5EDT,M3.2.0,M11.1.0", "JST-9"):  # POSIX rules: no tz database
            os.environ["TZ"] = tz
            time.tzset()
            for path, span_s in expected.items():
                assert read_trace(str(path))[-1].arrival_s == span_s, (tz, path.name)
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.parametrize("ident", ["Lab Card", "lab\ncard", ".lab", "x" * 65, "H200"])
def test_a_gpu_file_record_id_meets_the_rule_measure_gpu_id_meets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], ident: str) -> None:
    """Each id measure --gpu-id refuses, a --gpu-file record that rows name is refused with
    the same reason: one line, exit 2 (a record 'Lab Card' had been registered)."""
    rows = Path(__file__).parent.parent / "validation" / "measurements.csv"
    record = json.loads(run_cli(capsys, "hardware", "h200", "--json")[1])
    card = tmp_path / "card.json"
    card.write_text(json.dumps({**record, "id": ident}))
    code, out, err = run_cli(capsys, "validate", str(rows), "--gpu-file", str(card))
    assert code == 2 and not out and err.count("\n") == 1
    reason = err.split("record id ", 1)[1]
    code, out, err = run_cli(capsys, "measure", "--gpu-id", ident, "-o",
                             str(tmp_path / "rows.csv"))
    assert code == 2 and not out and err.count("\n") == 1
    assert err.split("--gpu-id ", 1)[1] == reason


@pytest.mark.parametrize(("file_model", "cautioned"), [
    ("meta-llama/Llama-3.1-8B", False),  # the alias's own Hugging Face id
    ("Llama-3.1-8B", False),  # … without its owner
    ("meta-llama/Llama-3.1-8B-Instruct", False),  # its tune, one architecture
    ("llama-3.3-70b", True),
    ("qwen3-8b", True)])
def test_a_config_files_model_is_cautioned_only_where_it_is_another_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], file_model: str,
        cautioned: bool) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"model: {file_model}\nmax-model-len: 8192\n")
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--config",
                           str(config))
    assert code == 0, err
    assert ("which the command line's llama-3.1-8b overrides" in err) == cautioned, err


def test_two_models_of_one_architecture_stay_two() -> None:
    """llama-3.1-70b and llama-3.3-70b price alike, yet are two models: the caution stands."""
    from dataclasses import replace

    from ridgeline.catalog import catalog_model
    from ridgeline.cli_config_file import _same_model

    same = [replace(catalog_model(m), name="") for m in ("llama-3.1-70b", "llama-3.3-70b")]
    assert same[0] == same[1]
    assert not _same_model("llama-3.3-70b", "llama-3.1-70b")
    assert _same_model("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b")

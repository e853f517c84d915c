"""fit's headline count against vLLM's logged 'Maximum concurrency': where they differ (window
groups charge a request its prefill room; a decoding request holds less), the line under the
headline gives both figures, each computed from the pool, and why the headline's count runs."""

from __future__ import annotations

import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import admission_gate
from ridgeline.cli import main
from ridgeline.memory import EngineSettings
from ridgeline.reports.fit import FitReport, fit_report
from ridgeline.reports.fit_verdict import logged_concurrency_line

LOG = re.compile(r'vLLM will log "Maximum concurrency for ([\d,]+) tokens per request: '
                 r'([\d.]+)x": ([\d,]+) blocks ÷ ([\d,]+), the most vLLM lets one request hold; '
                 r"([\d,]+) run at once")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def report(model: str, context: int, engine: str = "vllm",
           engine_version: str | None = None) -> FitReport:
    dep = Deployment.build(resolve_model(model), resolve_accelerator("h200"), engine=engine)
    return fit_report(dep, context, EngineSettings(engine_version=engine_version))


def test_gpt_oss_120b_on_an_h200_logs_14_14x_while_15_run() -> None:
    r = report("gpt-oss-120b", 131072)
    p = r.pool
    line = logged_concurrency_line(r)
    assert line is not None
    found = LOG.match(line)
    assert found is not None
    length, logged, blocks, charged, held = found.groups()
    assert _int(length) == r.context
    assert float(logged) == pytest.approx(p.concurrency(r.context), abs=0.005)
    assert float(logged) == pytest.approx(14.14, abs=0.005)
    assert _int(blocks) == p.blocks
    assert _int(charged) == p.request_blocks(r.context)
    assert _int(blocks) / _int(charged) == pytest.approx(float(logged), abs=0.005)
    # the headline's count, and the gate arithmetic that gives it
    gate = admission_gate(p, r.context)
    assert gate is not None
    assert _int(held) == r.conversations == 1 + (p.blocks - gate[0]) // gate[1] == 15
    assert f"a decoding request holds {gate[1]:,} blocks" in line


def test_the_line_sits_right_under_the_headline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "gpt-oss-120b", "--gpu", "h200"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines()
             if not ln.startswith("--max-model-len not given")]
    assert lines[0].startswith("fits") and " 15 conversations of 131,072 tokens" in lines[0]
    found = LOG.match(lines[1])
    assert found is not None and _int(found.group(5)) == 15


def test_without_a_gate_the_reason_is_the_decoding_hold() -> None:
    r = report("gpt-oss-120b", 131072, engine_version="0.10.0")
    line = logged_concurrency_line(r)
    assert line is not None and admission_gate(r.pool, r.context) is None
    decoding = r.pool.groups.decode_blocks(r.context)  # type: ignore[union-attr]
    assert r.conversations == r.pool.blocks // decoding
    assert line.endswith(f"as a decoding request holds {decoding:,} blocks")


def test_no_line_where_the_log_and_the_count_agree() -> None:
    r = report("llama-3.1-8b", 32768)  # one full-attention group: blocks ÷ a request's blocks
    assert r.pool.groups is None or int(r.pool.concurrency(r.context)) == r.conversations
    assert logged_concurrency_line(r) is None
    assert logged_concurrency_line(report("gpt-oss-120b", 131072, engine="sglang")) is None


def test_vllm_0_19s_whole_prompt_gate_runs_fewer_than_it_logs() -> None:
    """v0.19 charged a prompt every window group its whole length: fewer run than logged."""
    r = report("gpt-oss-120b", 131072, engine_version="0.19.0")
    line = logged_concurrency_line(r)
    gate = admission_gate(r.pool, r.context)
    assert line is not None and gate is not None
    assert gate[0] > r.pool.request_blocks(r.context)
    assert r.conversations < int(r.pool.concurrency(r.context))
    assert line.endswith(f"as the prompt being admitted needs {gate[0]:,} blocks free and a "
                         f"decoding request holds {gate[1]:,} blocks")

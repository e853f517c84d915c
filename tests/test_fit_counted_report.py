"""fit's searches over contexts (ridge_context, longest_context) read counted_report, fit_report
without its levers: the same pool, conversations and verdict, the levers and their steps left
out; and a measurement's notes are searched for a setting only where they hold its words."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, EngineSettings, fit_report, resolve_accelerator, resolve_model
from ridgeline.measurements import _setting_in
from ridgeline.reports.fit import counted_report, ridge_context

CASES = [("llama-3.1-8b", "h100", "vllm", 8192), ("llama-3.1-70b", "h100", "vllm", 131_072),
         ("qwen3-30b-a3b", "l40s", "sglang", 32_768), ("llama-3.1-8b", "rtx-4090", "llama.cpp", 8192)]


@pytest.mark.parametrize(("model", "gpu", "engine", "context"), CASES)
def test_counted_report_counts_as_fit_report(model: str, gpu: str, engine: str,
                                             context: int) -> None:
    dep = Deployment.build(resolve_model(model), resolve_accelerator(gpu), engine=engine)
    settings = EngineSettings(max_model_len=context)
    full = fit_report(dep, context, settings)
    counted = counted_report(dep, context, settings)
    assert (counted.conversations, counted.verdict, counted.batch, counted.pool) == \
        (full.conversations, full.verdict, full.batch, full.pool)
    assert counted.levers == () and counted.steps == ()
    worked = counted_report(dep, context, settings, worked=True)
    assert worked.steps and set(worked.steps) <= set(full.steps)


def test_ridge_context_is_the_longest_context_whose_full_report_clears() -> None:
    """The search reads counted reports; fit_report at the context it finds clears the ridge,
    and a block's worth of tokens more does not."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="vllm")
    report = fit_report(dep, 131_072, EngineSettings(max_model_len=131_072))
    found = ridge_context(report)
    assert 0 < found < report.context

    def verdict(context: int) -> str:
        return fit_report(dep, context, EngineSettings(max_model_len=context)).verdict

    assert verdict(found) != report.verdict
    assert verdict(found + report.pool.block_size) == report.verdict


@pytest.mark.parametrize(("notes", "read"), [
    ("vllm serve --max-num-seqs 256 --gpu-memory-utilization 0.9", "256"),
    ("{'MAX_NUM_SEQS': 64}; engine: vLLM v0.10.2", "64"),
    ("max num seqs = 32", "32"),
    ("gpu_memory_utilization 0.7 (no seats stated)", None),
    ("max_num_batched_tokens 8192, seqs unstated", None),  # every word there, not the name
    ("façade: max_num_seqs 12", "12"),  # not ASCII: searched without the words' check
])
def test_a_setting_is_read_whether_or_not_its_words_are_there(notes: str,
                                                              read: str | None) -> None:
    assert _setting_in(notes, "max_num_seqs") == read

"""simulate's refusal names what each of fit's levers holds as conversations, not a bare count."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings
from ridgeline.reports.fit import fit_report
from tests.conftest import run_cli


def test_each_lever_is_read_as_conversations(capsys: pytest.CaptureFixture[str]) -> None:
    context = 2048
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("l40s"),
                           None, None, 2, engine="vllm")
    levers = fit_report(dep, context, EngineSettings(max_model_len=context), 1).levers
    assert levers
    code, _, err = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "l40s", "--num-gpus",
                           "2", "--max-model-len", str(context), "--rate", "1",
                           "--num-requests", "5")
    assert code == 2 and err.count("\n") == 1
    for lever in levers:
        noun = "conversation" if lever.conversations == 1 else "conversations"
        assert f"{lever.name}: {lever.conversations:,} {noun}" in err

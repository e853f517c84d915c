"""decode's fits line holds a hybrid's recurrent states at the dtypes the engine keeps them
in, as its step reads them and its pool sizes them (cost.served_footprint): SGLang keeps
Qwen3-Next's SSM state in fp32 whatever the checkpoint's bf16."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.kvcache import kv_footprint
from ridgeline.memory import EngineSettings, kv_pool
from tests.conftest import run_cli

NEXT = "qwen3-next-80b-a3b-thinking"
TP = 4


def fit_kv_bytes(capsys: pytest.CaptureFixture[str], context: int) -> float:
    """The cache decode's fits line holds for one sequence of ``context`` tokens."""
    code, out, err = run_cli(capsys, "decode", NEXT, "--gpu", "h200", "--tp-size", str(TP),
                             "--engine", "sglang", "--batch", "1", "--context", str(context),
                             "--json")
    assert code == 0, err
    return float(json.loads(out)["points"][0]["kv_bytes"])


def test_the_fits_lines_state_is_sglangs_pool_state(capsys: pytest.CaptureFixture[str]) -> None:
    """The attention cache grows with the context, the states do not: twice the fits line
    at 16K less the line at 32K is the states alone, and a GPU's share of them is the
    request's state SGLang's pool sizes (bf16 conv, fp32 SSM), not the config's bf16."""
    state_bytes = 2 * fit_kv_bytes(capsys, 16_000) - fit_kv_bytes(capsys, 32_000)
    dep = Deployment.build(resolve_model(NEXT), resolve_accelerator("h200"), num_gpus=TP,
                           engine="sglang")
    pool = kv_pool(dep, EngineSettings(max_model_len=32_768))
    assert pool.state_request_bytes > 0 and pool.kv_share == 1.0
    assert state_bytes / TP == pytest.approx(pool.state_request_bytes)
    as_configured = kv_footprint(dep.model, 1, dep.kv.bytes_per_element).state_bytes
    assert state_bytes > 1.9 * as_configured  # the SSM state, most of it, at twice the bytes

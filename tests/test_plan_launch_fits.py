"""plan's launch line is one `fit` says fits: SGLang and TensorRT-LLM start at a context their
KV pool cannot hold one request of, but refuse any request past the pool, so plan launches
them no longer than it holds (replica_sizing.starts_at, capacity.holds_one_at), as vLLM,
which refuses to start there, always was."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

import pytest

from ridgeline.candidate import replica_deployment
from ridgeline.capacity import held_conversations, holds_one_at
from ridgeline.catalog import resolve_model
from ridgeline.context_length import served_positions
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.replica_sizing import MODEL_LEN_STEP, launch_length, starts_at
from tests.conftest import run_cli

V3 = resolve_model("deepseek-v3", fetchable=False)
LLAMA_70B = resolve_model("llama-3.1-70b")
B200 = resolve_accelerator("b200")
PLAN = ("plan", "deepseek-v3", "--engine", "sglang", "--rate", "2", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "100", "--gpus", "b200", "--max-gpus", "4", "--workers", "1")


# the tests reading PLAN search it once (plan_shared), its rows left unsimulated: each
# row's launch length is the search's, which a check keeps
pytestmark = pytest.mark.usefixtures("plan_shared", "unsimulated")


def _fit_flags(launch: str) -> list[str]:
    """The SGLang launch line's own flags, as `fit` takes them (less its model path)."""
    words = shlex.split(launch)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    at = words.index("--model-path")
    return words[3:at] + words[at + 2:]


def test_sglang_on_4_b200s_launches_deepseek_v3_at_the_141_056_tokens_its_pool_holds() -> None:
    """TP4 at chunked_prefill_size 2048: a pool of 141,089 tokens, short of the model's
    163,840, which SGLang would start at (refusing a longer prompt at admission) and `fit`
    calls not fitting; the launch is the longest multiple of 256 the pool holds one of."""
    dep = replica_deployment(V3, B200, 4, 1, "as stored", "bf16", engine="sglang")
    settings = EngineSettings(max_num_batched_tokens=2048)
    context = served_positions(V3, "sglang")
    assert context == 163840
    assert not holds_one_at(dep, settings, context)
    length = launch_length(dep, settings)
    assert length == 141056 and length % MODEL_LEN_STEP == 0
    assert starts_at(dep, settings, length)
    assert not starts_at(dep, settings, length + MODEL_LEN_STEP)
    pool = kv_pool(dep, EngineSettings(max_num_batched_tokens=2048, max_model_len=length))
    assert length <= pool.tokens < length + MODEL_LEN_STEP


def test_a_trtllm_launch_is_no_longer_than_the_max_seq_len_it_would_trim_to() -> None:
    """Llama-3.1-70B in fp8 on one H100 under trtllm: 27,776 tokens of pool, so
    --max_seq_len 27,648, where fit holds one; at its 131,072 fit holds none."""
    dep = replica_deployment(LLAMA_70B, resolve_accelerator("h100-sxm"), 1, 1, "fp8", "bf16",
                             engine="trtllm")
    settings = EngineSettings()
    length = launch_length(dep, settings)
    assert length == 27648
    pool = kv_pool(dep, EngineSettings(max_model_len=length))
    assert held_conversations(pool, dep, length) == 1
    at_context = kv_pool(dep, EngineSettings(max_model_len=131072))
    assert held_conversations(at_context, dep, 131072) == 0


def test_plans_sglang_launch_line_is_one_fit_says_fits(
        capsys: pytest.CaptureFixture[str], plan_once: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The winner's launch line, pasted into `fit`, fits one request at its --context-length;
    the same line at the model's 163,840 does not (the gap plan had, printing a caution
    beside a launch `fit` refused). The report says why the line is shorter. The winner with
    a shorter line is a bf16 cache's (141,056 tokens): an fp8 cache's holds the whole context
    and, at one price, ranks first for its headroom (``plan_checks.cheapest``), so the test
    ranks the first candidate with a shorter launch first."""
    import ridgeline.plan as planning

    search = planning.plan

    def shorter_first(*args: Any, **kwargs: Any) -> Any:
        result = search(*args, **kwargs)
        short = next(c for c in result.candidates if c.max_model_len < 163840)
        return replace(result, candidates=(short, *(c for c in result.candidates
                                                     if c is not short)))

    monkeypatch.setattr(planning, "plan", shorter_first)
    code, out, _ = run_cli(capsys, *PLAN, "--json")
    assert code == 0
    report = json.loads(out)
    launch = report["commands"]["sglang"]
    flags = _fit_flags(launch)
    length = int(flags[flags.index("--context-length") + 1])
    assert length == report["winner"]["max_model_len"] < 163840
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--engine", "sglang",
                           *flags, "--json")
    assert code == 0
    fitted = json.loads(out)
    assert fitted["max_model_len"] == length and fitted["conversations"] >= 1
    assert not fitted["verdict"].startswith("DOES NOT FIT")
    at_context = [*flags[:flags.index("--context-length")], "--context-length", "163840"]
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "b200", "--engine", "sglang",
                           *at_context)
    assert code == 0 and out.startswith("DOES NOT FIT: not even one conversation of 163,840")
    code, text, _ = run_cli(capsys, *PLAN)
    assert code == 0
    assert (f"--context-length {length:,}: the longest its KV pool holds one request of, "
            "under deepseek-v3's 163,840-token context, which sglang would start at too") in text
    assert "caps a request" not in text


def test_every_sglang_candidate_plan_prices_holds_one_request_of_its_launch(
        capsys: pytest.CaptureFixture[str], plan_once: None) -> None:
    """Winner and runners-up alike, data-parallel attention too (DP2 × TP2: each rank's pool
    of 83,973 tokens, launched at 83,968): fit's count at each launch's length is at least 1."""
    code, out, _ = run_cli(capsys, *PLAN, "--json")
    assert code == 0
    report = json.loads(out)
    candidates = [report["winner"], *report["runners_up"]]
    assert any(c["data_parallel_size"] > 1 for c in candidates)
    for c in candidates:
        dep = replica_deployment(V3, resolve_accelerator(c["accelerator"]), c["tensor_parallel_size"],
                                 c["pipeline_parallel_size"],
                                 c["weights"], c["kv_dtype"], c["expert_parallel"], engine="sglang",
                                 data_parallel_size=c["data_parallel_size"])
        settings = EngineSettings(max_num_seqs=c["max_num_seqs"],
                                  max_num_batched_tokens=c["max_num_batched_tokens"],
                                  max_model_len=c["max_model_len"])
        held = held_conversations(kv_pool(dep, settings), dep, c["max_model_len"])
        assert held >= 1, c["label"]

"""A speculative verify step pads to the engine's captured CUDA-graph sizes as a decode does
(graph_batches.graph_tokens through cost.graph_mode): vLLM pads its tokens, batch × (1 +
drafts), to the sizes it rounds for the drafter; SGLang pads its sequences to the list it
captures under a drafter. --explain says where a step ran padded or ungraphed."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import Seq, step_cost
from ridgeline.engine_spec import EngineSpec
from ridgeline.engines import profile_for
from ridgeline.graph_batches import (
    captured,
    graph_tokens,
    sglang_capture_sizes,
    vllm_capture,
    with_cuda_graphs,
)
from ridgeline.memory import EngineSettings
from ridgeline.reports.decode import decode_report
from ridgeline.spec_decode import SpecDecode, spec_step
from tests.conftest import run_cli

CONTEXT = 1000
VERSION = "0.24.0"  # the V1 runner, which rounds the sizes to 1 + the drafts


def dep(engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16",
                            None, engine=engine)


def drafting(drafts: int) -> Deployment:
    """vLLM on VERSION with ``drafts`` drafts: its capture rounded to 1 + drafts."""
    return with_cuda_graphs(dep(), SimpleNamespace(spec_tokens=drafts, engine_version=VERSION))


def unrounded(d: Deployment) -> Deployment:
    """The same deployment with vLLM's list as no drafter rounds it (the same cap)."""
    capture = captured(d)
    assert capture is not None
    return replace(d, cuda_graphs=vllm_capture(max_capture_size=capture.sizes[-1]))


def verify_ops(d: Deployment, batch: int, drafts: int, name: str) -> tuple[float, float]:
    cost = step_cost(d, [Seq(1 + drafts, CONTEXT)] * batch, profile_for("vllm"), verify=True)
    op = next(o for o in cost.ops if o.name == name)
    return op.flops, op.bytes


def _five_requests_verifying(drafts: int) -> tuple[Any, Any, Any]:
    """A vLLM deployment capturing the drafter-rounded sizes, and the verify step of 5
    requests drafting ``drafts`` priced on it and on the same list unrounded."""
    spec, profile = SpecDecode(drafts, 0.7, 0.05), profile_for("vllm")
    rounded = drafting(drafts)
    return (rounded, spec_step(rounded, spec, 5, CONTEXT, profile),
            spec_step(unrounded(rounded), spec, 5, CONTEXT, profile))


def test_a_vllm_verify_step_is_priced_at_the_drafter_rounded_size_when_rounding_moves_it() -> None:
    """Two drafts: 5 requests verify 15 tokens. The rounded list (multiples of 3: 3, 6, 9,
    18, …) runs them as 18; the unrounded one (…, 8, 16) as 16. The verify step's matmuls
    are priced at the rounded size's rows, so it costs more than on the unrounded list."""
    rounded, on_rounded, on_plain = _five_requests_verifying(2)
    assert on_rounded.verify_tokens == on_plain.verify_tokens == 5 * 3
    assert on_rounded.verify_graph_tokens == graph_tokens(rounded, 15, 5)
    assert on_plain.verify_graph_tokens == graph_tokens(unrounded(rounded), 15, 5)
    assert on_rounded.verify_graph_tokens != on_plain.verify_graph_tokens
    assert on_rounded.verify_graph_tokens % 3 == 0 and on_rounded.verify_graph_tokens > 15
    # the MLP of the 15-token verify reads the rows of the size it pads to
    size = on_rounded.verify_graph_tokens
    assert verify_ops(rounded, 5, 2, "mlp")[0] == pytest.approx(
        verify_ops(rounded, size // 3, 2, "mlp")[0])
    assert on_rounded.verify_s > on_plain.verify_s


def test_a_vllm_verify_step_costs_the_same_where_rounding_keeps_its_size() -> None:
    """Three drafts: 5 requests verify 20 tokens, which both lists run as 24 (every 8 is a
    multiple of 4), so the verify step costs the same either way."""
    _, on_rounded, on_plain = _five_requests_verifying(3)
    assert on_rounded.verify_graph_tokens == on_plain.verify_graph_tokens \
        == vllm_capture().run_as(20)
    assert on_rounded.verify_graph_tokens > on_rounded.verify_tokens == 20
    assert on_rounded.verify_s == pytest.approx(on_plain.verify_s, rel=1e-12)


def test_a_vllm_verify_step_above_the_largest_size_runs_ungraphed() -> None:
    d = drafting(3)
    capture = captured(d)
    assert capture is not None
    batch = capture.sizes[-1] // 4 + 1  # its 4-token rows past the largest size
    s = spec_step(d, SpecDecode(3, 0.7, 0.05), batch, CONTEXT, profile_for("vllm"))
    assert s.verify_graph_tokens is None
    assert s.to_dict()["verify_graph_tokens"] is None


def test_sglang_pads_a_verify_steps_sequences_to_its_drafting_sizes() -> None:
    """SGLang pads the verify batch's sequences (bisect over its captured batches) and each
    runs speculative_num_draft_tokens: under a drafter its list is finer (… 12, 14, 16 …),
    so 13 sequences drafting 3 run as a batch of 14, 56 tokens, not the plain list's 16."""
    d = with_cuda_graphs(dep("sglang"), EngineSettings(drafter=EngineSpec(3, "eagle")))
    capture = captured(d)
    assert capture is not None and capture.unit == "sequences"
    tier = captured(dep("sglang"))
    assert tier is not None
    assert capture.sizes == sglang_capture_sizes(tier.sizes[-1], drafting=True)
    assert len(sglang_capture_sizes(256, drafting=True)) == 51  # the docstring's count
    assert len(sglang_capture_sizes(256)) == 36
    s = spec_step(d, SpecDecode(3, 0.7, 0.05), 13, CONTEXT, profile_for("sglang"))
    batch, plain_batch = capture.run_as(13), tier.run_as(13)
    assert batch is not None and plain_batch is not None and 13 < batch < plain_batch
    assert s.verify_graph_tokens == batch * 4 == graph_tokens(d, 52, 13)


def test_explain_names_the_captured_size_a_decode_pads_to() -> None:
    d = dep()
    report = decode_report(d, [13], [CONTEXT], profile_for("vllm"))
    size = vllm_capture().run_as(13)
    assert size is not None and size > 13
    line = next(s for s in report.steps if s.label == "CUDA graph")
    assert line.result.value == graph_tokens(d, 13, 13) == size
    assert f"batch 13 runs as vLLM's captured CUDA-graph size {size}" in line.formula
    assert f"the matmuls read {size} rows" in line.formula
    exact = decode_report(d, [size], [CONTEXT], profile_for("vllm"))
    assert not any(s.label == "CUDA graph" for s in exact.steps)  # a captured size: no line


def test_explain_says_a_decode_above_the_largest_size_runs_ungraphed(capsys) -> None:
    largest = vllm_capture(max_num_seqs=1024).sizes[-1]
    batch = largest + 88
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                           "vllm", "--batch", str(batch), "--context", "512",
                           "--max-num-seqs", "1024", "--explain")
    assert code == 0
    assert (f"batch {batch} is above vLLM's largest captured CUDA-graph size {largest}: "
            "priced without CUDA graphs") in out
    assert f"largest captured size = {largest} tokens" in out


def test_explain_names_the_verify_steps_padded_size(capsys) -> None:
    from ridgeline.cli import build_parser
    from ridgeline.cli_load import load_deployment

    argv = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--batch", "13",
            "--context", "2048", "--spec-tokens", "3", "--engine-version", VERSION)
    code, out, _ = run_cli(capsys, *argv, "--explain")
    assert code == 0
    d = load_deployment(build_parser().parse_args(argv))
    size = graph_tokens(d, 13 * 4, 13)
    assert size is not None and size > 52
    assert (f"verify step's CUDA graph: the verify step's 52 tokens (13 sequences) run as "
            f"vLLM's captured CUDA-graph size {size}") in out

"""vLLM's CUDA-graph sizes by release and card (engines.json vllm.max_cudagraph_capture_size):
the default cap reaches 1,024 on an SM 10.x card from v0.28 (512 elsewhere), the token
budget (v0.21+), max_num_seqs (v0.31+) and a drafter's whole decode batches (v0.29+) are
captured off the 8/16 stride, and v0.34 on a B200 captures a prefill grid and a decode grid
of their own; the graph memory and a decode step's padding follow."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.graph_batches import vllm_capture
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.vllm_graphs import (
    capture_ceiling,
    capture_size_list,
    capture_sizes,
    captured_sizes,
    decode_grid,
    prefill_grid,
    sm100_card,
    split_grids,
)
from ridgeline.vllm_memory import vllm_data
from tests.conftest import run_cli

RULE = vllm_data()["max_cudagraph_capture_size"]


def dep(gpu: str) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu), "bf16")


def graph_bytes(gpu: str, version: str) -> float:
    return kv_pool(dep(gpu), EngineSettings(engine_version=version)).cuda_graph_bytes


@pytest.mark.parametrize(("gpu", "wide"), [("b200", True), ("b300", True), ("gb200", True),
                                           ("h100", False), ("rtx-5090", False),
                                           ("rtx-pro-6000-blackwell-server", False),
                                           ("mi300x", False)])
def test_sm100_cards_are_the_data_centre_blackwells(gpu: str, wide: bool) -> None:
    assert sm100_card(resolve_accelerator(gpu)) is wide


def test_the_default_cap_reaches_1024_on_a_b200_from_0_28() -> None:
    assert capture_ceiling("0.27", sm100=True) == capture_ceiling("0.34") == RULE["ceiling"]
    assert capture_ceiling("0.28", sm100=True) == RULE["sm100_ceiling"] > RULE["ceiling"]
    # 1,024 seats and a 16,384-token budget on 0.33: every size to 1,024 on a B200
    wide = captured_sizes(1024, None, 16384, version="0.33", sm100=True)
    assert wide == capture_size_list(RULE["sm100_ceiling"])
    assert captured_sizes(1024, None, 16384, version="0.33") == \
        capture_size_list(RULE["ceiling"])
    # the graph memory grows with the sizes: Llama-3.1-8B on a B200 against an H100, 0.33
    ratio = graph_bytes("b200", "0.33") / graph_bytes("h100", "0.33")
    assert ratio == pytest.approx(len(wide) / len(capture_size_list(RULE["ceiling"])))
    assert graph_bytes("b200", "0.33") > graph_bytes("h100", "0.33") > 0


def test_the_budget_and_the_seats_are_captured_off_the_stride_from_their_releases() -> None:
    # a 100-token budget below the cap: its own size from 0.21
    assert 100 in captured_sizes(256, None, 100, version="0.21")
    assert 100 not in captured_sizes(256, None, 100, version="0.20")
    # 100 seats (cap 200): 100 itself from 0.31, not before, and no size past the cap
    assert 100 in captured_sizes(100, None, 8192, version="0.31")
    assert 100 not in captured_sizes(100, None, 8192, version="0.30")
    assert max(captured_sizes(100, None, 8192, version="0.31")) == 200
    # a cap given: the seats are not appended (vLLM appends them to its default cap only)
    assert 100 not in captured_sizes(100, 200, 8192, version="0.31")


def test_a_drafters_whole_decode_batches_are_captured_from_0_29() -> None:
    """50 seats drafting 1 (two tokens a request): 50 requests' 100 tokens, off the
    stride, are a size from 0.29; 0.28 pads them to 104."""
    assert 100 in captured_sizes(50, None, 8192, query_len=2, version="0.29")
    assert 100 not in captured_sizes(50, None, 8192, query_len=2, version="0.28")


def test_0_34_on_a_b200_captures_its_own_prefill_and_decode_grids() -> None:
    prefill, decode = split_grids(1024, 16384)
    assert prefill == prefill_grid(RULE["sm100_prefill_tokens"])
    assert decode == decode_grid(1024) and decode[-1] == 1024
    assert prefill[-1] == RULE["sm100_prefill_tokens"]
    # the memory counts a graph as half a size of the one list
    counted = capture_sizes(1024, None, 16384, version="0.34", sm100=True)
    assert counted == (len(prefill) + len(decode)) / 2
    layers = resolve_model("llama-3.1-8b").num_layers
    per = vllm_data()["cuda_graph_mib_per_layer_per_size"] * 2**20
    seats = kv_pool(dep("b200"), EngineSettings(engine_version="0.34")).max_num_seqs
    assert seats == 1024
    assert graph_bytes("b200", "0.34") == pytest.approx(layers * counted * per)
    # an H100 keeps the one list, 0.33's
    assert graph_bytes("h100", "0.34") == pytest.approx(graph_bytes("h100", "0.33"))
    # a decode pads to the decode grid: 33 requests run as the next decode size
    capture = vllm_capture(1024, None, 16384, version="0.34", sm100=True)
    assert capture.sizes == tuple(decode)
    assert capture.run_as(33) == min(size for size in decode if size >= 33)
    # a cap given (the deprecated field) keeps the one list
    assert captured_sizes(1024, 512, 16384, version="0.34", sm100=True) == \
        capture_size_list(512)


def test_fit_explains_the_b200s_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "b200", "--engine-version",
                           "0.33", "--explain")
    assert code == 0
    assert f"× {len(capture_size_list(RULE['sm100_ceiling']))} captured sizes (to 1,024" in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "b200", "--explain")
    prefill, decode = split_grids(1024, 16384)
    assert code == 0 and f"{len(prefill)} prefill graphs" in out
    assert f"× {(len(prefill) + len(decode)) / 2:g} captured sizes" in out

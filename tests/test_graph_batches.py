"""A decode step above the engine's largest captured CUDA-graph batch runs without graphs;
one between captured sizes runs padded up to the next (graph_batches.py, cost.graph_mode)."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import IDEAL, Seq, batch_shape, decode_batch, shape_time_s, step_cost
from ridgeline.engines import profile_for
from ridgeline.graph_batches import (
    NO_GRAPHS,
    default_capture,
    sglang_capture_sizes,
    vllm_capture,
    with_cuda_graphs,
)
from ridgeline.hardware import device_memory_bytes
from ridgeline.launches import deployment_matmuls, moe_layers
from ridgeline.memory import EngineSettings
from ridgeline.sglang_memory import sglang_gpu_mem_bytes, sglang_memory_defaults
from ridgeline.sim.timer import StepTimer

CONTEXT = 1000


def dep(engine: str = "vllm") -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16",
                            None, engine=engine)


def overhead(d: Deployment, batch: int, engine: str = "vllm") -> float:
    cost = step_cost(d, decode_batch(batch, CONTEXT), profile_for(engine))
    return next(op.time_s for op in cost.ops if op.name == "overhead")


def op(d: Deployment, batch: int, name: str, profile: object = None) -> tuple[float, float]:
    cost = step_cost(d, decode_batch(batch, CONTEXT), profile or profile_for(d.engine))
    found = next(o for o in cost.ops if o.name == name)
    return found.flops, found.bytes


def expected_overhead(d: Deployment, ungraphed: bool, engine: str = "vllm") -> float:
    return profile_for(engine).overhead_s(d.model.num_layers, ungraphed, deployment_matmuls(d),
                                          moe_layers(d.model))


def test_vllm_decode_above_its_largest_captured_batch_pays_the_ungraphed_overhead() -> None:
    d = dep()
    cap = vllm_capture().sizes[-1]  # min(2 x 256, 512)
    assert overhead(d, cap) == expected_overhead(d, ungraphed=False)
    assert overhead(d, cap + 1) == expected_overhead(d, ungraphed=True)
    assert overhead(d, cap + 1) > overhead(d, cap)


def test_a_vllm_decode_between_captured_sizes_runs_the_padded_batchs_matmuls() -> None:
    d = dep()
    padded = vllm_capture().run_as(33)
    assert padded == 40
    assert op(d, 33, "mlp") == op(d, padded, "mlp")
    assert op(d, 33, "attention projections") == op(d, padded, "attention projections")
    # attention reads only the real rows' caches; the LM head computes only their logits
    assert op(d, 33, "attention")[1] < op(d, padded, "attention")[1]
    assert op(d, 33, "lm head") != op(d, padded, "lm head")
    # a size that is captured is not padded
    assert op(d, 32, "mlp") != op(d, 40, "mlp")


def test_the_floor_pads_nothing() -> None:
    """The floor runs 33 rows as 33: the MLP's FLOPs are 33/40 of batch 40's (2 × rows ×
    its weights), its weight bytes the same read; vLLM's profile runs both as 40."""
    d = dep()
    (flops_33, bytes_33), (flops_40, bytes_40) = op(d, 33, "mlp", IDEAL), op(d, 40, "mlp", IDEAL)
    assert flops_33 == pytest.approx(flops_40 * 33 / 40, rel=1e-12) and bytes_33 == bytes_40
    assert op(d, 33, "mlp") == (flops_40, bytes_40)


def test_sglang_above_cuda_graph_max_bs_runs_ungraphed() -> None:
    d = with_cuda_graphs(dep("sglang"), EngineSettings(max_cudagraph_capture_size=64))
    assert overhead(d, 64, "sglang") == expected_overhead(d, False, "sglang")
    assert overhead(d, 65, "sglang") == expected_overhead(d, True, "sglang")
    # SGLang pads 33 to its next captured size, 40 (1, 2, 4, 8, 12, 16, 24, 32, 40, ...)
    assert op(d, 33, "mlp") == op(d, 40, "mlp")


def test_sglang_default_cap_is_its_memory_tiers_cuda_graph_max_bs() -> None:
    d = dep("sglang")
    memory, _ = sglang_gpu_mem_bytes(d.accelerator, device_memory_bytes(d.accelerator))
    tier = sglang_memory_defaults(memory, 1).cuda_graph_max_bs
    capture = default_capture(d)
    assert capture is not None and capture.sizes == sglang_capture_sizes(tier)
    assert overhead(d, tier, "sglang") < overhead(d, tier + 1, "sglang")


def test_enforce_eager_captures_nothing_and_pads_nothing() -> None:
    d = with_cuda_graphs(dep(), EngineSettings(enforce_eager=True))
    assert d.cuda_graphs == NO_GRAPHS
    eager = profile_for("vllm").without_cuda_graphs()
    a = op(d, 33, "mlp", eager)
    b = op(d, 40, "mlp", eager)
    assert a[0] == pytest.approx(b[0] * 33 / 40, rel=1e-12) and a[1] == b[1]


def test_default_settings_keep_the_deployments_identity() -> None:
    d = dep()
    assert with_cuda_graphs(d, EngineSettings()) is d
    assert with_cuda_graphs(dep("llama.cpp-cuda"), EngineSettings()).cuda_graphs is None


def test_the_simulators_timer_decides_as_the_step_cost_does() -> None:
    for d in (dep(), with_cuda_graphs(dep("sglang"), EngineSettings(max_cudagraph_capture_size=64))):
        profile = profile_for(d.engine)
        timer = StepTimer(d, profile)
        for batch in (33, 64, 65, 512, 513, 600):
            shape = batch_shape(d, decode_batch(batch, CONTEXT))
            want = shape_time_s(d, shape, profile)
            assert abs(timer.time_s(shape) - want) <= 1e-12 * want
            assert abs(timer.decode_time_s(batch, batch * CONTEXT) - want) <= 1e-9 * want


def test_a_vllm_drafters_verify_steps_count_toward_the_capture_cap() -> None:
    """vLLM from 0.13 caps its graphs at min(2 × max_num_seqs × (1 + drafts), 512)
    (vllm_graphs.capture_cap, as the pool's graph memory counts it): with 16 seats and three
    drafts a verify step of 9 requests × 4 tokens (36) replays a graph; on 0.12 the cap is
    2 × 16 = 32 and it runs without one."""
    from types import SimpleNamespace

    from ridgeline.vllm_graphs import capture_cap, capture_query_len

    verify = [Seq(4, CONTEXT)] * 9
    profile = profile_for("vllm")
    for version in (None, "0.12.0"):
        settings = SimpleNamespace(max_num_seqs=16, spec_tokens=3, engine_version=version)
        d = with_cuda_graphs(dep(), settings)
        cap = capture_cap(16, query_len=capture_query_len(3, version))
        cost = step_cost(d, verify, profile, verify=True)
        spent = next(o.time_s for o in cost.ops if o.name == "overhead")
        assert spent == expected_overhead(d, ungraphed=cap < 36)
    assert capture_cap(16, query_len=capture_query_len(3, None)) >= 36 > 32


def test_simulates_deployment_reads_the_drafts_of_a_speculative_config() -> None:
    """simulate and observe build their deployment before --speculative-config is read into
    --spec-tokens: the drafts still reach vLLM's capture cap, as --spec-tokens 3 does."""
    from ridgeline.cli import build_parser
    from ridgeline.cli_load import asked_drafts, load_deployment

    head = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--max-num-seqs", "16", "--rate", "1"]
    config = build_parser().parse_args(
        [*head, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'])
    tokens = build_parser().parse_args([*head, "--spec-tokens", "3", "--spec-method", "ngram"])
    assert asked_drafts(config) == asked_drafts(tokens) == 3
    from_config, from_tokens = load_deployment(config), load_deployment(tokens)
    assert from_config.cuda_graphs == from_tokens.cuda_graphs
    assert from_config.cuda_graphs is not None and from_config.cuda_graphs.sizes[-1] >= 36


def test_a_vllm_verify_step_pads_to_the_sizes_vllm_rounds_for_its_drafter() -> None:
    """vLLM rounds each captured size up to a multiple of 1 + num_speculative_tokens
    (adjust_cudagraph_sizes_for_spec_decode, v0.11.1+ on the V1 runner), and a step pads to
    that list. Three drafts, 5 requests verify 5 × 4 = 20 tokens. By hand: the default list
    1, 2, 4, 8, 16, 24, … rounds to 4, 8, 16, 24, …, so 20 runs as 24, as it did unrounded
    (every 8 is already a multiple of 4). With cudagraph_capture_sizes [6, 18, 22, 30]: 6→8,
    18→20, 22→24, 30→32 (past the largest, 30: dropped), so vLLM keeps [8, 20, 24] and 20
    runs as 20, not the 22 the unrounded list gives. Two drafts, 5 requests verify 15
    tokens: 16 rounds to 18, so 15 runs as 18, not 16."""
    from types import SimpleNamespace

    from ridgeline.graph_batches import graph_tokens
    from ridgeline.vllm_graphs import spec_capture_multiple

    def capture(drafts: int, asked: tuple[int, ...] | None = None) -> Deployment:
        settings = SimpleNamespace(spec_tokens=drafts, engine_version="0.24.0",
                                   cudagraph_capture_sizes=asked)
        return with_cuda_graphs(dep(), settings)

    listed = (6, 18, 22, 30)
    assert spec_capture_multiple(3, "0.24.0") == 4
    assert graph_tokens(capture(3), 20, 5) == 24
    assert graph_tokens(capture(3, listed), 20, 5) == 20
    assert vllm_capture(asked=listed).run_as(20) == 22  # the same list, no drafter
    assert graph_tokens(capture(2), 15, 5) == 18
    assert vllm_capture().run_as(15) == 16


def test_vllms_graph_memory_counts_the_sizes_a_verify_step_pads_to() -> None:
    """One list (vllm_graphs.captured_sizes) gives both: the pool's graph estimate on v0.24
    (its layers × sizes × the per-size figure) counts exactly the rounded sizes that
    graph_batches pads a step to: with three drafts and [6, 18, 22, 30] listed, 3; with the
    default cap of 512, 49 of 51."""
    from ridgeline.engine_spec import EngineSpec
    from ridgeline.memory import kv_pool
    from ridgeline.units import MIB
    from ridgeline.vllm_memory import vllm_data

    d = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                         num_gpus=1, engine="vllm")
    per_size_bytes = d.model.num_layers * float(
        vllm_data()["cuda_graph_mib_per_layer_per_size"]) * MIB
    for asked in ((6, 18, 22, 30), None):
        settings = EngineSettings(max_model_len=4096, engine_version="0.24.0",
                                  drafter=EngineSpec(3, "eagle"),
                                  cudagraph_capture_sizes=asked)
        graphs = with_cuda_graphs(d, settings).cuda_graphs
        assert graphs is not None and all(size % 4 == 0 for size in graphs.sizes)
        counted = kv_pool(d, settings).cuda_graph_bytes / per_size_bytes
        assert round(counted) == len(graphs.sizes)
        assert abs(counted - len(graphs.sizes)) < 1e-9


def test_sglang_after_0_5_9_captures_a_cuda_graph_max_bs_its_list_skips() -> None:
    """--cuda-graph-max-bs 300 (not on SGLang's list: … 272, 288, 304): from PR #21005 (after
    0.5.9) the cap gets its own graph, so a batch of 289 to 300 pads to 300 instead of running
    ungraphed; 0.5.9 keeps the bare list, whose largest size, 288, is the last graphed batch.
    A cap on the list (256) captures the same sizes either way."""
    from types import SimpleNamespace

    sglang = dep("sglang")
    for cap, drafting in ((300, False), (100, False), (100, True)):
        old = sglang_capture_sizes(cap, drafting, version="0.5.9")
        new = sglang_capture_sizes(cap, drafting, version="0.5.10")
        assert cap not in old and new == (*old, cap)
        assert sglang_capture_sizes(cap, drafting) == new  # no version: the newest releases
    for version, runs_as in (("0.5.9", None), ("0.5.10", 300), (None, 300)):
        capture = with_cuda_graphs(sglang, SimpleNamespace(
            max_cudagraph_capture_size=300, engine_version=version)).cuda_graphs
        assert capture is not None
        assert capture.run_as(300) == capture.run_as(289) == runs_as
        assert capture.run_as(288) == 288
    assert sglang_capture_sizes(256, version="0.5.9") == sglang_capture_sizes(256)


def test_decodes_engine_version_reaches_sglangs_capture_sizes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`decode --engine sglang --cuda-graph-max-bs 100 --batch 99`: the newest releases pad
    the batch to the cap's own graph; --engine-version 0.5.9 prices it with no graph (its
    largest size is 96), as sglang_capture_sizes gives them."""
    from tests.conftest import run_cli

    def graph_line(*version: str) -> str:
        code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                                 "sglang", "--batch", "99", "--context", "2048",
                                 "--cuda-graph-max-bs", "100", "--explain", *version)
        assert code == 0, err
        return next(line for line in out.splitlines() if "CUDA graph:" in line)

    assert sglang_capture_sizes(100)[-2:] == (96, 100)
    assert "runs as SGLang's captured CUDA-graph batch 100" in graph_line()
    assert "above SGLang's largest captured CUDA-graph batch 96" in graph_line(
        "--engine-version", "0.5.9")


@pytest.mark.parametrize(("gpu", "asked"), [("l40s", {"max_cudagraph_capture_size": 4096}),
                                            ("h100", {"max_cudagraph_capture_size": 16384}),
                                            ("l40s", {"cudagraph_capture_sizes": (8, 2048, 4096)})])
def test_vllms_default_token_budget_caps_the_captured_sizes_as_a_given_one_does(
        gpu: str, asked: dict) -> None:
    """vLLM takes min(max_num_batched_tokens, max_cudagraph_capture_size) and drops listed
    sizes past the budget, its default budget too (_set_cudagraph_sizes, 0.29-0.34): on an
    L40S (vllm serve's 2,048) a cap of 4,096 captures to 2,048, on an H100 (8,192) 16,384
    to 8,192. The sizes a step pads to are the ones the pool's graph memory counts, and
    the same as with the default budget given as a flag."""
    from ridgeline.graph_batches import settings_capture, vllm_default_budget
    from ridgeline.memory import kv_pool
    from ridgeline.vllm_graphs import captured_sizes

    d = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator(gpu),
                         engine="vllm")
    settings = EngineSettings(**asked)
    budget = vllm_default_budget(d, settings, None)
    pool = kv_pool(d, settings)
    assert budget == pool.profile_tokens
    capture = settings_capture(d, settings)
    assert capture is not None and max(capture.sizes) <= budget
    given = settings_capture(d, EngineSettings(**asked, max_num_batched_tokens=budget))
    assert capture == given
    counted = captured_sizes(pool.max_num_seqs, settings.max_cudagraph_capture_size,
                             pool.profile_tokens, asked=settings.cudagraph_capture_sizes)
    assert capture.sizes == tuple(counted)
    # unclamped, the list would run past the budget (the old step list's error)
    loose = vllm_capture(None, settings.max_cudagraph_capture_size, None,
                         settings.cudagraph_capture_sizes)
    assert max(loose.sizes) > budget

"""SGLang's --cuda-graph-bs: the decode batch sizes it captures CUDA graphs at, read onto the
settings' cudagraph_capture_sizes (counted in sequences), its largest the cuda_graph_max_bs
SGLang's default reserve counts from 0.5.3 (graph_batches.settings_capture,
sglang_pool.sglang_graph_max_bs, cli_engine.apply_cuda_graph_bs)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment
from ridgeline.cost import decode_batch, step_cost
from ridgeline.engines import profile_for
from ridgeline.graph_batches import SEQUENCES, GraphCapture, with_cuda_graphs
from ridgeline.hardware import smi_total_bytes
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import sglang_memory_defaults
from ridgeline.sim.timer import StepTimer
from tests.conftest import run_cli
from tests.test_graph_batches import CONTEXT, dep, expected_overhead, op, overhead

LISTED = (1, 2, 4, 8)
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
          "--context", str(CONTEXT), "--json")


def listed(sizes: tuple[int, ...] = LISTED) -> Deployment:
    return with_cuda_graphs(dep("sglang"), EngineSettings(cudagraph_capture_sizes=sizes))


def expected_s(capsys: pytest.CaptureFixture[str], batch: int, *flags: str) -> float:
    code, out, err = run_cli(capsys, *DECODE, "--batch", str(batch), *flags)
    assert code == 0, err
    return float(json.loads(out)["points"][0]["expected"]["time_s"])


def test_the_list_is_the_captured_sizes_in_sequences() -> None:
    d = listed((8, 2, 1, 4, 2))
    assert d.cuda_graphs == GraphCapture(LISTED, unit=SEQUENCES)


def test_a_decode_above_the_lists_largest_runs_ungraphed() -> None:
    d = listed()
    assert overhead(d, 8, "sglang") == expected_overhead(d, False, "sglang")
    assert overhead(d, 9, "sglang") == expected_overhead(d, True, "sglang")
    # by default SGLang captures up to its tier's 256 on an H100, so 9 runs as 12, graphed
    assert overhead(dep("sglang"), 9, "sglang") == expected_overhead(dep("sglang"), False,
                                                                      "sglang")


def test_a_decode_between_listed_sizes_runs_the_next_sizes_matmul_rows() -> None:
    d = listed()
    assert op(d, 3, "mlp") == op(d, 4, "mlp")
    assert op(d, 3, "attention projections") == op(d, 4, "attention projections")
    assert op(d, 3, "attention")[1] < op(d, 4, "attention")[1]  # only the real rows' caches
    # a size the list names is not padded: under 1, 3, 8 a batch of 3 runs as itself
    assert op(listed((1, 3, 8)), 3, "mlp") != op(listed((1, 3, 8)), 4, "mlp")
    assert op(listed((1, 3, 8)), 2, "mlp") == op(listed((1, 3, 8)), 3, "mlp")


def test_the_cli_flag_prices_decode_as_the_step_cost_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    flag = ("--cuda-graph-bs", "1", "2", "4", "8")
    for batch in (3, 9):
        want = step_cost(listed(), decode_batch(batch, CONTEXT), profile_for("sglang")).time_s
        assert expected_s(capsys, batch, *flag) == pytest.approx(want, rel=1e-12)
    assert expected_s(capsys, 9, *flag) > expected_s(capsys, 9)  # ungraphed past 8
    # the same list in another order, or with a size twice, is the same capture
    assert expected_s(capsys, 9, "--cuda-graph-bs", "8", "4", "2", "1", "4") == \
        expected_s(capsys, 9, *flag)


def test_the_lists_largest_is_the_reserves_cuda_graph_max_bs() -> None:
    """From 0.5.3 server_args sets cuda_graph_max_bs = max(cuda_graph_bs), which the default
    reserve counts at 2 MiB a batch: 1, 2, 4, 8 sizes the pool as --cuda-graph-max-bs 8,
    and a --cuda-graph-max-bs given beside it changes nothing."""
    d = dep("sglang")
    pool = kv_pool(d, EngineSettings(max_model_len=8192, cudagraph_capture_sizes=LISTED))
    assert pool == kv_pool(d, EngineSettings(max_model_len=8192, max_cudagraph_capture_size=8))
    assert pool == kv_pool(d, EngineSettings(max_model_len=8192, cudagraph_capture_sizes=LISTED,
                                             max_cudagraph_capture_size=64))
    h100 = smi_total_bytes(d.accelerator)
    assert pool.reserved_fraction == sglang_memory_defaults(
        h100, cuda_graph_max_bs=max(LISTED)).mem_fraction_static
    assert pool.pool_bytes > kv_pool(d, EngineSettings(max_model_len=8192)).pool_bytes


def test_fit_explains_the_reserve_by_the_lists_largest(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                             "sglang", "--context-length", "8192", "--explain",
                             "--cuda-graph-bs", "1", "2", "4", "8")
    assert code == 0, err
    assert "CUDA graphs to batch 8 (--cuda-graph-bs's largest)" in out + err


@pytest.mark.parametrize("argv, says", [
    (("--engine", "sglang", "--cuda-graph-bs", "1", "0"), "must be positive"),
    (("--engine", "sglang", "--cuda-graph-bs", "-4"), "must be positive"),
    (("--engine", "vllm", "--cuda-graph-bs", "1", "2"), "--cudagraph-capture-sizes"),
    (("--cuda-graph-bs", "1", "2"), "vLLM lists its captured sizes"),
    (("--engine", "trtllm", "--cuda-graph-bs", "8"), "trtllm has no such flag"),
    (("--engine", "sglang", "--cudagraph-capture-sizes", "8"), "sglang has no such flag"),
    (("--engine", "sglang", "--cuda-graph-bs", "1", "8", "--cuda-graph-max-bs", "64",
      "--engine-version", "0.5.2"), "disagree"),
])
def test_bad_lists_and_other_engines_are_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "9",
                             *argv)
    assert code == 2 and not out and says in err and len(err.strip().splitlines()) == 1


def test_a_comparison_of_engines_refuses_one_engines_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                             "vllm,sglang", "--context-length", "8192", "--cuda-graph-bs", "8")
    assert code == 2 and not out and "one engine's settings" in err


def test_simulate_times_its_steps_under_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    """A busy SGLang server whose graphs stop at batch 8 runs its larger decode batches
    ungraphed, so its inter-token latency rises over the default's sizes (to 256 here)."""
    run = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--rate", "20",
           "--num-requests", "200", "--json")
    code, default, err = run_cli(capsys, *run)
    assert code == 0, err
    code, capped, err = run_cli(capsys, *run, "--cuda-graph-bs", *map(str, LISTED))
    assert code == 0, err
    itl = [json.loads(out)["itl_s"]["mean"] for out in (default, capped)]
    assert itl[1] > itl[0]
    timer_dep = listed()
    timer = StepTimer(timer_dep, profile_for("sglang"))
    for batch in (3, 8, 9):
        want = step_cost(timer_dep, decode_batch(batch, CONTEXT), profile_for("sglang")).time_s
        assert timer.decode_time_s(batch, batch * CONTEXT) == pytest.approx(want, rel=1e-9)

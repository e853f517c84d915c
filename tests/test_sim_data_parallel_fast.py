"""The data-parallel simulator's runs of lock-step decode steps (sim/data_parallel.py,
``DataParallelSimulator._bulk_decode``) give ``simulate --json`` to the last digit what its
plain steps give (fast_path=False): a few of scripts/check_dp_fast_path.py's cases, both ways."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import sim_config
from ridgeline.sim.data_parallel import DataParallelSimulator
from ridgeline.sim.workload import Workload


def harness() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "scripts" / "check_dp_fast_path.py"
    spec = importlib.util.spec_from_file_location("check_dp_fast_path", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = harness()
NAMES = [name for name, _ in CHECK.CASES]


@pytest.mark.parametrize("name", ["vllm dp4 x2gpu, closed loop 24",
                                  "vllm dp4 x2gpu, capped open loop",
                                  "vllm dp8, prefix groups",
                                  "vllm dp8, 2 seats a rank",
                                  "sglang dp2, closed loop 16",
                                  "sglang dp8, 4k/1k at 2/s"])
def test_lock_step_decode_runs_give_the_plain_steps_figures_to_the_last_digit(
        name: str) -> None:
    argv = CHECK.CASES[NAMES.index(name)][1]
    same, _, _, out = CHECK.compare(argv)
    assert not out.startswith("exit"), out
    assert same


def test_a_small_pool_preempts_the_same_both_ways_some_steps_in_runs() -> None:
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           num_gpus=2, engine="vllm", expert_parallel=True,
                           data_parallel_size=4)
    results = []
    for fast in (True, False):
        config = sim_config(dep, EngineSettings(max_model_len=10_000,
                                                kv_cache_memory_bytes=1_500_000_000),
                            fast_path=fast)
        sim = DataParallelSimulator(dep, profile_for("vllm"), config)
        # 24 requests of 6,000 + 1,500 tokens: 8 preemptions, 1,470 of 3,669 steps in runs
        work = Workload(num_requests=24, input_len="6000", output_len="1500", rate=20.0, seed=1)
        result = sim.run(iter(work))
        results.append((result.duration_s, result.preemptions, result.steps,
                        result.percentiles("itl"), result.percentiles("ttft")))
        if fast:
            assert sim.bulk_steps > 0  # some steps went in runs
        else:
            assert sim.bulk_steps == 0
    assert results[0][1] > 0  # it preempted
    assert results[0] == results[1]

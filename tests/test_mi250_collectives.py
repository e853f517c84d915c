"""vLLM runs an MI250 as two ranks, its dies: a step's all-reduces run over the dies, a ring
whose legs cross the in-package link between a card's two dies and the links between cards,
the slowest leg setting its pace; expert parallelism spreads the experts over the dies, and
the step waits on the busiest die."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import ACTIVATION_BYTES, batch_shape, decode_batch, step_terms
from ridgeline.hardware import Accelerator
from ridgeline.memory import ep_extra_bytes
from ridgeline.parallel import (
    all_reduce_time_s,
    interconnect_bytes_per_s,
    rank_link_bytes_per_s,
)
from ridgeline.vllm_pool import vllm_deployment
from tests.conftest import run_cli


def vllm(model: str, gpu: str, gpus: int, ep: bool = False) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, gpus,
                            engine="vllm", expert_parallel=ep)


def link_time_s(dep: Deployment, batch: int, name: str = "tp all-reduce") -> float:
    terms = step_terms(dep, batch_shape(dep, decode_batch(batch, 2_000)))
    return dict(terms.link).get(name, 0.0)


def work_bytes(dep: Deployment, batch: int, name: str) -> float:
    terms = step_terms(dep, batch_shape(dep, decode_batch(batch, 2_000)))
    return sum(b * count for op, _, b, count in terms.work if op == name)


def test_the_mi250s_catalog_records_the_link_between_its_dies() -> None:
    """The in-package link between the GCDs is 4 xGMI links of 50 GB/s a direction: 200."""
    for gpu in ("mi250", "mi250x"):
        acc = resolve_accelerator(gpu)
        assert acc.runtime_devices == 2
        assert acc.die_link_bytes_per_s == pytest.approx(4 * 50e9)
        assert "link" in acc.figure_sources
    assert resolve_accelerator("h100").die_link_bytes_per_s is None


def test_a_ring_over_the_dies_of_one_card_runs_at_the_in_package_link() -> None:
    acc = resolve_accelerator("mi250")
    assert acc.die_link_bytes_per_s is not None
    assert rank_link_bytes_per_s(acc, 1, 2) == acc.die_link_bytes_per_s


def test_a_ring_over_four_mi250s_dies_is_paced_by_each_dies_share_of_the_card_links() -> None:
    """8 dies on the 4 cards of an MI250 board: every card reaches the other 3, each die its
    half of the card's 300 GB/s (150), under the dies' 200; over 2 cards, a third of them."""
    acc = resolve_accelerator("mi250")
    card, die = acc.link_bytes_per_s, acc.die_link_bytes_per_s
    assert card is not None and die is not None and acc.host_gpus == 4
    assert rank_link_bytes_per_s(acc, 4, 2) == pytest.approx(min(die, card / 2))
    assert rank_link_bytes_per_s(acc, 4, 2) < die
    assert rank_link_bytes_per_s(acc, 2, 2) == pytest.approx(card / 3 / 2)


def test_a_card_that_is_one_device_keeps_its_mesh_reach() -> None:
    for gpu in ("h100", "mi300x"):
        acc = resolve_accelerator(gpu)
        assert rank_link_bytes_per_s(acc, 8) == interconnect_bytes_per_s(acc, 7)
        assert all_reduce_time_s(1e6, 8, acc) == all_reduce_time_s(1e6, 8, acc, devices=1)


def test_one_mi250x_under_vllm_all_reduces_between_its_two_dies() -> None:
    """1 x MI250X under vLLM is TP2: every layer's two all-reduces cross the in-package link,
    where counting the card (TP1) priced none."""
    dep = vllm("llama-3.1-8b", "mi250x", 1)
    assert dep.tensor_parallel_size == 1 and dep.engine_tensor_parallel_size == 2
    act = 64 * dep.model.hidden_size * ACTIVATION_BYTES
    per_layer = 2 * all_reduce_time_s(act, 2, dep.accelerator, devices=2)
    assert per_layer > 0
    assert link_time_s(dep, 64) == pytest.approx(dep.model.num_layers * per_layer)


def test_four_mi250s_all_reduce_over_eight_dies_at_the_slowest_leg() -> None:
    dep = vllm("llama-3.1-70b", "mi250", 4)
    acc = dep.accelerator
    act = 64 * dep.model.hidden_size * ACTIVATION_BYTES
    t = all_reduce_time_s(act, 8, acc, devices=2)
    reach = rank_link_bytes_per_s(acc, 4, 2)
    assert t == pytest.approx(8e-6 + 2 * 7 / 8 * act / reach)  # the shot kernels' price
    assert link_time_s(dep, 64) == pytest.approx(2 * dep.model.num_layers * t)


def test_expert_parallel_over_four_mi250xs_reads_as_its_eight_dies_do() -> None:
    """Mixtral's 8 experts over 4 x MI250X under EP sit one a die: at batch 1 (2 experts
    touched) the step waits on a die reading a whole expert at half the card's bandwidth, so
    the card reads what its two dies would, each as busy as the busiest — as vLLM's own
    8 ranks (vllm_deployment) price it, not 4 cards of 2 experts each."""
    dep = vllm("mixtral-8x7b", "mi250x", 4, ep=True)
    assert dep.engine_expert_ranks == 8
    die = vllm_deployment(dep)
    assert die.engine_expert_ranks == 8 and die.devices_per_gpu == 1
    for batch in (1, 64):
        assert work_bytes(dep, batch, "experts") == pytest.approx(
            dep.devices_per_gpu * work_bytes(die, batch, "experts"))


def test_expert_parallel_memory_counts_whole_experts_a_die() -> None:
    """8 experts over 8 x MI250X's 16 dies: half the dies hold one whole expert, so the card
    holding two holds twice its even share."""
    dep = vllm("mixtral-8x7b", "mi250x", 8, ep=True)
    experts = dep.bytes_by_category["experts"]
    assert ep_extra_bytes(dep) == pytest.approx(2 * experts * (1 / 8 - 1 / 16))
    assert ep_extra_bytes(vllm("mixtral-8x7b", "mi250x", 4, ep=True)) == 0.0


def test_one_mi250x_takes_enable_expert_parallel_over_its_dies(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "qwen3-30b-a3b", "--gpu", "mi250x", "--num-gpus",
                           "1", "--batch", "1", "--enable-expert-parallel")
    assert code == 0 and "2 dies: TP2" in out


def test_hardware_json_gives_the_die_link_where_recorded(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "hardware", "mi250x", "--json")
    assert code == 0
    link = json.loads(out)["link"]
    assert link["die_bytes_per_s_per_direction"] == resolve_accelerator("mi250x") \
        .die_link_bytes_per_s
    code, out, _ = run_cli(capsys, "hardware", "h100", "--json")
    assert "die_bytes_per_s_per_direction" not in out


def test_a_record_may_give_the_die_link() -> None:
    record = {"id": "two-die", "memory_bytes": 128e9, "memory_bandwidth_bytes_per_s": 3.2e12,
              "peak_flops": {"bf16": 3.8e14}, "vendor": "amd", "form": "datacenter",
              "runtime_devices": 2,
              "link": {"kind": "infinity-fabric", "bytes_per_s_per_direction": 3e11,
                       "die_bytes_per_s_per_direction": 2e11}}
    assert Accelerator.from_record(record).die_link_bytes_per_s == 2e11

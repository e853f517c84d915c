"""plan's pricing words: a tensor-parallel replica on a card priced by a one-GPU offer is
cautioned (plan audit, 2026-12-06: L40S TP2 priced as two g6e.xlarge VMs), --explain says
where its output tok/s comes from, and a price per GPU-hour prints at the precision its
products use ($1.861, not $1.86)."""

from __future__ import annotations

import json

import pytest

from ridgeline.candidate import Candidate
from ridgeline.cli import main
from ridgeline.hardware import resolve_accelerator
from ridgeline.host_pricing import shared_host_caution
from ridgeline.reports.plan_lists import gpu_hour_price


def _replica(gpu: str, tp: int, price: float | None = None) -> Candidate:
    acc = resolve_accelerator(gpu)
    return Candidate(acc.id, tp, 1, "fp8", "fp8", None, 64, 0.02, 0.1, 5.0, 1,
                     acc.price_per_hour_usd if price is None else price, False, "", (1.0, 1.0))


def test_a_tp2_replica_of_a_card_priced_by_a_one_gpu_vm_is_cautioned() -> None:
    assert resolve_accelerator("l40s").price_offer_gpus == 1  # AWS g6e.xlarge
    caution = shared_host_caution(_replica("l40s", 2))
    assert "1-GPU offer" in caution and "g6e.xlarge" in caution and "--price l40s=" in caution
    assert shared_host_caution(_replica("l40s", 1)) == ""  # one GPU: the offer holds it
    assert shared_host_caution(_replica("l40s", 2), priced_by_user=True) == ""  # --price
    # an 8-GPU node's per-GPU rate: its offer is not recorded as smaller than a replica
    assert shared_host_caution(_replica("h100", 2)) == ""


def test_plan_cautions_the_winner_and_explains_its_gpus_rented(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "llama-3.1-8b", "--gpus", "l40s", "--rate", "4", "--input-len", "1000",
            "--output-len", "250", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
            "--slo-itl-ms", "15", "--max-gpus", "2", "--workers", "1"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    win = data["winner"]
    assert win["tensor_parallel_size"] == 2
    assert any("1-GPU offer" in c for c in data["cautions"])
    assert main([*args, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "every GPU rents alone" not in out and "a TP2 replica's GPUs share one host" in out
    # the output tok/s: 250 tokens × 4 req/s, its source said
    assert "output tok/s = 1,000  [250 output tokens × 4 req/s]" in out
    # the price as its products use it: 2 × 1.861 = 3.722
    assert "(2 GPUs at $1.861, simulated)" in out and "l40s $1.861 (" in out


def test_a_drawn_loads_output_rate_names_the_draws_mean(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "6", "--input-len",
                 "uniform:200,2000", "--output-len", "uniform:50,400", "--slo-ttft-ms", "400",
                 "--slo-tpot-ms", "35", "--max-gpus", "1", "--workers", "1", "--explain"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "output tok/s = " in x)
    value, source = line.split("=", 1)[1].split("  [")
    mean = float(source.split("mean output ")[1].split(" tokens")[0])
    assert "of the 2,000 requests the sizing draws (seed 0) × 6 req/s" in source
    assert mean != 225  # the draw's mean, not the distribution's
    assert float(value.replace(",", "")) == pytest.approx(mean * 6, rel=5e-4)


def test_a_gpu_hour_price_keeps_the_digits_it_is_used_at() -> None:
    assert gpu_hour_price(1.861) == "$1.861"
    assert gpu_hour_price(2.99) == "$2.99"
    assert gpu_hour_price(0.8048) == "$0.8048"
    assert gpu_hour_price(3.0) == "$3.00"

"""SGLang's --enable-eplb and --ep-num-redundant-experts: the replicas every --ep-size rank
loads with the weights, sized through the one formula vLLM's EPLB uses (memory.ep_extra_bytes),
named in fit's weights line, --explain and --json; SGLang's asserts in its words
(sglang_eplb.py; engines.json sglang.eplb)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.sglang_eplb import sglang_eplb_data
from tests.test_cost import sglang_trivial_layout_served
from tests.test_vllm_eplb import dsv3_expert_bytes_per_moe_layers

DSV3 = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
        "--max-model-len", "32768")
EP8 = (*DSV3, "--ep-size", "8")
DP8 = (*DSV3, "--dp-size", "8", "--enable-dp-attention", "--ep-size", "8")
EPLB_32 = ("--enable-eplb", "--ep-num-redundant-experts", "32")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fit_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "fit", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.parametrize("layout", [EP8, DP8], ids=["tp8-ep8", "dp-attention-dp8-ep8"])
def test_deepseek_v3_on_sglang_ep8_with_32_redundant_experts_holds_4_more_experts_a_gpu(
        capsys: pytest.CaptureFixture[str], layout: tuple[str, ...]) -> None:
    plain = fit_json(capsys, *layout)
    eplb = fit_json(capsys, *layout, *EPLB_32)
    grown = eplb["taken_bytes_per_gpu"]["weights"] - plain["taken_bytes_per_gpu"]["weights"]
    four = 32 // 8 * dsv3_expert_bytes_per_moe_layers()  # (256 + 32) ÷ 8 - 256 ÷ 8 experts
    assert grown == pytest.approx(four, rel=1e-5)
    assert eplb["eplb"]["redundant_expert_bytes_per_gpu"] == pytest.approx(grown)
    assert (eplb["eplb"]["physical_experts"], eplb["eplb"]["experts_per_rank"]) == (288, 36)


def test_sglang_and_vllm_size_the_same_replicas_through_one_formula(
        capsys: pytest.CaptureFixture[str]) -> None:
    sglang = fit_json(capsys, *EP8, *EPLB_32)
    vllm = fit_json(capsys, "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                    "--enable-expert-parallel", "--max-model-len", "32768", "--enable-eplb",
                    "--eplb-config", '{"num_redundant_experts": 32}')
    assert (sglang["eplb"]["redundant_expert_bytes_per_gpu"]
            == vllm["eplb"]["redundant_expert_bytes_per_gpu"])


def test_sglang_loses_from_its_pool_exactly_what_the_replicas_add(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys, *EP8)
    eplb = fit_json(capsys, *EP8, *EPLB_32)
    lost = plain["pool_bytes_per_gpu"] - eplb["pool_bytes_per_gpu"]
    # SGLang's pool is a fraction of the memory less the weights: the weights' growth, whole
    assert lost == pytest.approx(eplb["eplb"]["redundant_expert_bytes_per_gpu"], rel=1e-6)
    assert eplb["conversations"] < plain["conversations"]


def test_sglang_fit_names_the_replicas_in_its_weights_line_explain_and_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", *EP8, *EPLB_32, "--explain")
    assert code == 0
    weights = next(line for line in out.splitlines() if line.startswith("− weights"))
    assert "32 redundant experts, EPLB" in weights
    assert "256 + 32 = 288 physical experts over 8 expert-parallel ranks, 36 a rank" in out
    assert "SGLang loads them with the weights" in out
    every = sglang_eplb_data()["rebalance_num_iterations"]  # said to be unpriced
    assert f"eplb_rebalance_num_iterations ({every:,}) steps is not priced" in out


def test_sglang_loads_the_replicas_without_enable_eplb_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang refuses nothing for --ep-num-redundant-experts alone: its MoE layers are built
    with them (engines.json sglang.eplb.without_eplb_source)."""
    balanced = fit_json(capsys, *EP8, *EPLB_32)
    static = fit_json(capsys, *EP8, "--ep-num-redundant-experts", "32")
    assert (static["taken_bytes_per_gpu"]["weights"]
            == balanced["taken_bytes_per_gpu"]["weights"])
    code, out, _ = run(capsys, "fit", *EP8, "--ep-num-redundant-experts", "32")
    assert code == 0 and "32 redundant experts, no --enable-eplb" in out
    assert "SGLang routes no token to the 32 replicas" in out and "rebalancing every" not in out
    assert "serving (experts + 32) ÷ ranks experts" in out  # priced, as the layout leaves it


def test_eplb_at_ep_size_1_is_refused_in_sglangs_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fit", *DSV3, *EPLB_32)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert sglang_eplb_data()["needs_ep_size"] in err


def test_a_total_sglangs_ep_size_does_not_divide_is_refused_in_its_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", *EP8, "--enable-eplb", "--ep-num-redundant-experts", "30")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert sglang_eplb_data()["even_refusal"] in err and "32 would divide" in err


@pytest.mark.parametrize("argv, said", [
    ((*EP8, "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}'),
     "--eplb-config is vLLM's"),
    (("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--enable-expert-parallel",
      "--max-model-len", "32768", *EPLB_32), "--ep-num-redundant-experts is SGLang's"),
    ((*DSV3, "--ep-num-redundant-experts", "32"), "is not modelled"),
    ((*EP8, "--eplb-config.num_redundant_experts", "8", "--ep-num-redundant-experts", "8"),
     "given 2 ways")])
def test_another_engines_spelling_or_an_unmodelled_layout_exits_2(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], said: str) -> None:
    code, out, err = run(capsys, "fit", *argv)
    assert code == 2 and not out and said in err


def test_fits_engine_comparison_refuses_sglangs_redundant_experts_as_one_engines_setting(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                         "--engine", "vllm,sglang", "--ep-num-redundant-experts", "32")
    assert code == 2 and not out
    assert "one engine's settings" in err and "--ep-num-redundant-experts" in err


def test_sglang_prices_the_busiest_rank_lighter_under_enable_eplb_and_heavier_without_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--enable-eplb places the replicas and lightens the busiest rank; the replicas alone
    take no token and leave the first ranks (256 + 32) ÷ 8 = 36 experts to serve, 1.125 × the
    mean's tokens and reads (expert_ranks.trivial_layout_imbalance), so the prompt is slower."""
    args = ("prefill", *EP8, "--prompt-len", "4096", "--json")
    times = {}
    for name, extra in (("plain", ()), ("eplb", EPLB_32),
                        ("replicas", ("--ep-num-redundant-experts", "32"))):
        code, out, err = run(capsys, *args, *extra)
        assert code == 0, err
        times[name] = json.loads(out)["floor_time_s"]
    assert times["eplb"] < times["plain"] < times["replicas"]


def test_sglang_under_enable_eplb_reads_every_replica_a_rank_holds_once_every_expert_is_touched(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An 8,192-token prompt touches all 256 experts: under --enable-eplb each of the 8 GPUs
    reads its (256 + 32) ÷ 8 = 36, 4 experts' bytes in every MoE layer more than without
    replicas (from config.json); without --enable-eplb no token reaches them, but the first
    ranks serve as many experts, so the busiest reads as much (the layout walked slot by
    slot: tests.test_cost.sglang_trivial_layout_served)."""
    args = ("prefill", *EP8, "--prompt-len", "8192", "--json")
    moved = {}
    for name, extra in (("plain", ()), ("eplb", EPLB_32),
                        ("replicas", ("--ep-num-redundant-experts", "32"))):
        code, out, err = run(capsys, *args, *extra)
        assert code == 0, err
        report = json.loads(out)
        assert report["prompt_steps"] == 1
        moved[name] = report["bytes_moved"]
    more = (32 + 256) // 8 - 256 // 8
    assert moved["eplb"] - moved["plain"] == pytest.approx(
        8 * more * dsv3_expert_bytes_per_moe_layers(), rel=1e-5)
    served = max(sglang_trivial_layout_served(256, 32, 8))  # the first ranks' 36
    assert moved["replicas"] - moved["plain"] == pytest.approx(
        8 * (served - 256 // 8) * dsv3_expert_bytes_per_moe_layers(), rel=1e-5)

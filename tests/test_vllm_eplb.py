"""vLLM's --enable-eplb: the redundant experts every expert-parallel rank loads with the
weights, which the KV pool loses, named in fit's weights line, --explain and --json; vLLM's
refusals in its words; with redundant experts the busiest expert-parallel rank priced as EPLB
leaves it (expert_ranks.ep_imbalance), reading the replicas it holds that the step's tokens reach
(expert_ranks.busiest_rank_physical_experts), as its caution says (vllm_eplb.py; engines.json
vllm.eplb)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import Seq, decode_batch, step_cost, step_time_s
from ridgeline.datafiles import load_data
from ridgeline.expert_ranks import (
    EP_IMBALANCE_EPLB,
    busiest_rank_experts,
    busiest_rank_physical_experts,
    ep_imbalance,
    ep_rank_experts,
    physical_experts_touched,
)
from ridgeline.memory import EngineSettings, ep_extra_bytes, kv_pool
from ridgeline.moe import expected_experts_touched
from ridgeline.quantization import EXPERTS
from ridgeline.vllm_eplb import EPLBSettings, local_experts, parse_eplb_config

DSV3 = ("deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--enable-expert-parallel",
        "--max-model-len", "32768")
EPLB_32 = ("--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}')


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fit_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "fit", *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def dsv3_expert_bytes_per_moe_layers() -> float:
    """One routed expert's bytes in every MoE layer of DeepSeek-V3's checkpoint, from its
    config.json: gate, up and down projections of hidden × moe_intermediate fp8 weights, one
    byte each, with one fp32 scale per weight_block_size block; layers past the first
    first_k_dense_replace dense ones."""
    config = load_data("models/deepseek-ai--DeepSeek-V3.json")
    h, inter = config["hidden_size"], config["moe_intermediate_size"]
    rows, cols = config["quantization_config"]["weight_block_size"]
    elements = 3 * h * inter  # gate_proj, up_proj, down_proj
    scales = 3 * (h // rows) * (inter // cols)  # [out / 128, in / 128] fp32 each
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    return (elements * 1 + scales * 4) * moe_layers


def test_deepseek_v3_ep8_with_32_redundant_experts_holds_4_more_experts_a_layer_per_gpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys, *DSV3)
    eplb = fit_json(capsys, *DSV3, *EPLB_32)
    grown = eplb["taken_bytes_per_gpu"]["weights"] - plain["taken_bytes_per_gpu"]["weights"]
    four = 32 // 8 * dsv3_expert_bytes_per_moe_layers()
    assert grown == pytest.approx(four, rel=1e-5)
    assert round(grown / 2**30, 2) == 9.52  # the docstring's worked number
    assert eplb["eplb"]["redundant_expert_bytes_per_gpu"] == pytest.approx(grown)
    assert (eplb["eplb"]["physical_experts"], eplb["eplb"]["experts_per_rank"]) == (288, 36)


def test_the_pool_loses_exactly_what_the_redundant_experts_add(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys, *DSV3)
    eplb = fit_json(capsys, *DSV3, *EPLB_32)
    lost = plain["pool_bytes_per_gpu"] - eplb["pool_bytes_per_gpu"]
    assert lost == pytest.approx(eplb["eplb"]["redundant_expert_bytes_per_gpu"], rel=1e-9)
    assert eplb["conversations"] < plain["conversations"]


def test_fit_names_the_redundant_experts_in_its_weights_line_and_explain(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", *DSV3, *EPLB_32, "--explain")
    assert code == 0
    weights = next(line for line in out.splitlines() if line.startswith("− weights"))
    assert "32 redundant experts, EPLB" in weights
    assert "256 + 32 = 288 physical experts over 8 expert-parallel ranks, 36 a rank" in out
    assert "vision tower" not in out  # the replicas are not read as a tower


def test_eplb_without_redundant_experts_leaves_the_weights_and_says_the_step_is_unpriced(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = fit_json(capsys, *DSV3)
    eplb = fit_json(capsys, *DSV3, "--enable-eplb")
    assert eplb["taken_bytes_per_gpu"]["weights"] == plain["taken_bytes_per_gpu"]["weights"]
    assert any("priced as without EPLB" in c for c in eplb["cautions"])


def dsv3_ep8() -> Deployment:
    """DeepSeek-V3 on 8 H200s, its experts whole and spread over the 8 (vLLM's EP8)."""
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                            None, 8, expert_parallel=True)


def experts_op(cost: Any) -> Any:
    return next(op for op in cost.ops if op.name == "experts")


def test_redundant_experts_under_eplb_shrink_the_busiest_ranks_expert_matmuls_by_the_data_ratio(
        ) -> None:
    plain = dsv3_ep8()
    balanced = plain.with_eplb(True, 32)
    prompt = [Seq(8192)]  # an 8,192-token prompt, where the expert matmuls bind
    costs = {d: step_cost(d, prompt) for d in (plain, balanced)}
    ops = {d: experts_op(c) for d, c in costs.items()}
    assert ops[balanced].flops / ops[plain].flops == pytest.approx(
        ep_imbalance(True) / ep_imbalance(False))
    assert ops[balanced].flops < ops[plain].flops
    assert round(ep_imbalance(True) / ep_imbalance(False), 2) == 0.92  # the docstrings' figure
    assert step_time_s(balanced, prompt) < step_time_s(plain, prompt)


def test_where_every_expert_is_touched_the_busiest_rank_reads_all_its_replicas() -> None:
    plain = dsv3_ep8()
    balanced = plain.with_eplb(True, 32)
    prompt = [Seq(8192)]  # 8,192 tokens × 8 routed: every one of the 256 experts touched
    moe = plain.model.moe
    assert moe is not None
    assert expected_experts_touched(moe.num_experts, moe.experts_per_token, 8192) == 256
    ops = {d: experts_op(step_cost(d, prompt)) for d in (plain, balanced)}
    held = local_experts(plain, EPLBSettings(32))  # (256 + 32) ÷ 8
    assert ops[balanced].bytes / ops[plain].bytes == pytest.approx(
        held / ep_rank_experts(moe.num_experts, 8))
    assert held == 36 and ops[balanced].bytes / ops[plain].bytes == pytest.approx(1.125)
    # the 4 more experts a rank reads are the replicas the pool holds, one expert's bytes in
    # every MoE layer each, from config.json
    more = ops[balanced].bytes - ops[plain].bytes
    assert more == pytest.approx(ep_extra_bytes(plain, 1.0, 32) - ep_extra_bytes(plain),
                                 rel=1e-9)
    assert more == pytest.approx((held - 32) * dsv3_expert_bytes_per_moe_layers(), rel=1e-5)


def test_at_one_token_the_replicas_change_the_busiest_ranks_read_little() -> None:
    plain = dsv3_ep8()
    balanced = plain.with_eplb(True, 32)
    one = decode_batch(1, 1000)
    moe = plain.model.moe
    assert moe is not None
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, 1)
    ops = {d: experts_op(step_cost(d, one)) for d in (plain, balanced)}
    ratio = ops[balanced].bytes / ops[plain].bytes
    assert ratio == pytest.approx(busiest_rank_physical_experts(moe.num_experts, 32, 8, touched)
                                  / busiest_rank_experts(moe.num_experts, 8, touched))
    assert 1.0 < ratio < 1.01  # 2.548 experts on the busiest rank against 2.544
    assert step_time_s(balanced, one) == pytest.approx(step_time_s(plain, one), rel=0.01)


def test_eplb_balances_only_with_replicas_to_place_over_expert_parallel_ranks() -> None:
    plain = dsv3_ep8()
    assert plain.with_eplb(True, 32).eplb_balanced
    assert plain.with_eplb(True, 0) == plain  # EPLB only reorders: the stated factor
    assert plain.with_eplb(False, 32) == plain  # vLLM refuses replicas without EPLB
    sliced = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                              None, 8)
    assert sliced.with_eplb(True, 32) == sliced  # experts sliced, no busiest rank


def test_prefill_prices_the_busiest_rank_lighter_with_eplb_and_says_by_how_much(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("prefill", *DSV3, "--prompt-len", "4096", "--json")
    outs = [run(capsys, *args, *extra) for extra in ((), EPLB_32, ("--enable-eplb",))]
    assert all(code == 0 for code, _, _ in outs)
    plain, eplb, reordered = (json.loads(out) for _, out, _ in outs)
    assert eplb["time_s"] < plain["time_s"] == reordered["time_s"]
    said = f"busiest expert-parallel rank at {EP_IMBALANCE_EPLB:g} × the mean routed tokens"
    assert any(said in c for c in eplb["cautions"])
    assert any("priced as without EPLB" in c for c in reordered["cautions"])


def test_decodes_read_in_all_counts_the_replicas_its_tokens_reach(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At batch 64 (222.4 of 256 experts touched) the 8 GPUs read, between them, the copies
    of each expert the tokens reach: the 224 one-copy experts touched with p, the 32 doubled
    ones' 64 replicas with 1 − (1 − p)^(1/2) each (physical_experts_touched), one expert's
    bytes in every MoE layer each from config.json; still under the busiest rank's read × 8."""
    args = ("decode", *DSV3, "--batch", "64", "--json")
    points = []
    for extra in ((), EPLB_32):
        code, out, err = run(capsys, *args, *extra)
        assert code == 0, err
        points.append(json.loads(out)["points"][0])
    plain, eplb = points
    moe = resolve_model("deepseek-v3").moe
    assert moe is not None
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, 64)
    p = touched / moe.num_experts
    physical = (moe.num_experts - 32) * p + 2 * 32 * (1 - (1 - p) ** 0.5)
    assert physical == pytest.approx(physical_experts_touched(moe.num_experts, 32, touched))
    assert round(touched, 1) == 222.4 and round(physical, 1) == 235.5  # the docstring's
    more = eplb["weight_bytes_read_in_all"] - plain["weight_bytes_read_in_all"]
    assert more == pytest.approx((physical - touched) * dsv3_expert_bytes_per_moe_layers(),
                                 rel=1e-5)
    assert plain["weight_bytes_read_in_all"] < eplb["weight_bytes_read_in_all"] \
        < eplb["weight_bytes_read"]


def test_decode_where_the_expert_reads_bind_pays_for_the_replicas_eplb_reads_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ("decode", *DSV3, "--batch", "64", "--json")
    code, out, _ = run(capsys, *args)
    code_eplb, out_eplb, _ = run(capsys, *args, *EPLB_32)
    assert code == code_eplb == 0
    plain, eplb = json.loads(out)["points"][0], json.loads(out_eplb)
    point = eplb["points"][0]
    assert point["flops"] < plain["flops"]  # the busiest rank's expert matmuls shrink ...
    assert plain["bound"] == point["bound"] == "memory bandwidth"  # ... but reads bind,
    assert point["weight_bytes_read"] > plain["weight_bytes_read"]  # and it reads replicas
    assert point["step_time_s"] > plain["step_time_s"]
    assert any("--enable-eplb" in c and "reading the replicas it holds" in c
               for c in eplb["cautions"])


def test_decode_explain_names_the_busiest_ranks_physical_experts_under_eplb(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "decode", *DSV3, "--batch", "1", *EPLB_32, "--explain")
    assert code == 0
    moe = resolve_model("deepseek-v3").moe
    assert moe is not None
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, 1)
    most = busiest_rank_physical_experts(moe.num_experts, 32, 8, touched)
    assert (f"each holding (256 + 32 redundant under EPLB) ÷ 8, {most:,.2f} of its 36 "
            f"experts read" in out)


def test_a_total_the_ranks_do_not_divide_is_refused_in_vllms_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", *DSV3, "--enable-eplb", "--eplb-config",
                       '{"num_redundant_experts": 30}')
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "Got 286 experts and 8 EP ranks" in err and "32 would divide" in err


def test_eplb_without_expert_parallelism_is_refused_in_vllms_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                       *EPLB_32)
    assert code == 2 and "enable_expert_parallel must be True to use EPLB." in err


def test_redundant_experts_without_eplb_are_refused_in_vllms_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", *DSV3, "--eplb-config", '{"num_redundant_experts": 32}')
    assert code == 2 and "but EPLB is not enabled" in err


@pytest.mark.parametrize("config", ['{"num_redundant_experts": -1}', '{"window": 10}',
                                    "[32]", "num_redundant_experts=32"])
def test_an_eplb_config_vllm_would_not_take_exits_2(capsys: pytest.CaptureFixture[str],
                                                    config: str) -> None:
    code, _, err = run(capsys, "fit", *DSV3, "--enable-eplb", "--eplb-config", config)
    assert code == 2 and err.startswith("ridgeline: error: --eplb-config")


def test_the_older_spelling_is_read_where_its_release_has_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    old = ("--enable-eplb", "--num-redundant-experts", "32", "--engine-version", "0.11")
    legacy = fit_json(capsys, *DSV3, *old)
    current = fit_json(capsys, *DSV3, *EPLB_32, "--engine-version", "0.11")
    assert legacy["taken_bytes_per_gpu"]["weights"] == current["taken_bytes_per_gpu"]["weights"]
    code, _, err = run(capsys, "fit", *DSV3, "--enable-eplb", "--num-redundant-experts", "32")
    assert code == 2 and "--eplb-config '{\"num_redundant_experts\": 32}'" in err
    code, _, err = run(capsys, "fit", *DSV3, *EPLB_32, "--engine-version", "0.10.1")
    assert code == 2 and "no --eplb-config" in err


def test_eplb_is_read_from_the_first_release_that_shipped_it_and_refused_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    """engines.json vllm.eplb.since is v0.9.2, whose documentation holds PR #18343's
    vllm/distributed/eplb (and so its flags); the patch release before it is refused."""
    since = load_data("engines.json")["vllm"]["eplb"]["since"]
    major, minor, patch = (int(part) for part in since.split("."))
    assert patch > 0  # the release before is the same minor's previous patch
    before = f"{major}.{minor}.{patch - 1}"
    legacy = ("--enable-eplb", "--num-redundant-experts", "32")
    accepted = fit_json(capsys, *DSV3, *legacy, "--engine-version", since)
    routed = load_data("models/deepseek-ai--DeepSeek-V3.json")["n_routed_experts"]
    assert accepted["eplb"]["physical_experts"] == routed + 32
    code, _, err = run(capsys, "fit", *DSV3, *legacy, "--engine-version", before)
    assert code == 2 and f"vLLM {before}: --enable-eplb is read from v{since}" in err


@pytest.mark.parametrize("version", ["0.12", "0.12.0"])
def test_the_older_spelling_is_refused_from_the_release_that_removed_it(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    """'0.12' is 0.12.0, the release PR #29324 removed --num-redundant-experts from."""
    until = load_data("engines.json")["vllm"]["eplb"]["legacy_until"]
    code, _, err = run(capsys, "fit", *DSV3, "--enable-eplb", "--num-redundant-experts", "32",
                       "--engine-version", version)
    assert code == 2 and f"vLLM {version} has no --num-redundant-experts" in err
    assert f"will be removed in v{until}" in err and len(err.strip().splitlines()) == 1


def test_a_lever_whose_ranks_the_redundant_experts_do_not_divide_is_left_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    # 128 + 2 experts divide over 2 GPUs, not over the 4 of the more-GPUs lever
    code, out, err = run(capsys, "fit", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2",
                         "--enable-expert-parallel", "--enable-eplb", "--eplb-config",
                         '{"num_redundant_experts": 2}', "--target-concurrency", "512")
    assert code == 0, err
    assert "4 GPUs" not in out


def test_data_parallel_ranks_share_the_redundant_experts_over_every_gpu() -> None:
    model, acc = resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100-sxm")
    dep = Deployment.build(model, acc, num_gpus=1, engine="vllm", expert_parallel=True,
                           data_parallel_size=4)
    eplb = EPLBSettings(8)
    plain, balanced = kv_pool(dep), kv_pool(dep, EngineSettings(eplb=eplb))
    moe = model.moe
    assert moe is not None and local_experts(dep, eplb) == (moe.num_experts + 8) // 4
    expert_bytes = dep.bytes_by_category[EXPERTS] / moe.num_experts  # every MoE layer's
    assert balanced.weight_bytes - plain.weight_bytes == pytest.approx(8 / 4 * expert_bytes)


def test_parse_eplb_config_reads_only_the_redundant_experts() -> None:
    assert parse_eplb_config('{"window_size": 1000, "num_redundant_experts": 32}') == 32
    assert parse_eplb_config('{"use_async": true}') is None


@pytest.mark.parametrize("extra", [
    ["--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}'],
    ["--enable-eplb", "--eplb-config.num_redundant_experts", "32"],
    ["--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4, 8]}'],
    ["-O3"]])
def test_fits_engine_comparison_refuses_one_engines_settings_as_with_every_other(
        capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    """fit --engine vllm,sglang sizes each engine at its defaults: vLLM's EPLB and compilation
    config are one engine's settings, refused in one line as --gpu-memory-utilization is, not
    dropped from one column (the compilation config was read against 'vllm,sglang' as one
    unknown engine)."""
    code, out, err = run(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                         "--engine", "vllm,sglang", "--enable-expert-parallel", *extra)
    assert code == 2 and not out
    assert err.count("\n") == 1 and "one engine's settings" in err
    assert extra[0].removesuffix("3") in err  # -O3 is named as its flag, -O


def test_eplb_config_is_read_from_the_release_that_added_it_and_refused_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    """engines.json vllm.eplb.config_since is v0.10.2, whose highlights name PR #20562 and
    whose docs hold EPLBConfig (v0.10.1.1's ParallelConfig has none); the patch before it
    is refused with the older spelling named."""
    since = load_data("engines.json")["vllm"]["eplb"]["config_since"]
    major, minor, patch = (int(part) for part in since.split("."))
    assert patch > 0  # the release before is the same minor's previous patch
    before = f"{major}.{minor}.{patch - 1}"
    accepted = fit_json(capsys, *DSV3, *EPLB_32, "--engine-version", since)
    routed = load_data("models/deepseek-ai--DeepSeek-V3.json")["n_routed_experts"]
    assert accepted["eplb"]["physical_experts"] == routed + 32
    code, _, err = run(capsys, "fit", *DSV3, *EPLB_32, "--engine-version", before)
    assert code == 2 and f"vLLM {before} has no --eplb-config (PR #20562, v{since})" in err


# --enable-eplb with expert weights whose MoE quantization method vLLM runs no EPLB for
# (engines.json vllm.eplb.quantization_support; vllm_eplb_weights.py)

QWEN3_MOE = ("qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--enable-expert-parallel",
             "--max-model-len", "8192", "--enable-eplb")
GPT_OSS = ("gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2", "--enable-expert-parallel",
           "--max-model-len", "8192", "--enable-eplb")


def _support(method: str) -> dict[str, Any]:
    rows = load_data("engines.json")["vllm"]["eplb"]["quantization_support"]["methods"]
    row: dict[str, Any] = next(r for r in rows if r["method"] == method)
    return row


def _next_minor(version: str) -> str:
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"{major}.{minor + 1}.0"


def _spelled(version: str) -> tuple[str, ...]:
    """The redundant-experts flag (none) the release reads: --num-redundant-experts 0 before
    --eplb-config came (vllm.eplb.config_since), nothing after."""
    since = load_data("engines.json")["vllm"]["eplb"]["config_since"]
    old = tuple(int(p) for p in version.split(".")) < tuple(int(p) for p in since.split("."))
    return ("--num-redundant-experts", "0", "--engine-version", version) if old else \
        ("--engine-version", version)


@pytest.mark.parametrize(("model", "method"), [(QWEN3_MOE, "unquantized"), (GPT_OSS, "mxfp4")])
def test_experts_vllm_refused_through_a_release_are_refused_there_and_taken_after(
        capsys: pytest.CaptureFixture[str], model: tuple[str, ...], method: str) -> None:
    """bf16 experts (UnquantizedFusedMoEMethod) were refused in v0.9.2, gpt-oss's mxfp4 ones
    (Mxfp4MoEMethod) in v0.10.1: refused there in one line naming the method, taken in the
    next minor release (the first that takes them is not pinned, so the later ones are)."""
    through = _support(method)["refused_through"]
    code, _, err = run(capsys, "fit", *model, *_spelled(through))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"vLLM {through} refuses it" in err and f"{method}'s" in err
    assert f"a release after v{through} takes it" in err
    taken = fit_json(capsys, *model, *_spelled(_next_minor(through)))
    assert taken["eplb"]["physical_experts"] > 0


@pytest.mark.parametrize("weights", ["awq-int4", "gptq-int4"])
def test_int4_experts_no_release_takes_are_refused_at_the_newest_and_the_first(
        capsys: pytest.CaptureFixture[str], weights: str) -> None:
    """AWQ and GPTQ experts: no release read takes them under EPLB (from null, refused through
    the newest modelled), so the newest (no --engine-version) and v0.9.2 both refuse."""
    method = next(r["method"] for r in
                  load_data("engines.json")["vllm"]["eplb"]["quantization_support"]["methods"]
                  if weights.split("-")[0] in r.get("quantization", [r["method"]]))
    assert _support(method)["from"] is None and _support(method)["refused_through"] == "newest"
    newest = load_data("engines.json")["vllm"]["default_version"]
    first = load_data("engines.json")["vllm"]["eplb"]["since"]
    for release, extra in ((newest, ()), (first, _spelled(first))):
        code, _, err = run(capsys, "fit", *QWEN3_MOE, "--weights", weights, *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert f"vLLM {release} refuses it for qwen3-30b-a3b's {weights} experts" in err
        assert "no vLLM release modelled takes it" in err
    plain = fit_json(capsys, *QWEN3_MOE[:-1], "--weights", weights)  # without EPLB: sized
    assert plain["conversations"] > 0


def test_experts_taken_from_their_first_release_run_under_eplb_there(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fp8 experts (DeepSeek-V3's Fp8MoEMethod) are taken from the release EPLB came in, and
    bf16 ones at the newest release."""
    since = _support("fp8")["from"]
    assert since == load_data("engines.json")["vllm"]["eplb"]["since"]
    dsv3 = fit_json(capsys, *DSV3, "--enable-eplb", *_spelled(since))
    assert dsv3["eplb"]["experts_per_rank"] == 256 // 8
    assert fit_json(capsys, *QWEN3_MOE)["eplb"]["physical_experts"] > 0


def test_fit_offers_no_smaller_weights_vllm_refuses_under_eplb(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3's fit offers awq-int4 weights as a lever without EPLB; under
    --enable-eplb, whose AWQ experts vLLM refuses, the lever is gone and the others stay."""
    plain = [lever["name"] for lever in fit_json(capsys, *DSV3)["levers"]]
    eplb = [lever["name"] for lever in fit_json(capsys, *DSV3, *EPLB_32)["levers"]]
    awq = [name for name in plain if name.startswith("awq-int4 weights")]
    assert awq and not any(name.startswith("awq-int4 weights") for name in eplb)
    assert any(name.startswith("fp8 KV cache") for name in eplb)


def test_a_patch_of_the_newest_release_known_to_refuse_is_refused_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    """v0.10.1.1, a patch of v0.10.1 (the newest release known to refuse gpt-oss's mxfp4
    experts under EPLB), is refused as v0.10.1 is: a fourth part adds no MoE method's EPLB."""
    through = _support("mxfp4")["refused_through"]
    patch = f"{through}.1"
    code, _, err = run(capsys, "fit", *GPT_OSS, *_spelled(patch))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"vLLM {patch} refuses it" in err and "mxfp4's" in err

"""Each --explain step repeats from the inputs its --json lists, as its formula says: the
steps an audit of every command's working found off (a division that gave twice its printed
result, a layer count left in a source string, a pool floored at 0 by a formula that had no
max, headlines with no step, explain as text lines, numbers as strings). Every check reads
the step's own inputs, redoes the formula as worded, and compares with its result."""

from __future__ import annotations

import math

import pytest

from tests.conftest import explain_by_label as by_label
from tests.conftest import explain_inputs as ins
from tests.conftest import explain_result as res
from tests.conftest import explained, run_cli

GB, GIB = 1e9, 2**30


def test_the_blended_peak_is_two_flop_a_weight_over_one_tokens_matmuls(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 (its lm_head bf16) on an H100: 2 × 69.5 B weights ÷ 71.3 µs is the
    1,949 TFLOP/s the step prints; the formula once said Σ weights ÷ that time (974.7), and
    the weights were "69.5 B", bytes' unit."""
    _, steps = explained(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--weights",
                         "fp8", "--prompt-len", "4000")
    s = by_label(steps, "dense matmuls' blended peak")
    got = ins(s)
    assert s["formula"].startswith("2 FLOP × Σ weights ÷ one token's matmuls")
    assert res(s) * 1e12 == pytest.approx(2 * got["Σ weights"] * 1e9
                                          / (got["one token's matmuls"] * 1e-6))
    weights = [i for i in s["inputs"] if i["name"] == "Σ weights"]
    assert weights[0]["unit"] == "B weights"
    parts = [i["value"] for i in s["inputs"] if i["unit"] == "B weights" and " at " in i["name"]]
    assert sum(parts) == pytest.approx(got["Σ weights"])


@pytest.mark.parametrize("model", ["llama-3.1-70b", "gpt-oss-20b"])
def test_tiled_worst_case_traffic_names_the_layers_it_sums(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    """The re-read traffic is Σ over the kinds of layer of layers × (Q and O + K and V read per
    query tile): the layer count of each kind is an input (gpt-oss-20b: its 12 windowed and
    12 full layers), not only a source string (Llama-3.1-70B: 697.3 GB, not 8.72)."""
    data, steps = explained(capsys, "attention", "--model", model, "--context", "8000")
    s = by_label(steps, "tiled traffic, K and V re-read per query tile (the worst case)")
    got = ins(s)
    width = (got["d_qk"] + got["d_v"]) * got["activation bytes"]
    kinds = [i["name"].removeprefix("attention layers, ") for i in s["inputs"]
             if i["name"].startswith("attention layers, ")]
    assert kinds
    total = sum(got[f"attention layers, {k}"] * (got["S"] * got["heads"] * width + got["heads"]
                                                 * got[f"keys read per head, {k}"] * width)
                for k in kinds)
    assert total / GB == pytest.approx(res(s))
    assert res(s) * GB == pytest.approx(data["total_tiled_worst_bytes"])


SUBTRACTED = ("weights per GPU", "activation peak", "non-torch", "CUDA graphs", "sampler state",
              "kept free after warm-up")


@pytest.mark.parametrize("model, gpu, floored", [("qwen3-next-80b-a3b-thinking", "h200", True),
                                                 ("llama-3.1-8b", "h100", False)])
def test_the_pool_step_says_max_0_where_the_rest_is_negative(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, floored: bool) -> None:
    """Qwen3-Next-80B's bf16 weights on one H200: 139.8 − 148.4 − … = −15.29 GiB, the pool 0;
    the formula says max(0, …), and only where it floors."""
    data, steps = explained(capsys, "fit", model, "--gpu", gpu)
    s = by_label(steps, "KV pool per GPU")
    got = ins(s)
    rest = got["total"] * got["reserved fraction"] - sum(got[n] for n in SUBTRACTED)
    assert (rest < 0) is floored
    assert s["formula"].startswith("max(0, ") is floored
    assert res(s) == pytest.approx(max(0.0, rest), abs=1e-6)
    assert res(s) * GIB == pytest.approx(data["pool_bytes_per_gpu"], abs=1)


def test_llamacpps_sequences_have_a_step(capsys: pytest.CaptureFixture[str]) -> None:
    """decode under llama.cpp said "runs at most 297 sequences" with no step; now the most
    slots N whose pool holds N: the pool of N slots holds at least N, of N + 1 fewer."""
    data, steps = explained(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine",
                            "llama.cpp", "--weights", "q4_k_m", "--batch", "1", "--context",
                            "2000")
    s = by_label(steps, "sequences the engine runs at 2,000 tokens")
    got = ins(s)
    n = got["-np N"]
    assert res(s) == min(n, got["pool of N slots holds"])
    assert got["pool of N slots holds"] >= n > got["pool of N + 1 slots holds"] - 1
    assert res(s) == data["engine_max_batch"][0]["conversations"]
    # of which llama-server's default slots run 4
    runs = by_label(steps, "sequences llama-server runs at 2,000 tokens")
    assert res(runs) == min(res(s), ins(runs)["default -np"])
    assert res(runs) == data["engine_max_batch"][0]["engine_max_batch"]


def _every_step_is_an_object(steps: list[dict]) -> None:
    assert steps and all(isinstance(s, dict) and {"label", "formula", "inputs", "result"}
                         <= set(s) for s in steps)


def test_evalstats_json_explain_gives_steps_that_repeat(
        capsys: pytest.CaptureFixture[str]) -> None:
    """evalstats' --json explain was its text lines; now steps like every command's, each
    naming its result ("point"): Wilson's center and half width, the z-test, Fleiss's n."""
    _, steps = explained(capsys, "evalstats", "--pct-a", "39.02", "--pct-b", "41.5", "--n",
                         "500")
    _every_step_is_an_object(steps)
    of = {(s["point"], s["label"]): s for s in steps}
    count = of[("percentage_count_a", "count")]
    assert res(count) == round(ins(count)["percent"] * ins(count)["N"] / 100)
    center, half = of[("wilson_interval_a", "center")], of[("wilson_interval_a", "half width")]
    p, z, n = (ins(center)[k] for k in ("p", "z", "n"))
    assert res(center) == pytest.approx((p + z * z / (2 * n)) / (1 + z * z / n))
    assert res(half) == pytest.approx(
        z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)))
    low = of[("wilson_interval_a", "low end")]
    assert res(low) == pytest.approx(ins(low)["center"] - ins(low)["half width"])
    se, zs = of[("two_proportion_z_test", "se")], of[("two_proportion_z_test", "z")]
    pooled, na, nb = ins(se)["pooled p"], ins(se)["n_a"], ins(se)["n_b"]
    assert res(se) == pytest.approx(math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb)))
    assert res(zs) == pytest.approx((ins(zs)["p_a"] - ins(zs)["p_b"]) / ins(zs)["se"])
    pz = of[("two_proportion_z_test", "two-sided p")]
    assert res(pz) == pytest.approx(math.erfc(abs(ins(pz)["z"]) / math.sqrt(2)))
    need = of[("unpaired_items_needed", "items needed, unpaired")]
    g = ins(need)
    root = g["z_a"] * math.sqrt(2 * g["pbar"] * (1 - g["pbar"])) + g["z_b"] * math.sqrt(
        g["p_a"] * (1 - g["p_a"]) + g["p_b"] * (1 - g["p_b"]))
    assert res(need) == pytest.approx(root ** 2 / (g["p_a"] - g["p_b"]) ** 2)
    whole = of[("unpaired_items_needed", "items needed, unpaired, whole")]
    assert res(whole) == math.ceil(ins(whole)["n"])


def test_mcnemars_p_repeats_from_its_tail(capsys: pytest.CaptureFixture[str]) -> None:
    """b = 15, c = 2: n = 17, p = 2 × P[X ≤ 2] = 2 × 154 ÷ 131,072."""
    _, steps = explained(capsys, "evalstats", "--discordant", "15,2")
    _every_step_is_an_object(steps)
    s = by_label(steps, "two-sided p")
    got = ins(s)
    n, k = int(got["n"]), int(got["min(b, c)"])
    assert got["P[X ≤ min(b, c)]"] == pytest.approx(sum(math.comb(n, i) for i in range(k + 1))
                                                    / 2 ** n)
    assert res(s) == pytest.approx(min(1.0, 2 * got["P[X ≤ min(b, c)]"]))


def test_prefix_json_explain_gives_steps_that_repeat(
        capsys: pytest.CaptureFixture[str]) -> None:
    """17 shared tokens of B's 18, blocks of 4: ⌊min(17, 17) ÷ 4⌋ = 4 blocks, 16 tokens,
    88.9 % of B, 2 to recompute."""
    a = ",".join(str(i) for i in range(1, 21))
    b = ",".join(str(i) for i in [*range(1, 18), 99])
    data, steps = explained(capsys, "prefix", "--tokens-a", a, "--tokens-b", b,
                            "--block-size", "4")
    _every_step_is_an_object(steps)
    blocks, reused = by_label(steps, "full blocks reused"), by_label(steps, "tokens reused")
    g = ins(blocks)
    assert res(blocks) == (min(g["common prefix"], g["B tokens"] - 1) // g["block_size"])
    assert res(reused) == ins(reused)["full blocks"] * ins(reused)["block_size"]
    share = by_label(steps, "share of B reused")
    assert res(share) == pytest.approx(ins(share)["tokens reused"] / ins(share)["B tokens"])
    again = by_label(steps, "tokens to recompute")
    assert res(again) == ins(again)["B tokens"] - ins(again)["tokens reused"]
    assert res(again) == data["prefix_reuse"]["tokens_to_recompute"]


def test_numbers_are_json_numbers_unrounded(capsys: pytest.CaptureFixture[str]) -> None:
    """amdahl's times and the ridge batch's fraction were strings ("6.7275", "295.34"); now
    floats whose division gives the step's result, the text keeping the digits it needs."""
    _, steps = explained(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100", "--op",
                         "attention", "--batch", "32", "--context", "4000", "--speedup", "2")
    share = by_label(steps, "the part's share")
    got = ins(share)
    assert isinstance(got["time in attention"], float)
    assert res(share) == pytest.approx(got["time in attention"] / got["decode step time"],
                                       abs=1e-4)
    _, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100")
    s = by_label(steps, "ridge batch")
    got = ins(s)
    assert got["ridge × bytes per weight ÷ 2"] == pytest.approx(
        got["ridge"] * got["bytes per weight"] / 2)
    assert res(s) == math.ceil(got["ridge × bytes per weight ÷ 2"])
    code, text, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--explain")
    assert code == 0
    assert "ridge × bytes per weight ÷ 2 = 295.343" in text


@pytest.mark.parametrize("argv", [["roofline", "--gpu", "h100", "--model", "llama-3.1-70b"],
                                  ["moe", "deepseek-v3", "--gpu", "h200"]])
def test_the_weights_shortfall_has_a_step(capsys: pytest.CaptureFixture[str],
                                          argv: list[str]) -> None:
    """"141.1 GB of weights > 85.0 GB, short by 56.1 GB" had no step in roofline and moe."""
    data, steps = explained(capsys, *argv)
    s = by_label(steps, "short by")
    got = ins(s)
    assert res(s) == pytest.approx(got["weights"] - got["capacity"])
    assert res(s) * GB == pytest.approx(data["shortfall_bytes"])


def test_hardware_explains_every_formats_ridge(capsys: pytest.CaptureFixture[str]) -> None:
    """The text prints a ridge for each format (fp32 20, tf32 148, fp8 591 on an H100); each
    now has its step, peak ÷ bandwidth."""
    _, steps = explained(capsys, "hardware", "h100")
    ridges = [s for s in steps if s["label"].startswith("ridge point")]
    assert {i["name"] for s in ridges for i in s["inputs"] if i["name"].startswith("peak ")} \
        >= {"peak fp32 (dense)", "peak tf32 (dense)", "peak bf16 (dense)", "peak fp8 (dense)"}
    for s in ridges:
        (peak,) = [v for n, v in ins(s).items() if n.startswith("peak ")]
        assert res(s) == pytest.approx(peak * 1e12 / (ins(s)["memory bandwidth"] * 1e12))


def test_one_name_one_unit_for_weight_matmuls(capsys: pytest.CaptureFixture[str]) -> None:
    """In decode's MoE working "weight matmuls" was TFLOP in the compute time and a launch
    count in the engine overhead; the count is now "weight-matmul launches"."""
    _, steps = explained(capsys, "decode", "qwen3-30b-a3b", "--gpu", "h100", "--batch", "8",
                         "--context", "4000")
    units = {i["unit"] for s in steps for i in s["inputs"] if i["name"] == "weight matmuls"}
    assert units == {"TFLOP"}
    overhead = by_label(steps, "engine overhead")
    assert "weight-matmul launches × per matmul" in overhead["formula"]
    assert ins(overhead)["weight-matmul launches"] > 0

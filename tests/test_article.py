"""Every figure of the article (shared/reference/start-here-llm-inference-words.txt), computed."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, decode_floor, prefill_floor, resolve_accelerator, resolve_model
from ridgeline.moe import routed_fraction
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes_at
from ridgeline.roofline import (
    batch_for_intensity,
    decode_attention_intensity,
    ridge_point,
    weight_intensity,
)
from ridgeline.units import GB


def ridge(gpu: str) -> float:
    acc = resolve_accelerator(gpu)
    return ridge_point(acc.peak("bf16"), acc.memory_bandwidth_bytes_per_s)


def test_h100_sxm_ridge_is_295_and_the_articles_296_rounds_the_peak_to_990() -> None:
    assert round(ridge("h100-sxm")) == 295  # 989.4 TFLOP/s ÷ 3.35 TB/s
    assert round(ridge_point(990e12, 3.35e12)) == 296  # the article's division


def test_a100_80gb_ridge_is_about_153() -> None:
    assert ridge("a100-80gb") == pytest.approx(153, rel=0.01)


def test_l40s_ridge_is_about_419() -> None:
    assert ridge("l40s") == pytest.approx(419, rel=0.01)


def test_l40s_needs_a_bigger_batch_than_h100_despite_less_arithmetic() -> None:
    l40s, h100 = resolve_accelerator("l40s"), resolve_accelerator("h100")
    assert l40s.peak("bf16") < h100.peak("bf16")
    assert ridge("l40s") > ridge("h100")


@pytest.mark.parametrize(("bytes_per_param", "gb"), [(2, 141.1), (1, 70.6), (0.5, 35.3)])
def test_llama_3_1_70b_weights_at_2_1_half_bytes_per_param(bytes_per_param: float, gb: float) -> None:
    params = count_params(resolve_model("llama-3.1-70b")).total
    assert weight_bytes_at(params, bytes_per_param) / GB == pytest.approx(gb, abs=0.05)


def _article_deployment() -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "fp8", "bf16")


def test_70b_at_one_byte_on_h100_is_about_21_ms_and_47_tokens_per_s() -> None:
    floor = decode_floor(_article_deployment(), batch=1, context=1)
    assert floor.step_time_s * 1e3 == pytest.approx(21, abs=0.3)
    assert round(floor.per_user_tok_s) == 47  # 70.55 GB read; the article's round 70 GB: 48
    assert floor.bound == "memory bandwidth"


def test_the_articles_48_tokens_per_s_is_the_floor_speed_of_a_round_70_gb_read() -> None:
    """The floor's speed is the card's bandwidth over the bytes a step reads (it is memory
    bound, with no overhead): scaled from the 71 GB it reads to the article's round 70 GB,
    it is the article's 48 tok/s."""
    floor = decode_floor(_article_deployment(), batch=1, context=1)
    read = floor.weight_bytes_read + floor.kv_bytes_read + floor.activation_bytes
    assert floor.per_user_tok_s * read == pytest.approx(
        resolve_accelerator("h100").memory_bandwidth_bytes_per_s)
    assert round(floor.per_user_tok_s * read / 70e9) == 48


def test_eight_prompt_tokens_cost_one_read_of_the_weights() -> None:
    """'Eight tokens of prompt cost one read': an 8-token prefill takes one decode step."""
    dep = _article_deployment()
    assert prefill_floor(dep, 8).time_s == pytest.approx(
        decode_floor(dep, batch=1, context=1).step_time_s, rel=0.01)


def test_fifty_users_share_one_read_for_fifty_times_the_output() -> None:
    dep = _article_deployment()
    one, fifty = decode_floor(dep, 1, 1), decode_floor(dep, 50, 1)
    gain = fifty.aggregate_tok_s / one.aggregate_tok_s
    assert 49 < gain < 50 and fifty.step_time_s < 1.02 * one.step_time_s


def test_qwen3_6_holds_35b_and_uses_about_3b() -> None:
    params = count_params(resolve_model("qwen3.6-35b-a3b"))
    assert round(params.total / 1e9) == 35 and round(params.active / 1e9) == 3


def test_two_hundred_users_touch_nearly_every_expert() -> None:
    from ridgeline.moe import expected_experts_touched

    moe = resolve_model("qwen3.6-35b-a3b").moe
    assert moe is not None
    assert expected_experts_touched(moe.num_experts, moe.experts_per_token, 1) == 8
    assert 255 < expected_experts_touched(moe.num_experts, moe.experts_per_token, 200) < 256


def test_32_users_at_2000_tokens_read_21_gb_of_cache_and_step_27_ms() -> None:
    dep = _article_deployment()
    alone = decode_floor(dep, batch=1, context=1)
    floor = decode_floor(dep, batch=32, context=2000)
    assert floor.kv_bytes_read / GB == pytest.approx(21, abs=0.1)
    assert floor.step_time_s * 1e3 == pytest.approx(27, abs=0.5)
    gain = floor.aggregate_tok_s / alone.aggregate_tok_s
    assert gain == pytest.approx(24, abs=1.0)  # "the card's output went up twenty-four times"
    assert floor.per_user_tok_s < alone.per_user_tok_s  # "each individual person's went down"


def test_article_32_user_example_does_not_fit_one_h100() -> None:
    fit = decode_floor(_article_deployment(), batch=32, context=2000).fit
    assert not fit.fits
    assert fit.shortfall_bytes > 0
    assert fit.headline().startswith("DOES NOT FIT")


def test_longer_contexts_pull_per_user_speed_down_further() -> None:
    dep = _article_deployment()
    short, long = decode_floor(dep, 32, 2000), decode_floor(dep, 32, 8000)
    assert long.per_user_tok_s < short.per_user_tok_s


def test_batch_32_uses_a_tenth_of_an_h100_and_296_reaches_the_ridge() -> None:
    """The ridge batch is 295.3: 295 stops at 99.9 %, 296 is the first whole batch past it."""
    r = ridge("h100-sxm")
    assert weight_intensity(32, 2.0) / r == pytest.approx(0.108, abs=0.005)
    assert 295 < batch_for_intensity(r, 2.0) < 296


def test_batch_8_on_h100_is_under_3_percent_of_the_arithmetic() -> None:
    from ridgeline.roofline import arithmetic_share

    assert arithmetic_share(8, 2.0, ridge("h100-sxm")) < 0.03
    assert arithmetic_share(32, 2.0, ridge("h100-sxm")) == pytest.approx(0.108, abs=0.005)
    assert arithmetic_share(1024, 2.0, ridge("h100-sxm")) == 1.0  # past the ridge: all of it


def test_qwen3_6_routes_8_of_256_so_ridge_needs_batch_near_9500() -> None:
    moe = resolve_model("qwen3.6-35b-a3b").moe
    assert moe is not None
    fraction = routed_fraction(moe.experts_per_token, moe.num_experts)
    assert fraction == pytest.approx(0.031, abs=0.0005)
    batch = batch_for_intensity(ridge("h100-sxm"), 2.0) / fraction
    assert batch == pytest.approx(9500, rel=0.01)


def test_gqa_group_8_gives_decode_attention_intensity_8_at_any_batch() -> None:
    spec = resolve_model("llama-3.1-70b")
    assert spec.attention is not None and spec.attention.group_size == 8
    assert decode_attention_intensity(spec, 2.0) == pytest.approx(8)


def test_multi_head_attention_gives_decode_attention_intensity_1_rather_than_8() -> None:
    """'About 8 rather than 1': without grouping (Llama-2-7B, a KV head per query head) each
    K/V element serves one query head."""
    spec = resolve_model("llama-2-7b")
    assert spec.attention is not None
    assert spec.attention.num_kv_heads == spec.attention.num_heads
    assert decode_attention_intensity(spec, 2.0) == pytest.approx(1)


def test_4000_token_prompt_is_about_4000_flop_per_byte_at_2_byte_weights() -> None:
    """The weights' 2 × tokens ÷ 2 bytes is the prompt length; prefill adds attention's
    FLOPs over the same weight bytes (4,090 at 4,000 tokens: the README's figure)."""
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"), "bf16")
    floor = prefill_floor(dep, 4000)
    assert weight_intensity(4000, 2.0) == 4000
    assert 4000 < floor.weight_intensity_flop_per_byte < 4000 * 1.05
    assert floor.bound == "compute"


@pytest.mark.parametrize(("argv", "printed"), [
    (["roofline", "--gpu", "h100", "--batch", "32"], "weight matrices (decode)       32.0    107.2"
     "    10.8%             296"),
    (["roofline", "--gpu", "h100", "--batch", "32"], "decode attention                8.0"
     "     26.8     2.7%"),
    (["roofline", "--gpu", "h100", "--prompt-len", "4000"], "prefill                     4,000.0"),
    (["utilization", "--gpu", "h100", "--running", "8"], "2.7% of the arithmetic"),
    (["moe", "qwen3.6-35b-a3b", "--weights", "bf16"], "= B × 0.031; reaching the h100-sxm ridge "
     "(295) needs a batch near 9,451"),
    (["moe", "qwen3.6-35b-a3b"], "the article reckons at 2-byte experts on the 16-bit ridge, "
     "here 295: B × 0.031, a batch near 9,451"),
    (["moe", "qwen3.6-35b-a3b", "--weights", "bf16", "--batch", "200"], "200              255.6"),
    (["prefill", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--prompt-len", "8"],
     "time       21.1 ms"),
    (["prefill", "llama-3.1-70b", "--gpu", "h100", "--weights", "bf16", "--prompt-len", "4000"],
     "intensity  4,090 FLOP per byte of weights"),
    (["roofline", "--gpu", "h100", "--model", "llama-2-7b"], "decode attention                1.0"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16",
      "--batch", "1", "--context", "2000", "--explain"], "=> per user = 47.03 tok/s"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16",
      "--batch", "32", "--context", "2000", "--explain"], "batch 1's step = 21.26 ms"),
    (["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "bf16",
      "--batch", "32", "--context", "2000", "--explain"], "=> gain = 24.78 x"),
])
def test_the_cli_prints_the_articles_figures(capsys: pytest.CaptureFixture[str],
                                             argv: list[str], printed: str) -> None:
    """The figures README's article table cites, as the commands it names print them."""
    from ridgeline.cli import main

    assert main(argv) == 0
    assert printed in capsys.readouterr().out


def test_the_batch_32_point_of_a_sweep_gets_its_own_working(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--batch 1,32 --explain` works through every point, each block headed by its batch and
    context: the 24.78x gain and the 21 GB of cache belong to batch 32's block."""
    from ridgeline.cli import main

    assert main(["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype",
                 "bf16", "--batch", "1,32", "--context", "2000", "--explain"]) == 0
    working = capsys.readouterr().out.split("How each number was computed:")[1]
    one, thirty_two = working.split("  batch 32 at 2,000 tokens of context:")
    assert "  batch 1 at 2,000 tokens of context:" in one
    assert "=> per user = 47.03 tok/s" in one and "gain" not in one
    assert "=> gain = 24.78 x" in thirty_two and "=> KV read = 20.99 GB" in thirty_two


def test_the_h100_peak_cites_a_source_that_prints_the_dense_figure(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The product page prints 1,979 (sparse) for bf16: the 989.4 --explain divides is cited
    from its own source, the Hopper whitepaper, while the bandwidth keeps the page."""
    from ridgeline.cli import main

    h100 = resolve_accelerator("h100")
    assert main(["roofline", "--gpu", "h100", "--explain"]) == 0
    out = capsys.readouterr().out
    peak = next(line for line in out.splitlines() if "peak bf16 (dense) = 989.4" in line)
    bandwidth = next(line for line in out.splitlines() if "memory bandwidth = 3.35" in line)
    assert "whitepaper" in peak and h100.source not in peak
    assert h100.source in bandwidth


def test_the_articles_table_notes_hold_in_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """The notes under the article's ridge table: the H100's dense 990 is NVIDIA's sparse
    1,979 halved; the A100 PCIe card has less bandwidth and a higher ridge (161) than the SXM
    part (153); and the L40S is the cheaper card per hour than the H100."""
    import json

    from ridgeline.cli import main

    h100 = resolve_accelerator("h100")
    assert h100.peak("bf16") == pytest.approx(1979e12 / 2, rel=1e-3)
    assert "BF16/FP16 1,979*" in h100.notes and "are sparse; halved here" in h100.notes
    pcie, sxm = resolve_accelerator("a100-pcie-80gb"), resolve_accelerator("a100-sxm-80gb")
    assert pcie.memory_bandwidth_bytes_per_s < sxm.memory_bandwidth_bytes_per_s
    assert (round(ridge("a100-pcie-80gb")), round(ridge("a100-sxm-80gb"))) == (161, 153)
    prices = {}
    for gpu in ("l40s", "h100"):
        assert main(["hardware", gpu, "--json"]) == 0
        prices[gpu] = json.loads(capsys.readouterr().out)["price_per_hour_usd"]
    assert prices["l40s"] < prices["h100"]

"""Roofline arithmetic and the roofline report."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.params import count_params
from ridgeline.reports.roofline import roofline_report
from ridgeline.roofline import (
    attainable_flops_per_s,
    batch_for_intensity,
    decode_attention_intensity,
    expert_intensity,
    weight_intensity,
)
from tests.conftest import run_cli


def test_attainable_flops_is_the_ramp_then_the_roof() -> None:
    assert attainable_flops_per_s(990e12, 3.35e12, 100) == pytest.approx(335e12)
    assert attainable_flops_per_s(990e12, 3.35e12, 1000) == 990e12


def test_fp8_weights_double_the_intensity_of_the_same_batch() -> None:
    assert weight_intensity(32, 1.0) == 2 * weight_intensity(32, 2.0)
    assert batch_for_intensity(weight_intensity(32, 1.0), 1.0) == 32


def test_mla_decode_attention_is_far_denser_than_gqa() -> None:
    mla = decode_attention_intensity(resolve_model("deepseek-v3"), 2.0)
    gqa = decode_attention_intensity(resolve_model("llama-3.1-70b"), 2.0)
    assert gqa == 8
    assert mla == pytest.approx(128 * 2 * (2 * 512 + 64) / ((512 + 64) * 2))  # ~242
    assert mla > 25 * gqa


def test_fp8_kv_doubles_decode_attention_intensity() -> None:
    spec = resolve_model("llama-3.1-8b")
    assert decode_attention_intensity(spec, 1.0) == 2 * decode_attention_intensity(spec, 2.0)


def test_expert_intensity_of_one_token_is_one_token_per_touched_expert() -> None:
    spec = resolve_model("mixtral-8x7b")
    assert expert_intensity(1, spec, 2.0) == pytest.approx(1.0)
    assert expert_intensity(10_000, spec, 2.0) == pytest.approx(10_000 * 2 / 8, rel=1e-6)


def test_report_places_moe_experts_when_the_model_has_them() -> None:
    acc = resolve_accelerator("h100")
    dep = Deployment.build(resolve_model("qwen3-30b-a3b"), acc, "bf16")
    report = roofline_report(acc, "bf16", 32, 4000, dep)
    names = [p.name for p in report.points]
    assert "MoE expert layers" in names
    experts = report.points[names.index("MoE expert layers")]
    weights = report.points[0]
    assert experts.intensity < weights.intensity  # each expert sees a thin slice of the batch
    assert experts.batch_to_ridge == pytest.approx(weights.batch_to_ridge / (8 / 128))


def test_moe_rows_price_dense_and_expert_weights_at_their_own_formats() -> None:
    """gpt-oss stores attention in bf16 and experts in MXFP4: the dense row reads 2 bytes a
    weight, the expert rows about half a byte; the prompt's experts get their own row."""
    acc = resolve_accelerator("h100")
    dep = Deployment.build(resolve_model("gpt-oss-120b"), acc)
    report = roofline_report(acc, dep.compute_dtype, 64, 4000, dep)
    by = {p.name: p for p in report.points}
    assert by["dense weight matrices (decode)"].intensity == pytest.approx(64.0)
    experts = dep.bytes_by_category["experts"] / count_params(dep.model).by_category["experts"]
    assert experts < 0.6
    assert by["MoE expert layers"].intensity == pytest.approx(
        expert_intensity(64, dep.model, experts))
    assert by["MoE experts (prefill)"].intensity < by["prefill (dense weights)"].intensity


def test_a_weight_format_without_a_model_runs_at_its_matmul_dtype(
        capsys: pytest.CaptureFixture[str]) -> None:
    ridges = []
    for extra in ([], ["--model", "llama-3.1-70b"]):
        assert main(["roofline", "--gpu", "h100", "--weights", "fp8", "--json", *extra]) == 0
        ridges.append(json.loads(capsys.readouterr().out)["ridge_flop_per_byte"])
    assert ridges[0] == pytest.approx(ridges[1]) and ridges[0] > 500


def test_several_cards_side_by_side_are_each_cards_own_ridge(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The article's three ridges in one command, each the card's own report's."""
    assert main(["roofline", "--gpu", "h100,a100,l40s", "--json"]) == 0
    cards = json.loads(capsys.readouterr().out)["accelerators"]
    alone = []
    for name in ("h100", "a100", "l40s"):
        assert main(["roofline", "--gpu", name, "--json"]) == 0
        alone.append(json.loads(capsys.readouterr().out)["ridge_flop_per_byte"])
    assert [c["ridge_flop_per_byte"] for c in cards] == alone
    assert [round(r) for r in alone] == [295, 153, 419]  # the article rounds 989.4 to 990: 296
    assert main(["roofline", "--gpu", "h100,a100,l40s"]) == 0
    out = capsys.readouterr().out
    assert all(card in out for card in ("h100-sxm", "a100-sxm-80gb", "l40s"))


def test_several_cards_side_by_side_each_show_the_intensity_given(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--intensity beside --gpu A,B: each card's attainable rate at it, min(peak, intensity ×
    bandwidth), in the text as in the JSON (the text's table had dropped it)."""
    at = 100.0
    assert main(["roofline", "--gpu", "h100,l40s", "--intensity", str(at)]) == 0
    out = capsys.readouterr().out
    assert f"at {at:g} FLOP/byte" in out
    for name in ("h100", "l40s"):
        acc = resolve_accelerator(name)
        peak = acc.peak(acc.resolve_dtype("bf16"))
        attainable = min(peak, at * acc.memory_bandwidth_bytes_per_s)
        row = next(line for line in out.splitlines() if line.startswith(acc.id))
        assert f"{attainable / 1e12:,.1f} ({attainable / peak:.1%})" in row


def test_the_notes_say_the_bytes_the_intensity_stands_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roofline", "--gpu", "h100", "--batch", "32"]) == 0
    assert "the batch itself, at 2-byte weights" in capsys.readouterr().out
    assert main(["roofline", "--gpu", "h100", "--batch", "32", "--weights", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "the batch × 2, at 1-byte weights" in out and "2-byte" not in out


def test_explain_shows_the_attention_and_prefill_divisions(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roofline", "--gpu", "h100", "--model", "llama-3.1-70b", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "decode attention intensity: 2 FLOP × GQA group ÷ KV bytes" in out
    assert "GQA group = 8" in out and "prefill intensity" in out and "=> intensity = 4,000" in out


def test_a_model_whose_weights_overflow_the_card_is_said_not_to_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roofline", "--gpu", "h100", "--model", "llama-3.1-405b"]) == 0
    assert capsys.readouterr().out.startswith("DOES NOT FIT: 811.7 GB of weights")
    assert main(["roofline", "--gpu", "h100", "--model", "llama-3.1-8b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weights_fit"]


def test_decode_attention_sits_on_the_caches_roof(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 as stored on 8 H100s: fp8 weights, a bf16 cache. Its MLA decode attention
    is priced on the bf16 roof it runs on, not the fp8 one; at TP8 each rank reads the whole
    latent for its 16 heads (241.8 ÷ 8 = 30.2 FLOP/byte): 10 % of that roof."""
    assert main(["roofline", "--gpu", "h100", "--model", "deepseek-v3", "--num-gpus", "8",
                 "--batch", "64", "--json"]) == 0
    points = {p["name"]: p for p in json.loads(capsys.readouterr().out)["points"]}
    attention = points["decode attention"]
    h100 = resolve_accelerator("h100")
    assert attention["fraction_of_peak"] == pytest.approx(
        attention["intensity_flop_per_byte"] * h100.memory_bandwidth_bytes_per_s
        / h100.peak("bf16"))
    assert attention["fraction_of_peak"] == pytest.approx(0.102, abs=0.001)
    assert "its matmuls at bf16" in attention["note"]


def test_the_header_counts_the_cards_the_fit_line_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--num-gpus 8: the fit is judged on all eight; the ridge is each card's, and the same."""
    assert main(["roofline", "--gpu", "h100", "--num-gpus", "8", "--model", "llama-3.1-70b",
                 "--batch", "64"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("8 x h100-sxm, each 989.4 TFLOP/s") and "ridge at 295" in head
    assert main(["roofline", "--gpu", "h100", "--num-gpus", "8"]) == 0  # no model: the same
    assert capsys.readouterr().out.startswith("8 x h100-sxm, each 989.4 TFLOP/s")


def test_one_expert_ridge_batch_for_moe_fit_roofline_and_utilization(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The article's ≈ 9,500: Qwen3.6-35B-A3B's experts at bf16 on an H100 reach the ridge
    near batch 295 ÷ (8/256) = 9,451, and every command that names it names that one."""
    from ridgeline.roofline import expert_ridge_batch

    h100 = resolve_accelerator("h100")
    batch = expert_ridge_batch(h100, "bf16", 2.0, 8 / 256)
    assert batch == pytest.approx(295.34 * 32, rel=1e-3) and round(batch) == 9451
    argv = ["--gpu", "h100", "--weights", "bf16"]
    assert main(["moe", "qwen3.6-35b-a3b", *argv, "--json"]) == 0
    moe = json.loads(capsys.readouterr().out)
    assert main(["fit", "qwen3.6-35b-a3b", *argv, "--num-gpus", "2", "--max-model-len",
                 "8192", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert moe["article_batch_to_ridge"] == pytest.approx(batch)
    assert fit["expert_batch_to_ridge"] == pytest.approx(batch)
    assert main(["utilization", "--running", "64", "--model", "qwen3.6-35b-a3b", *argv,
                 "--num-gpus", "2", "--context", "8192"]) == 0
    assert f"near batch {batch:,.0f}" in capsys.readouterr().out


def test_a_cache_copied_over_tensor_parallel_ranks_lowers_decode_attentions_intensity() -> None:
    """Each rank multiplies its share of the heads by its own copy of the cache: DeepSeek-V3's
    latent at TP8 serves 16 heads per rank (241.8 ÷ 8 = 30.2 FLOP/byte, memory-bound), and
    Qwen3-235B's 4 KV heads at TP8 sit on two ranks each (group 16 ÷ 2 = 8)."""
    v3, qwen = resolve_model("deepseek-v3"), resolve_model("qwen3-235b-a22b")
    per_rank = 2 * 16 * (2 * 512 + 64) / ((512 + 64) * 2.0)
    assert decode_attention_intensity(v3, 2.0, 8) == pytest.approx(per_rank)
    assert decode_attention_intensity(v3, 2.0, 8) == pytest.approx(
        decode_attention_intensity(v3, 2.0) / 8)
    assert decode_attention_intensity(qwen, 2.0, 8) == pytest.approx(8)
    assert decode_attention_intensity(qwen, 2.0, 4) == pytest.approx(16)  # one head per rank
    h200 = resolve_accelerator("h200")
    dep = Deployment.build(v3, h200, num_gpus=8)
    report = roofline_report(h200, "fp8", 64, 4000, dep)
    attention = next(p for p in report.points if p.name == "decode attention")
    assert attention.intensity == pytest.approx(per_rank) and attention.fraction_of_peak < 0.2


def test_utilization_counts_an_moe_batch_per_touched_expert(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b at 32 running: 32 × 4 picks land on about 82 of its 128 experts, 1.57
    tokens each. It said '32 × 0.031 tokens each' (1 token) beside a share worked from 1.57."""
    from ridgeline.cli import main
    from ridgeline.moe import expected_experts_touched

    assert main(["utilization", "--gpu", "h100", "--running", "32", "--model", "gpt-oss-120b",
                 "--context", "4096", "--json"]) == 0
    moe = json.loads(capsys.readouterr().out)["moe"]
    touched = expected_experts_touched(128, 4, 32)
    assert moe["experts_touched"] == pytest.approx(touched)
    assert moe["tokens_per_touched_expert"] * touched == pytest.approx(32 * 4)
    assert 0 < moe["expert_fraction_of_arithmetic"] < 0.05


def test_each_part_says_whose_peak_its_share_is_of(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 fp8 on an H100: the header's peak is fp8's, decode attention multiplies the
    bf16 cache at bf16's. Its share is of bf16's peak, and its point says so."""
    from ridgeline.cli import main

    assert main(["roofline", "--model", "deepseek-v3", "--gpu", "h100", "--batch", "64",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    attention = next(p for p in data["points"] if p["name"] == "decode attention")
    assert attention["dtype"] == "bf16" and data["compute_dtype"] == "fp8"
    assert attention["fraction_of_peak"] == pytest.approx(
        attention["attainable_flops_per_s"] / attention["peak_flops_per_s"])
    assert attention["peak_flops_per_s"] < data["peak_flops_per_s"]


@pytest.mark.parametrize("model,layers", [("nemotron-h-56b", 54), ("qwen3-next-80b-a3b", 36),
                                          ("jamba-1.5-mini", 28)])
def test_a_hybrids_recurrent_state_is_a_row_of_decodes_state_traffic(
        capsys: pytest.CaptureFixture[str], model: str, layers: int) -> None:
    """Each sequence reads and writes its recurrent state once a step: the roofline row and
    decode's 'recurrent states' traffic' are one figure (Nemotron-H-56B: 1,825 MB a sequence
    in vLLM), at about 1 FLOP/byte whatever the batch, since no two sequences share a state."""
    def traffic_mb(*argv: str) -> tuple[float, float]:
        assert main(["roofline", "--gpu", "h200", "--model", model, *argv, "--json",
                     "--explain"]) == 0
        out = json.loads(capsys.readouterr().out)
        row = next(p for p in out["points"] if p["name"] == "recurrent state (decode)")
        assert row["batch_to_ridge"] is None and f"{layers} recurrent layers" in row["note"]
        st = next(s for s in out["explain"] if s["label"] == "recurrent-state intensity")
        per_gpu = next(i["value"] for i in st["inputs"]
                       if i["name"] == "state traffic per sequence")
        return row["intensity_flop_per_byte"], per_gpu

    assert main(["decode", model, "--gpu", "h200", "--num-gpus", "2", "--json",
                 "--explain"]) == 0
    kv = next(s for s in json.loads(capsys.readouterr().out)["explain"]
              if s["label"] == "KV bytes read")
    decoded = next(i["value"] for i in kv["inputs"] if i["name"] == "recurrent states' traffic")
    one, per_gpu = traffic_mb("--batch", "1")
    wide, per_gpu_tp2 = traffic_mb("--batch", "64", "--num-gpus", "2")
    assert per_gpu == pytest.approx(decoded)  # one GPU holds every state
    assert per_gpu_tp2 * 2 == pytest.approx(decoded)  # TP2: each GPU its half of the heads
    assert one == pytest.approx(wide) == pytest.approx(1.0)  # batching never moves it


def test_a_model_without_recurrent_layers_has_no_state_row() -> None:
    acc = resolve_accelerator("h200")
    for name in ("llama-3.1-8b", "gpt-oss-20b"):
        report = roofline_report(acc, "bf16", 8, 4000,
                                 Deployment.build(resolve_model(name), acc, "bf16"))
        assert "recurrent state (decode)" not in [p.name for p in report.points]
        assert "recurrent-state intensity" not in [s.label for s in report.steps]


@pytest.mark.parametrize(("kv", "dtype"), [([], "bf16"), (["--kv-dtype", "fp8"], "fp8")])
def test_without_a_model_decode_attention_runs_at_the_caches_dtype_not_the_weights(
        capsys: pytest.CaptureFixture[str], kv: list[str], dtype: str) -> None:
    """fp8 weights on an H100 with no --model: the weight rows run at fp8, but QKᵀ and PV
    multiply the cache, bf16 by default, so the article's GQA-8 attention is a share of
    bf16's peak, as the same card with --model says it (an fp8 cache: of fp8's)."""
    def attention(*extra: str) -> dict[str, float | str]:
        assert main(["roofline", "--gpu", "h100", "--weights", "fp8", *kv, "--json",
                     *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["compute_dtype"] == "fp8"
        return dict(next(p for p in data["points"] if p["name"] == "decode attention"))

    bare, modelled = attention(), attention("--model", "llama-3.1-70b")
    assert bare["dtype"] == modelled["dtype"] == dtype
    assert bare["peak_flops_per_s"] == modelled["peak_flops_per_s"]
    assert bare["fraction_of_peak"] == pytest.approx(
        float(bare["attainable_flops_per_s"]) / float(bare["peak_flops_per_s"]))


def test_a_share_far_under_the_ridge_is_not_printed_as_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A custom card whose ridge is 100,000 FLOP/byte: batch 1 keeps 0.001 % of it busy, a
    share --json gives and the table used to print as 0.0 %; a share short of the ridge
    (an A100 at batch 153, 154 reaching it) still never reads 100.0 %."""
    custom = ["roofline", "--peak-tflops", "10000", "--bandwidth-gbs", "100"]
    assert main([*custom, "--json"]) == 0
    share = json.loads(capsys.readouterr().out)["points"][0]["fraction_of_peak"]
    assert 0 < share < 0.0005
    assert main(custom) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("weight matrices (decode)"))
    assert f"{share:.3%}" in row and "0.0%" not in row.split()
    assert main(["roofline", "--gpu", "a100", "--batch", "153", "--json"]) == 0
    near = json.loads(capsys.readouterr().out)["points"][0]["fraction_of_peak"]
    assert 0.999 < near < 1
    assert main(["roofline", "--gpu", "a100", "--batch", "153"]) == 0
    assert "100.0%" not in capsys.readouterr().out.split("prefill")[0]


def test_a_one_token_prompt_is_one_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["roofline", "--gpu", "h100", "--prompt-len", "1"]) == 0
    assert "prompt 1 token\n" in capsys.readouterr().out


def test_moe_table_gives_tokens_per_expert_three_figures_and_batches_separators(
        capsys: pytest.CaptureFixture[str]) -> None:
    """B·k/E at batch 1 of Qwen3-Next's 10 of 512 experts is 0.0195 and of Kimi-K2's 8 of
    384 0.0208: two decimals printed both as 0.02; Mixtral's batch 100,000 read 100000 and
    its 25,000 tokens an expert 25,000.00."""
    def rows(model: str, batches: str) -> dict[str, list[str]]:
        assert main(["moe", model, "--batch", batches, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["moe", model, "--batch", batches]) == 0
        lines = capsys.readouterr().out.splitlines()
        table = lines[next(i for i, line in enumerate(lines) if line.startswith("batch ")) + 1:]
        printed = {line.split()[0]: line.split() for line in table[:len(data["rows"])]}
        for r in data["rows"]:
            shown = printed[f"{r['batch']:,}"][2]
            per_expert = r["batch"] * data["experts_per_token"] / data["num_experts"]
            assert float(shown.replace(",", "")) == pytest.approx(per_expert, rel=0.005)
        return printed

    assert rows("qwen3-next-80b-a3b", "1")["1"][2] != rows("kimi-k2", "1")["1"][2]
    big = rows("mixtral-8x7b", "1,100000")["100,000"]
    assert big[2] == "25,000"


def test_an_intensity_given_far_under_the_ridge_reads_as_given_not_as_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--intensity 0.001 on an H100 attains 0.00335 TFLOP/s: its row read 0.0 FLOP/byte and
    0.0 TFLOP/s; side by side, --intensity 100000 was headed 'TFLOP/s at 1e+05 FLOP/byte'."""
    assert main(["roofline", "--gpu", "h100", "--intensity", "0.001", "--json"]) == 0
    given = json.loads(capsys.readouterr().out)["points"][-1]
    assert main(["roofline", "--gpu", "h100", "--intensity", "0.001"]) == 0
    row = capsys.readouterr().out.splitlines()
    line = next(r for r in row if r.startswith("the intensity you gave"))
    assert line.split()[4:6] == [f"{given['intensity_flop_per_byte']:.2g}",
                                 f"{given['attainable_flops_per_s'] / 1e12:.2g}"]
    assert main(["roofline", "--gpu", "h100,l40s", "--intensity", "100000"]) == 0
    assert "TFLOP/s at 100,000 FLOP/byte" in capsys.readouterr().out


def test_roofline_refuses_fp8_matmuls_on_a_bf16_checkpoint(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.1-70b's bf16 weights at --compute-dtype fp8 were a W16A8 step no engine runs
    (ridge batch 591, twice the fp8 step's 296): refused, pointing to --weights fp8."""
    base = ["roofline", "--gpu", "h100", "--model", "llama-3.1-70b", "--batch", "32"]
    code, out, err = run_cli(capsys, *base, "--compute-dtype", "fp8")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--weights fp8" in err and "bf16" in err
    # quantized to fp8, the fp8 step reaches the ridge at the batch the model-free one does
    code, out, _ = run_cli(capsys, *base, "--compute-dtype", "fp8", "--weights", "fp8",
                           "--json")
    assert code == 0
    served = json.loads(out)["points"][0]["first_whole_batch_to_ridge"]
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", "--compute-dtype", "fp8",
                           "--json")
    bare = json.loads(out)["points"][0]["first_whole_batch_to_ridge"]
    assert served == pytest.approx(bare, rel=0.03)  # 300 (a bf16 LM head) against 296


@pytest.mark.parametrize("argv", [
    ["--model", "deepseek-v3", "--compute-dtype", "fp8"],  # its own fp8 weights
    ["--model", "deepseek-v3", "--compute-dtype", "bf16"],  # fp8 weights dequantized: W8A16
    ["--model", "llama-3.1-8b", "--weights", "awq-int4", "--compute-dtype", "fp8"],  # W4A8
])
def test_roofline_takes_a_compute_dtype_no_narrower_than_the_weights(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", *argv)
    assert code == 0 and "ridge at" in out


def test_roofline_keeps_the_digits_of_weights_a_hair_over_two_bytes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's bf16 GGUF (f32 norms) reads 2.0001 B a weight: 'the batch × 1' hid why the
    4,000-token prompt's intensity is 3,999.9."""
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "apple-m4-max-40c", "--model",
                           "llama-3.1-8b")
    assert code == 0 and "× 1," not in out
    assert "the prompt length × 0.99996, at 2.0001-byte weights" in out


@pytest.mark.parametrize(("model", "gpu", "count", "weights"), [
    ("llama-3.3-70b", "h100", "2", "fp8"), ("deepseek-v3", "h200", "8", None)])
def test_the_header_ridge_says_it_is_one_dtypes_where_the_weight_rows_use_a_blend(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, count: str,
        weights: str | None) -> None:
    """Llama-3.3-70B in fp8 on 2 H100s: the header's ridge, 591, is fp8's alone, while the
    weight rows (and utilization and prefill) use the fp8+bf16 blend's, 582; the header
    said 591 with no word of which. It now names the blend's ridge beside it, and --json
    gives it; a card alone, with no blend, gets no such line."""
    args = ["roofline", model, "--gpu", gpu, "--num-gpus", count,
            *(["--weights", weights] if weights else [])]
    code, out, _ = run_cli(capsys, *args, "--json")
    assert code == 0
    data = json.loads(out)
    blend = data["dense_ridge_flop_per_byte"]
    assert blend is not None and round(blend) != round(data["ridge_flop_per_byte"])
    weights_row = data["points"][0]
    assert weights_row["dtype"] == "fp8+bf16"
    code, text, _ = run_cli(capsys, *args)
    assert f"ridge at {data['ridge_flop_per_byte']:,.0f} FLOP/byte" in text
    assert ("that ridge is fp8's alone; the " in text
            and f"run at fp8+bf16, whose ridge, {blend:,.0f} FLOP/byte" in text)
    code, out, _ = run_cli(capsys, "roofline", "--gpu", gpu, "--json")
    assert json.loads(out)["dense_ridge_flop_per_byte"] is None

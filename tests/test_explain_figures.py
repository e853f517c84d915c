"""--explain repeats every figure: each step's result follows from its own operands, and the
figures the text and --json print are steps' results (the promise of explain.py: "one
division you can repeat"). Every check recomputes a step from the inputs the step itself
lists, then holds the result to the command's own --json figure."""

from __future__ import annotations

import json
import math

import pytest

from ridgeline.explain import shown_number
from ridgeline.units import GB
from tests.conftest import run_cli

GIB = 2**30


def explained(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, dict]:
    """The command's --json and its steps by label, with each step's inputs by name."""
    code, out, err = run_cli(capsys, *argv, "--json", "--explain")
    assert code == 0, err
    data = json.loads(out)
    steps = {s["label"]: s for s in data["explain"]}
    return data, steps


def ins(step: dict) -> dict[str, float]:
    return {i["name"]: i["value"] for i in step["inputs"]}


def res(step: dict) -> float:
    return float(step["result"]["value"])


def test_decode_explains_the_expected_speeds_and_band_it_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The tok/s columns use the expectation, not the floor: 1 ÷ expected step per user,
    batch ÷ expected step in all, and the band the profile's rates put round it."""
    data, steps = explained(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "32",
                            "--context", "4096")
    e = data["points"][0]["expected"]
    user, total = steps["expected per-user speed"], steps["expected aggregate speed"]
    assert res(user) == pytest.approx(1e3 / ins(user)["expected"]) \
        == pytest.approx(e["per_user_tok_s"])
    assert res(total) == pytest.approx(ins(total)["batch"] * 1e3 / ins(total)["expected"]) \
        == pytest.approx(e["aggregate_tok_s"])
    fast, slow = steps["band, fast edge"], steps["band, slow edge"]
    assert res(slow) == pytest.approx(ins(slow)["expected"] / ins(slow)["slowest rate"]) \
        == pytest.approx(e["high_s"] * 1e3)
    assert res(fast) == pytest.approx(ins(fast)["expected"] / ins(fast)["fastest rate"]) \
        == pytest.approx(e["low_s"] * 1e3)
    check = steps["memory check"]
    assert res(check) == pytest.approx(ins(check)["weights"] + ins(check)["KV cache"])
    assert res(check) * 1e9 == pytest.approx(data["points"][0]["needed_bytes"])
    assert ins(check)["capacity"] * 1e9 == pytest.approx(data["points"][0]["capacity_bytes"])


def test_prefill_time_names_the_flops_and_bytes_it_divides(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The TTFT floor is max(FLOPs ÷ peak, bytes ÷ bandwidth) from the step's own operands;
    the throughput, the all-bytes intensity and the ridge the text prints are steps too."""
    data, steps = explained(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100",
                            "--prompt-len", "4096")
    t = ins(steps["prefill time"])
    assert res(steps["prefill time"]) == pytest.approx(max(  # TFLOP ÷ TFLOP/s, GB ÷ TB/s
        t["FLOPs"] / t["peak bf16"] * 1e3, t["bytes"] / t["bandwidth"]))
    assert res(steps["prefill time"]) == pytest.approx(data["floor_time_s"] * 1e3)
    tp = ins(steps["throughput"])
    assert res(steps["throughput"]) == pytest.approx(
        tp["prompts"] * tp["prompt length"] / tp["time"] * 1e3) \
        == pytest.approx(data["floor_prompt_tok_s"])
    i = ins(steps["intensity over all bytes"])
    assert res(steps["intensity over all bytes"]) == pytest.approx(i["FLOPs"] / i["bytes"] * 1e3) \
        == pytest.approx(data["intensity_flop_per_byte"])
    ridge = ins(steps["ridge point"])
    assert res(steps["ridge point"]) == pytest.approx(ridge["peak bf16"] / ridge["bandwidth"]) \
        == pytest.approx(data["ridge_flop_per_byte"])
    speed = ins(steps["expected prompt throughput"])
    assert res(steps["expected prompt throughput"]) == pytest.approx(
        speed["prompts"] * speed["prompt length"] / speed["expected"] * 1e3) \
        == pytest.approx(data["expected"]["prompt_tok_s"])


def test_every_row_of_the_model_weights_table_is_a_sum_over_its_categories(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3: each format's size is its categories' bytes summed, as the table prints
    it; the MLA cache per token names its bytes per element, at bf16 and at fp8."""
    data, steps = explained(capsys, "model", "deepseek-v3")
    for label, nbytes in data["weight_bytes"].items():
        if "B/param" in label:
            continue
        step = steps[f"weights in {label}"]
        assert res(step) == pytest.approx(sum(ins(step).values())) == pytest.approx(nbytes / GB)
    for dtype, key in (("bf16", "kv_bytes_per_token_bf16"), ("fp8", "kv_bytes_per_token_fp8")):
        kv = ins(steps[f"KV bytes per token ({dtype})"])
        assert res(steps[f"KV bytes per token ({dtype})"]) == pytest.approx(
            (kv["kv_lora_rank"] + kv["qk_rope_head_dim"]) * kv["layers"]
            * kv["bytes per element"]) == pytest.approx(data[key])
    active = ins(steps["active parameters without the input embedding"])
    assert res(steps["active parameters without the input embedding"]) == pytest.approx(
        active["active"] - active["embedding"]) \
        == pytest.approx(data["params_active_without_embedding"])


def test_moe_active_parameters_repeat_from_the_counts_shown(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3's 37.55B active: in billions to four figures the step showed 671 − 653.9 ×
    0.96875, which gives 37.53; in whole counts as shown it is exact (37,552,297,472)."""
    data, steps = explained(capsys, "model", "deepseek-v3")
    a = steps["active parameters"]
    assert {i["unit"] for i in a["inputs"][:2]} | {a["result"]["unit"]} == {"params"}
    shown = {i["name"]: float(shown_number(i["value"]).replace(",", "")) for i in a["inputs"]}
    assert shown["total"] - shown["routed experts"] * (1 - shown["k/E"]) == pytest.approx(
        float(shown_number(res(a)).replace(",", "")), abs=1) == pytest.approx(data["params_active"])


def test_a_windowed_models_naive_and_windowed_kv_are_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "model", "gemma-3-27b")
    naive = ins(steps["naive all-layers KV per token"])
    assert res(steps["naive all-layers KV per token"]) * 2**10 == pytest.approx(
        naive["per layer"] * naive["attention layers"]) \
        == pytest.approx(data["kv_bytes_per_token_bf16_naive"])
    w = steps["windowed layers' cache, windows full"]
    per_layer = ins(w)["per layer"]
    windows = {i["name"]: i["value"] for i in w["inputs"] if i["name"].startswith("layers of")}
    total = sum(per_layer * n * float(name.split()[3].split("-")[0].replace(",", ""))
                for name, n in windows.items())
    assert res(w) * 2**20 == pytest.approx(total) \
        == pytest.approx(data["kv_windowed_bytes_per_sequence_max_bf16"])


def test_kv_explains_its_table_rows_and_each_gpus_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "kv", "llama-3.1-70b", "--context", "32k", "--gpu", "h100",
                            "-tp", "2")
    row = data["layer_kinds"][0]
    per_token = steps[f"{row['kind']}: per token"]
    assert res(per_token) * 2**10 == pytest.approx(
        ins(per_token)["per layer"] * ins(per_token)["layers"]) \
        == pytest.approx(row["bytes_per_token"])
    per_seq = steps[f"{row['kind']}: per sequence"]
    assert res(per_seq) * GIB == pytest.approx(
        ins(per_seq)["per token"] * 2**10 * ins(per_seq)["tokens kept"]) \
        == pytest.approx(row["bytes_at_context"])
    gpu = ins(steps["per sequence on each GPU"])
    assert res(steps["per sequence on each GPU"]) == pytest.approx(
        gpu["per sequence"] / gpu["GPUs"]) \
        == pytest.approx(data["bytes_per_sequence_per_gpu"] / 1e9)
    fit = ins(steps["conversations that fit"])
    assert res(steps["conversations that fit"]) == math.floor(
        fit["budget"] / fit["bytes per sequence"]) == data["conversations"]


def test_roofline_explains_every_rows_rate_and_share_of_peak(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "roofline", "--gpu", "h100", "--intensity", "100")
    for point in data["points"]:
        rate = steps[f"{point['name']}: attainable FLOP/s"]
        r = ins(rate)
        peak = next(v for k, v in r.items() if k.startswith("peak"))
        assert res(rate) == pytest.approx(min(peak, r["intensity"] * r["bandwidth"])) \
            == pytest.approx(point["attainable_flops_per_s"] / 1e12)
        share = steps[f"{point['name']}: share of peak"]
        assert res(share) == pytest.approx(100 * ins(share)["attainable"] / peak) \
            == pytest.approx(100 * point["fraction_of_peak"])


def test_fit_conversations_and_tokens_follow_from_the_pool_they_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                            "--max-model-len", "32768")
    c = ins(steps["conversations"])
    assert res(steps["conversations"]) == math.floor(c["pool"] / c["per conversation"]) \
        == data["conversations"]
    assert c["pool"] * GIB == pytest.approx(data["pool_bytes_per_gpu"])
    assert res(steps["ridge batch"]) == data["first_whole_batch_to_ridge"]
    t = ins(steps["tokens the pool holds"])
    assert res(steps["tokens the pool holds"]) == t["blocks"] * t["block size"] == data["tokens"]


def test_utilization_names_the_pool_behind_its_conversations_and_the_ridge_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "utilization", "--gpu", "h100", "--model", "llama-3.1-8b",
                            "--running", "64")
    c = ins(steps["conversations the pool holds"])
    assert res(steps["conversations the pool holds"]) == math.floor(
        c["pool"] / c["per conversation"]) == data["conversations"]
    r = ins(steps["ridge batch"])
    assert res(steps["ridge batch"]) == math.ceil(r["ridge"] * r["bytes per weight"] / 2) \
        == data["first_whole_batch_to_ridge"]


def test_moe_explains_every_column_of_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "moe", "gpt-oss-120b", "--gpu", "h100", "--batch", "1,32")
    for row in data["rows"]:
        b = row["batch"]
        article = ins(steps[f"batch {b}: B·k/E"])
        assert res(steps[f"batch {b}: B·k/E"]) == pytest.approx(
            article["B"] * article["k"] / article["E"]) \
            == pytest.approx(row["article_tokens_per_expert"])
        i = ins(steps[f"batch {b}: FLOP/byte of experts read"])
        assert res(steps[f"batch {b}: FLOP/byte of experts read"]) == pytest.approx(
            2 * i["B"] * i["k"] / (i["experts touched"] * i["bytes per expert weight"])) \
            == pytest.approx(row["intensity_flop_per_byte"])
        w = ins(steps[f"batch {b}: weights read per step"])
        assert res(steps[f"batch {b}: weights read per step"]) == pytest.approx(
            w["dense weights"] + w["routed experts"] * w["share touched"] + w["TP copies"]) \
            == pytest.approx(row["weight_bytes_read"] / 1e9)


def test_a_windowed_pools_conversations_name_the_admission_gate_that_caps_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B at TP2 on L40S: vLLM's pool holds more blocks than 8 decoding conversations
    take, but the prompt being admitted needs its windows' room free: the step says so, with
    the blocks it divides, and gives the JSON's count."""
    data, steps = explained(capsys, "fit", "gemma-3-27b", "--gpu", "l40s", "-tp", "2",
                            "--max-model-len", "32768")
    c = ins(steps["conversations"])
    blocks, decoding = c["pool blocks"], c["blocks a decoding conversation holds"]
    gated = min(blocks // decoding, 1 + (blocks - c["blocks to admit a prompt"]) // decoding)
    assert res(steps["conversations"]) == gated == data["conversations"] < blocks // decoding


def test_llama_cpp_conversations_list_every_operand_of_their_min(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "fit", "gemma-3-27b", "--gpu", "rtx-5090", "--engine",
                            "llama.cpp", "--weights", "q4_k_m", "--max-model-len", "8192")
    c = ins(steps["conversations"])
    assert res(steps["conversations"]) == min(
        c["cells"] // c["context"],
        (c["cells' bytes"] + c["slots"] * c["per slot"]) // (c["per conversation"] + c["per slot"])
    ) == data["conversations"]


def test_the_band_edges_docstring_figures_are_the_default_bands_not_the_vllm_profiles() -> None:
    """band_edges' docstring: a profile's default band (EngineProfile, 0.8 .. 1.25) puts a
    10 ms step at 8–12.5 ms; the bundled vllm profile has its own fitted band, so its edges
    are its band_s, not those (the docstring had called 0.8 .. 1.25 the vllm profile's)."""
    from ridgeline.cost import IDEAL
    from ridgeline.engines import EngineProfile, profile_for
    from ridgeline.reports.expectation import band_edges

    default = EngineProfile.__dataclass_fields__
    assert (default["band_low"].default, default["band_high"].default) == (
        IDEAL.band_low, IDEAL.band_high)
    low, high, _ = band_edges(IDEAL, 0.010, 0.0)
    assert (low * 1e3, high * 1e3) == (pytest.approx(8.0), pytest.approx(12.5))
    vllm = profile_for("vllm")
    low, high, _ = band_edges(vllm, 0.010, 0.0)
    assert (low, high) == pytest.approx(vllm.band_s(0.010))
    assert (round(vllm.band_low, 3), round(vllm.band_high, 3)) != (0.8, 1.25)


def test_fit_explains_vllms_start_up_advice_from_its_own_terms(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The --kv-cache-memory-bytes advice: the card (× gpu_memory_utilization, for the first)
    less what is taken and the 150 MiB margin, each as the JSON's bytes."""
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                            "--max-model-len", "32768")
    advice = data["vllm_advice"]
    fits = ins(steps["start-up advice, fits the memory requested"])
    assert res(steps["start-up advice, fits the memory requested"]) == pytest.approx(
        fits["memory per card"] * fits["gpu_memory_utilization"]
        - (fits["taken"] + fits["margin"])) \
        == pytest.approx(advice["kv_cache_memory_bytes_requested"] / GIB)
    fill = ins(steps["start-up advice, fills the card"])
    assert res(steps["start-up advice, fills the card"]) == pytest.approx(
        fill["memory per card"] - (fill["taken"] + fill["margin"])) \
        == pytest.approx(advice["kv_cache_memory_bytes_device"] / GIB)
    assert fits["gpu_memory_utilization"] == data["reserved_fraction"]


@pytest.mark.parametrize("model", ["gemma-3-27b", "qwen3-next-80b-a3b"])
def test_vllms_logged_concurrency_and_tokens_for_several_groups_are_steps(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    """Windowed (Gemma-3) and hybrid (Qwen3-Next) pools: vLLM logs blocks ÷ the blocks one
    max_model_len request holds as its maximum concurrency, and that × max_model_len as its
    tokens (v0.24+), the text's "holds N tokens as vLLM logs them"."""
    data, steps = explained(capsys, "fit", model, "--gpu", "h200", "-tp", "4",
                            "--max-model-len", "32768")
    c = ins(steps["vLLM's maximum concurrency"])
    assert res(steps["vLLM's maximum concurrency"]) == pytest.approx(
        c["pool blocks"] / c["blocks one request holds"]) \
        == pytest.approx(data["vllm_max_concurrency"])
    t = ins(steps["tokens vLLM logs"])
    assert res(steps["tokens vLLM logs"]) == math.floor(
        t["maximum concurrency"] * t["max_model_len"]) == data["tokens"]


def test_llama_cpp_placement_line_is_the_host_weights_and_cache_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 40 of Llama-3.1-70B on an RTX 4090: the host's weights (its layers' and what lies
    outside them), the growing cache's share there and its bytes at -c, as the JSON's."""
    data, steps = explained(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine",
                            "llama.cpp", "--max-model-len", "16384", "-ngl", "40")
    off = data["offload"]
    w = ins(steps["weights in host memory"])
    assert res(steps["weights in host memory"]) == pytest.approx(
        w["layers on the host"] + w["outside the layers"]) \
        == pytest.approx(off["host_weight_bytes"] / GIB)
    s = ins(steps["growing KV cache in host memory"])
    assert res(steps["growing KV cache in host memory"]) == pytest.approx(
        1 - s["share on the GPU"]) == pytest.approx(off["host_kv_share"])
    c = ins(steps["its cache in host memory"])
    assert res(steps["its cache in host memory"]) * GIB == pytest.approx(
        c["bytes per cell"] * 2**10 * c["cells"] * c["share in host memory"]) \
        == pytest.approx(off["host_cache_bytes"])


def test_decode_explains_its_share_of_batch_1_and_the_sequences_the_pool_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "decode", "gpt-oss-120b", "--gpu", "h200", "--batch", "16",
                            "--context", "4096", "--engine", "sglang")
    share = ins(steps["per-user speed as a share of batch 1's"])
    assert res(steps["per-user speed as a share of batch 1's"]) == pytest.approx(
        share["per user"] / share["batch 1"]) \
        == pytest.approx(data["points"][0]["floor_per_user_vs_batch_1"])
    (seats,) = data["engine_max_batch"]
    runs = steps["sequences the engine runs at 4,096 tokens"]
    assert res(runs) == min(ins(runs)["pool holds"], ins(runs)["max_running_requests"]) \
        == seats["engine_max_batch"] == min(seats["conversations"], seats["max_num_seqs"])


def test_moe_header_figures_are_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b on an H100: the article's B × factor, its 16-bit reckoning, the batch the
    touched experts reach the ridge at (the bisection's, its intensity recomputed from the
    operands listed) and the weights that stay in memory, each the JSON's figure."""
    data, steps = explained(capsys, "moe", "gpt-oss-120b", "--gpu", "h100", "--batch", "32")
    f = ins(steps["article's intensity per token of batch"])
    assert res(steps["article's intensity per token of batch"]) == pytest.approx(
        2 * f["k/E"] / f["bytes per expert weight"]) \
        == pytest.approx(data["article_intensity_per_batch"])
    ridge16 = ins(steps["16-bit ridge point"])
    peak = next(v for k, v in ridge16.items() if k.startswith("peak"))
    assert res(steps["16-bit ridge point"]) == pytest.approx(
        peak / ridge16["memory bandwidth"]) \
        == pytest.approx(data["article_bf16_ridge_flop_per_byte"])
    b16 = ins(steps["article's batch to the 16-bit ridge"])
    division = b16["16-bit ridge"] * b16["bytes per expert weight"] / 2 / b16["k/E"]
    assert division == pytest.approx(data["article_bf16_batch_to_ridge"])
    assert res(steps["article's batch to the 16-bit ridge"]) == math.ceil(division - 1e-6)
    touched = steps["batch to the ridge with the experts touched"]
    t = ins(touched)

    def intensity(b: float) -> float:
        experts = t["E"] * (1 - (1 - t["k"] / t["E"]) ** b)
        return 2 * b * t["k"] / (experts * t["bytes per expert weight"])

    batch = res(touched)
    assert intensity(batch) == pytest.approx(t["intensity at that batch"])
    assert batch == int(batch) == 2511  # the smallest whole batch, as roofline's 296
    assert intensity(batch) >= t["ridge"]
    assert intensity(batch - 1) < t["ridge"]  # 2,510 reads 295.29 FLOP/byte, under 295.34
    assert batch == pytest.approx(data["better_batch_to_ridge"])
    w = steps["weights in memory"]
    assert res(w) == pytest.approx(sum(ins(w).values())) \
        == pytest.approx(data["weight_bytes_total"] / 1e9)
    e = steps["of which routed experts"]
    assert res(e) == pytest.approx(sum(ins(e).values())) \
        == pytest.approx(data["expert_bytes"] / 1e9)


def test_roofline_notes_figures_are_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 in fp8 on 8 MI300X: the notes' "batch × 1.88", the attention's bf16 ridge
    and the MoE rows' batch to ridge."""
    data, steps = explained(capsys, "roofline", "--gpu", "mi300x", "--model", "deepseek-v3",
                            "--weights", "fp8", "--batch", "64", "-tp", "8")
    p = ins(steps["intensity per token sharing a read"])
    assert res(steps["intensity per token sharing a read"]) == pytest.approx(
        2 / p["bytes per weight"]) == pytest.approx(data["intensity_per_token_flop_per_byte"])
    att = ins(steps["decode attention's ridge (bf16)"])
    assert res(steps["decode attention's ridge (bf16)"]) == pytest.approx(
        att["peak bf16 (dense)"] / att["memory bandwidth"]) \
        == pytest.approx(data["attention_ridge_flop_per_byte"])
    m = ins(steps["MoE rows' batch to ridge"])
    whole = math.ceil(m["ridge"] * m["bytes per expert weight"] / 2 / m["k/E"])
    assert res(steps["MoE rows' batch to ridge"]) == whole
    for point in data["points"]:
        if point["name"].startswith("MoE"):
            assert point["first_whole_batch_to_ridge"] == whole


def test_kv_state_row_is_the_state_steps_figure_in_the_tables_unit(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "kv", "qwen3-next-80b-a3b", "--context", "64k", "--gpu",
                            "h100", "-tp", "2")
    (row,) = [r for r in data["layer_kinds"] if not r["bytes_per_token"]]
    state = steps["recurrent states per sequence"]
    i = ins(state)
    per_layer = i["conv elements"] * i["conv bytes"] + i["SSM elements"] * i["SSM bytes"]
    assert state["result"]["unit"] == "MiB"  # as the table prints the row: 37.69 MiB
    assert res(state) * 2**20 == pytest.approx(i["linear attention layers"] * per_layer) \
        == pytest.approx(row["bytes_at_context"])


def test_simulate_explains_its_output_token_rate(capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2",
                            "--num-requests", "200")
    r = ins(steps["output token rate"])
    assert res(steps["output token rate"]) == pytest.approx(
        r["output tokens"] / r["simulated time"]) == pytest.approx(data["output_tok_s"])
    assert r["output tokens"] == data["output_tokens"]
    g = ins(steps["output token rate per GPU"])
    assert res(steps["output token rate per GPU"]) == pytest.approx(
        g["output tokens per second"] / g["GPUs"]) == pytest.approx(data["output_tok_s_per_gpu"])


def test_amdahls_explanation_is_steps_like_every_commands(
        capsys: pytest.CaptureFixture[str]) -> None:
    """P from the step's times, the new step time, the end-to-end speedup, the ceiling and
    the part speedup a target needs: each recomputed from its operands, as the JSON gives it."""
    data, steps = explained(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                            "--batch", "32", "--context", "8000", "--speedup", "2",
                            "--target", "1.5")
    share = ins(steps["the part's share"])
    times = [float(v) for k, v in share.items() if k != "KV pool"]
    assert times[0] / times[1] == pytest.approx(data["source"]["fraction"], rel=1e-4)
    assert res(steps["the part's share"]) == data["source"]["fraction"]
    new = ins(steps["new step time"])
    assert res(steps["new step time"]) == pytest.approx((1 - new["P"]) + new["P"] / new["S"]) \
        == pytest.approx(data["end_to_end_speedup"]["new_time_fraction"])
    gain = ins(steps["end-to-end speedup"])
    assert res(steps["end-to-end speedup"]) == pytest.approx(1 / gain["new step time"]) \
        == pytest.approx(data["end_to_end_speedup"]["end_to_end_speedup"])
    c = ins(steps["ceiling"])
    assert res(steps["ceiling"]) == pytest.approx(1 / (1 - c["P"])) \
        == pytest.approx(data["speedup_ceiling"]["ceiling_speedup"])
    s = ins(steps["part speedup for the target"])
    assert res(steps["part speedup for the target"]) == pytest.approx(
        s["P"] / (1 / s["G"] - (1 - s["P"]))) \
        == pytest.approx(data["required_part_speedup"]["required_part_speedup"])


def test_a_batch_that_does_not_fit_gives_its_share_of_batch_1_as_the_steps_ratio(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The article's batch 32 that overflows an H100: "each user at 77% of batch 1's speed"
    is batch 1's step ÷ this one, no speed printed for a batch that cannot run."""
    data, steps = explained(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--weights",
                            "fp8", "--kv-dtype", "bf16", "--batch", "32", "--context", "2000")
    share = ins(steps["per-user speed as a share of batch 1's"])
    assert res(steps["per-user speed as a share of batch 1's"]) == pytest.approx(
        share["batch 1's step"] / share["step"]) \
        == pytest.approx(data["points"][0]["floor_per_user_vs_batch_1"])


def test_llama_cpp_cache_step_names_the_overflow_when_the_weights_exceed_the_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B in q8_0 with every layer on one RTX 4090: total − weights − runtime −
    buffer is negative, so the step says max(0, …) and lists that negative figure, by which
    the card is overrun; fit's headline for it is 'does not fit', and its pool is the 0."""
    data, steps = explained(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine",
                            "llama.cpp", "--weights", "q8_0", "--max-model-len", "16384",
                            "-ngl", "99")
    kv = steps["KV cache per GPU"]
    k = ins(kv)
    left = k["total"] - k["weights per GPU"] - k["runtime context"] - k["compute buffer"]
    assert left < 0 and k["what is left"] == pytest.approx(left)
    assert kv["formula"].startswith("max(0, ")
    shown = next(i["source"] for i in kv["inputs"] if i["name"] == "what is left")
    assert f"exceed the memory by {-left:,.2f} GiB" in shown
    assert res(kv) == max(0.0, left) == data["pool_bytes_per_gpu"] / GIB
    assert data["conversations"] == 0 and data["shortfall_bytes_per_gpu"] > -left * GIB
    _, text, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine",
                            "llama.cpp", "--weights", "q8_0", "--max-model-len", "16384",
                            "-ngl", "99")
    assert text.startswith("DOES NOT FIT")


def test_llama_cpp_cache_step_that_fits_lists_no_overflow(
        capsys: pytest.CaptureFixture[str]) -> None:
    data, steps = explained(capsys, "fit", "gemma-3-27b", "--gpu", "rtx-5090", "--engine",
                            "llama.cpp", "--weights", "q4_k_m", "--max-model-len", "8192")
    kv = steps["KV cache per GPU"]
    k = ins(kv)
    assert "what is left" not in k and not kv["formula"].startswith("max(")
    assert k["left free by --fit"] == pytest.approx(1.0)  # the default --fit-target, 1,024 MiB
    assert res(kv) == pytest.approx(
        k["total"] - k["weights per GPU"] - k["runtime context"] - k["compute buffer"]
        - k["left free by --fit"]) == pytest.approx(data["pool_bytes_per_gpu"] / GIB)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fits_reserved_row_is_a_step_from_its_own_operands(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """The budget's "reserved (gpu_memory_utilization 0.92) 72.85 GiB": total × the reserved fraction (vLLM's
    gpu_memory_utilization, SGLang's mem_fraction_static), as the JSON's reserved bytes."""
    data, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine,
                            "--max-model-len", "32768")
    r = ins(steps["reserved per GPU"])
    assert res(steps["reserved per GPU"]) == pytest.approx(
        r["total"] * r["reserved fraction"]) \
        == pytest.approx(data["reserved_bytes_per_gpu"] / GIB)
    assert r["reserved fraction"] == data["reserved_fraction"]
    assert r["total"] * GIB == pytest.approx(data["memory_bytes_per_gpu"])


def test_llama_cpp_and_a_set_pool_print_no_reserved_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Neither prints a reserved row (llama.cpp reserves no fraction; --kv-cache-memory-bytes
    ignores it), so neither explains one."""
    _, steps = explained(capsys, "fit", "gemma-3-27b", "--gpu", "rtx-5090", "--engine",
                         "llama.cpp", "--weights", "q4_k_m", "--max-model-len", "8192")
    assert "reserved per GPU" not in steps
    _, steps = explained(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                         "32768", "--kv-cache-memory-bytes", "20G")
    assert "reserved per GPU" not in steps


def test_moes_experts_touched_and_article_batch_list_every_operand(
        capsys: pytest.CaptureFixture[str]) -> None:
    """E × (1 − (1 − k/E)^B) and (ridge × bytes ÷ 2) ÷ (k/E) repeat from their own steps'
    inputs: E and k/E were missing, so the step could not be redone from what it showed."""
    data, steps = explained(capsys, "moe", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                            "--batch", "64")
    t = ins(steps["experts touched by the batch"])
    assert res(steps["experts touched by the batch"]) == pytest.approx(
        t["E"] * (1 - (1 - t["k/E"]) ** t["B"])) \
        == pytest.approx(data["rows"][0]["experts_touched"])
    a = ins(steps["article's batch to the ridge"])
    division = a["ridge"] * a["bytes per expert weight"] / 2 / a["k/E"]  # 6,597.9: 6,598
    assert division == pytest.approx(data["article_batch_to_ridge"])
    assert res(steps["article's batch to the ridge"]) == math.ceil(division - 1e-6)


def test_attentions_all_heads_and_layers_lists_the_score_matrix_it_multiplies(
        capsys: pytest.CaptureFixture[str]) -> None:
    """heads × attention layers × score matrix: DeepSeek-V3 at 128K, 128 × 61 × 32.77 GB =
    255,853 GB, the score matrix now among the step's own inputs."""
    data, steps = explained(capsys, "attention", "--model", "deepseek-v3", "--context", "128k")
    a = ins(steps["all heads and layers"])
    assert res(steps["all heads and layers"]) == pytest.approx(
        a["heads"] * a["attention layers"] * a["score matrix"]) \
        == pytest.approx(data["total_score_bytes"] / 1e9)


def test_a_chunked_prefill_lists_the_step_times_its_sum_adds(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B on 2 L40S, an 8,000-token prompt in vLLM's 2,048-token steps: the
    expectation is Σ of four step_cost times, each now an input (it listed only the budget
    and the count, so 1,464 ms could not be redone from the step)."""
    data, steps = explained(capsys, "prefill", "gemma-3-27b-it", "--gpu", "l40s",
                            "--num-gpus", "2", "--prompt-len", "8000")
    total = steps["prefill in steps of the token budget"]
    times = {k: v for k, v in ins(total).items() if k.startswith("step ")}
    assert len(times) == ins(total)["steps"] == 4
    assert res(total) == pytest.approx(sum(times.values())) \
        == pytest.approx(data["expected"]["time_s"] * 1e3)
    assert times["step 1"] == pytest.approx(res(steps["first step: expected step"]))


def test_a_long_chunked_prefill_sums_its_middle_steps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """63 steps of 512 tokens (Llama-3.1-70B on 4 H100, 32,000 tokens): the first two, the
    middle 60 together and the last still add to the expectation."""
    data, steps = explained(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                            "4", "--prompt-len", "32000", "--max-num-batched-tokens", "512")
    t = ins(steps["prefill in steps of the token budget"])
    assert set(t) >= {"step 1", "step 2", "steps 3 to 62", "step 63"}
    assert res(steps["prefill in steps of the token budget"]) == pytest.approx(
        t["step 1"] + t["step 2"] + t["steps 3 to 62"] + t["step 63"]) \
        == pytest.approx(data["expected"]["time_s"] * 1e3)


@pytest.mark.parametrize("batch", ["1", "3"])
def test_llama_cpp_prefill_lists_its_ubatch_times(
        capsys: pytest.CaptureFixture[str], batch: str) -> None:
    """llama.cpp's 1,000-token prompt in two ubatches of 512 (Llama-3.1-8B on an L40S); three
    of them packed, in order, into ⌈3,000 ÷ 512⌉ = 6: the expectation is their times' sum."""
    data, steps = explained(capsys, "prefill", "llama-3.1-8b", "--gpu", "l40s", "--prompt-len",
                            "1000", "--batch", batch, "--engine", "llama.cpp")
    u = ins(steps["prefill in ubatches"])
    times = [v for k, v in u.items() if k.startswith("ubatch ")]
    assert len(times) == u["ubatches"] == -(-int(batch) * 1000 // 512)
    assert res(steps["prefill in ubatches"]) == pytest.approx(sum(times)) \
        == pytest.approx(data["expected"]["time_s"] * 1e3)


def test_kv_rows_steps_are_in_the_units_the_table_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B at 64K: the table's window row prints 416 MiB a sequence; its step said
    0.4062 GiB, a figure the text never shows. Each row's step now gives the table's figure."""
    data, steps = explained(capsys, "kv", "gemma-3-27b-it", "--context", "64k", "--gpu", "l40s",
                            "-tp", "2")
    factors = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": GIB, "TiB": 2**40}
    code, text, _ = run_cli(capsys, "kv", "gemma-3-27b-it", "--context", "64k", "--gpu", "l40s",
                            "-tp", "2")
    assert code == 0
    for row in data["layer_kinds"]:
        for what, key in (("per token", "bytes_per_token"), ("per sequence", "bytes_at_context")):
            result = steps[f"{row['kind']}: {what}"]["result"]
            assert result["value"] * factors[result["unit"]] == pytest.approx(row[key])
            assert f"{result['value']:.4g} {result['unit']}" in text
    assert steps["sliding window: per sequence"]["result"]["unit"] == "MiB"


def test_simulate_explains_its_mean_column_and_running_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The latency table's mean column and the running batch's mean are each a step (Σ ÷
    count, request-seconds ÷ span): --explain showed only the p50s, none of the means."""
    data, steps = explained(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4",
                            "--num-requests", "60", "--input-len", "1000", "--output-len", "100")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"),
                       ("e2e_s", "end-to-end"), ("queue_s", "queueing")):
        m = steps[f"{label} mean"]
        count = next(v for k, v in ins(m).items() if k.endswith("measured"))
        assert res(m) == pytest.approx(ins(m)[f"Σ {label}"] / count * 1e3) \
            == pytest.approx(data[key]["mean"] * 1e3)
    b = ins(steps["running batch, mean"])
    assert res(steps["running batch, mean"]) == pytest.approx(
        b["request-seconds running"] / b["span"]) == pytest.approx(data["running"]["mean"])


def _blocks(source: str) -> int:
    """The block count a source names: '…: 190,399 blocks of 16 tokens' -> 190399."""
    return int(source.split(": ")[-1].split(" blocks")[0].replace(",", ""))


def test_utilizations_conversations_divide_in_whole_blocks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b on an MI300X at 2,000 tokens: the GiB as shown divide into one more than
    the blocks do (104.6 GiB ÷ 0.07361 GiB read 1,421 where 1,420 fit, under vLLM 0.32); the
    pool's and a conversation's blocks, now named, give the division (under 0.34, 1,566), and
    where vLLM admits fewer (1,565: its windows' admission room) the step says so."""
    data, steps = explained(capsys, "utilization", "--gpu", "mi300x", "--running", "32",
                            "--model", "gpt-oss-120b")
    held = steps["conversations the pool holds"]
    sources = {i["name"]: i["source"] for i in held["inputs"]}
    divided = _blocks(sources["pool"]) // _blocks(sources["per conversation"])
    assert ins(held)["pool ÷ one conversation"] == divided
    assert res(held) == data["conversations"] == divided - 1


def test_utilization_names_the_division_where_the_engine_holds_fewer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B on 2 L40S at 8,000 tokens: the pool divides into 25 conversations, vLLM
    holds 23 (its windows' admission room; 22 and 20 under vLLM 0.32); the step said only
    pool ÷ conversation."""
    data, steps = explained(capsys, "utilization", "--gpu", "l40s", "--num-gpus", "2",
                            "--running", "16", "--model", "gemma-3-27b-it", "--context", "8000")
    held = steps["conversations the pool holds"]
    i = ins(held)
    assert i["pool ÷ one conversation"] == math.floor(i["pool"] / i["per conversation"]) == 25
    assert res(held) == data["conversations"] == 23 < i["pool ÷ one conversation"]


@pytest.mark.parametrize("model, extra", [
    ("llama-3.1-8b", ()), ("qwen3-next-80b-a3b-thinking", ("--num-gpus", "2"))])
def test_decode_compute_time_lists_the_flops_it_adds(
        capsys: pytest.CaptureFixture[str], model: str, extra: tuple[str, ...]) -> None:
    """The compute time's formula named the weights' matmuls and attention, but the step gave
    only their total: each term is now an input, and they add up to the FLOPs it divides
    (Llama-3.1-8B, batch 32 at 16,000 tokens: 0.4803 + 0.2685 = 0.7488 TFLOP; Qwen3-Next
    adds its recurrent state updates as the rest)."""
    data, steps = explained(capsys, "decode", model, "--gpu", "h200", *extra, "--batch", "32",
                            "--context", "16000")
    c = ins(steps["compute time"])
    assert c["FLOPs"] == pytest.approx(
        c["weight matmuls"] + c.get("repeated on the TP ranks", 0.0) + c["attention FLOPs"]
        + c.get("the rest", 0.0))
    assert c["attention FLOPs"] > 0 and c["weight matmuls"] > 0
    # TP2 runs Qwen3-Next's routers whole on both ranks: 48 × 2,048 × 512 weights, 2 FLOP a
    # token, 32 tokens, once more (and its shared experts' one-wide gates)
    assert ("repeated on the TP ranks" in c) == model.startswith("qwen3-next")
    assert ("the rest" in c) == model.startswith("qwen3-next")
    assert res(steps["compute time"]) == pytest.approx(
        c["FLOPs"] / c["peak bf16"] * 1e3) \
        == pytest.approx(data["points"][0]["compute_time_s"] * 1e3)


@pytest.mark.parametrize("model", ["llama-3.2-1b", "llama-3.1-8b"])
def test_the_weights_step_says_whether_a_tied_embedding_is_in_the_params_it_reads(
        capsys: pytest.CaptureFixture[str], model: str) -> None:
    """A tied input embedding is the LM head, read whole: the step's count holds it (all the
    parameters), and its words say so rather than 'all but the input embedding'."""
    code, out, err = run_cli(capsys, "model", model, "--json")
    assert code == 0, err
    counts = json.loads(out)
    tied = "lm_head" not in counts["params_by_category"]
    reads = counts["params_total"] - (0 if tied else counts["params_by_category"]["embedding"])
    code, out, err = run_cli(capsys, "decode", model, "--gpu", "h100", "--explain")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "params a step can read =" in ln)
    assert f"= {reads / 1e9:,.4g} B params" in line
    words = ("all of them: the tied input embedding is read whole as the LM head" if tied
             else "all but the input embedding")
    assert f"[{words}, config.json]" in line

"""decode, prefill and moe after the audit: vLLM's start-up check at the max_model_len in
force, GGUF on the serving engines, the shared serving profile, the JSON's reasons, lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.engines import bundled_profiles, moe_prompt_expert_slowdown

TP2_70B = ["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def longest_fit(capsys: pytest.CaptureFixture[str], *usage: str) -> int:
    """The longest context `fit --target-concurrency 1` finds for 70B bf16 on 2 x H100."""
    return int(run_json(capsys, "fit", *TP2_70B, "--target-concurrency", "1", *usage)["max_model_len"])


# --- finding 3: the start-up check at the max_model_len in force -------------------------


def test_decode_quotes_no_vllm_speed_where_its_default_max_model_len_would_not_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """70B bf16 on 2 x H100 leaves about 17k tokens of pool at vllm serve's defaults (decode's,
    as fit's): vLLM's default max_model_len, the model's 131,072, fails its start-up check, so
    decode gives the floor (engine-independent) and no expectation, saying why and what
    helps."""
    report = run_json(capsys, "decode", *TP2_70B, "--batch", "1,64", "--context", "1100")
    longest = longest_fit(capsys)
    for point in report["points"]:
        assert point["expected"] is None and point["expected_none_code"] == "engine_runs_none"
        assert point["per_user_tok_s"] is None  # no expected speed, as the text gives none
        # the floor's step stands, as arithmetic; no speed, floor's or expected, as the text
        assert point["floor_step_time_s"] > 0 and point["floor_per_user_tok_s"] is None
        assert "would refuse to start at its default max_model_len, the model's 131,072 " \
            "tokens" in point["expected_none_reason"]
        assert f"give --max-model-len ≤ {longest:,}" in point["expected_none_reason"]
    (seats,) = report["engine_max_batch"]
    assert seats["engine_max_batch"] == 0 and seats["max_model_len"] == 131072
    code, out, _ = run(capsys, "decode", *TP2_70B, "--batch", "1,64", "--context", "1100")
    assert code == 0 and "won't start" in out and report["points"][0]["expected_none_reason"] in out


def test_the_longest_max_model_len_decode_names_is_the_one_fit_finds_in_each_usage(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm serve profiles a smaller step than the offline class, so its pool is larger and the
    length it starts at longer: decode's advice follows the usage, as fit's search does."""
    for usage in ("offline", "serve"):
        longest = longest_fit(capsys, "--usage", usage)
        reason = run_json(capsys, "decode", *TP2_70B, "--context", "1100", "--usage",
                          usage)["points"][0]["expected_none_reason"]
        assert reason.endswith(f"give --max-model-len ≤ {longest:,}")
    assert longest_fit(capsys, "--usage", "serve") > longest_fit(capsys, "--usage", "offline")


def test_max_model_len_at_the_longest_starts_and_one_token_more_does_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    longest = longest_fit(capsys)  # decode and fit both size vllm serve's pool by default
    at = run_json(capsys, "decode", *TP2_70B, "--batch", "1,64", "--context", "1100",
                  "--max-model-len", str(longest))
    assert at["points"][0]["expected"]["per_user_tok_s"] > 0
    assert at["points"][1]["expected"] is None  # 64 past the seats
    assert at["points"][1]["expected_none_code"] == "over_engine_pool"
    fit = run_json(capsys, "fit", *TP2_70B, "--max-model-len", "1100")
    assert at["engine_max_batch"][0]["engine_max_batch"] == fit["conversations"] == 37  # vLLM 0.34
    past = run_json(capsys, "decode", *TP2_70B, "--context", "1100", "--max-model-len",
                    str(longest + 1))
    assert past["points"][0]["expected"] is None
    assert f"at --max-model-len {longest + 1:,}" in past["points"][0]["expected_none_reason"]


def test_decode_and_simulate_agree_on_whether_vllm_serve_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's pair: simulate refused vllm serve's defaults while decode quoted 29.6
    tok/s under the same defaults; now both refuse, and both run at the length fit names."""
    code, _, err = run(capsys, "simulate", *TP2_70B, "--rate", "0.2", "--num-requests", "20")
    assert code == 2 and "would refuse to start at its default max_model_len" in err
    decode = run_json(capsys, "decode", *TP2_70B, "--context", "1100", "--usage", "serve")
    assert decode["points"][0]["expected"] is None
    longest = str(longest_fit(capsys, "--usage", "serve"))
    code, _, err = run(capsys, "simulate", *TP2_70B, "--rate", "0.2", "--num-requests", "20",
                       "--max-model-len", longest)
    assert code == 0, err
    decode = run_json(capsys, "decode", *TP2_70B, "--context", "1100", "--usage", "serve",
                      "--max-model-len", longest)
    assert decode["points"][0]["expected"]["per_user_tok_s"] == pytest.approx(29.6, abs=0.05)


def test_a_single_h100_running_llama_8b_still_gets_its_speed_at_the_default_length(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An 8B model leaves room for a 131,072-token sequence on one H100: nothing changes. The
    speed is 1 ÷ vLLM's priced step at batch 1 and decode's context (125.8 tok/s), the same
    answer as under a short --max-model-len."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.cost import decode_batch, step_cost
    from ridgeline.engines import profile_for

    point = run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100")["points"][0]
    short = run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                     "8192")["points"][0]
    assert point["expected_none_reason"] is None
    assert point["per_user_tok_s"] == point["expected"]["per_user_tok_s"]
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           engine="vllm")
    step_s = step_cost(dep, decode_batch(1, point["context_len"]), profile_for("vllm")).time_s
    assert point["expected"]["time_s"] == pytest.approx(step_s, rel=1e-12)
    assert point["expected"]["per_user_tok_s"] == pytest.approx(1 / step_s, rel=1e-12)
    assert point["expected"] == short["expected"]


def test_prefill_quotes_no_ttft_where_vllm_would_not_start_and_says_so_in_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "prefill", *TP2_70B, "--prompt-len", "2000")
    assert report["expected"] is None and report["prompt_tok_s"] is None
    # the floor's time stands, as arithmetic; no rate where vLLM would not start
    assert report["floor_time_s"] > 0 and report["floor_prompt_tok_s"] is None
    assert report["expected_none_code"] == "engine_runs_none"
    assert report["max_model_len"] == 131072
    code, out, _ = run(capsys, "prefill", *TP2_70B, "--prompt-len", "2000")
    assert code == 0 and out.splitlines()[0] == f"DOES NOT FIT on vLLM " \
        f"{report['engine_version']}: {report['expected_none_reason']}"
    ran = run_json(capsys, "prefill", *TP2_70B, "--prompt-len", "2000", "--max-model-len", "8k")
    assert ran["time_s"] == ran["expected"]["time_s"] > report["floor_time_s"]  # over the floor
    assert ran["max_model_len"] == 8000


@pytest.mark.parametrize("argv, words", [
    (["decode", *TP2_70B, "--context", "4000", "--max-model-len", "2000"],
     "--context 4,000 is past --max-model-len 2,000"),
    (["prefill", *TP2_70B, "--prompt-len", "1000,4000", "--max-model-len", "2000"],
     "--prompt-len 4,000 is past --max-model-len 2,000"),
    (["decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--context",
      "8192", "--max-model-len", "4096"], "--context 8,192 is past --max-model-len 4,096"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "0"],
     "max model length must be positive"),
])
def test_a_max_model_len_that_cannot_be_gets_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from the parser
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and words in err and err.count("\n") == 1


# --- finding 8: GGUF weights on the serving engines ---------------------------------------


def test_vllm_on_gguf_weights_carries_its_docs_experimental_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["decode", "llama-3.1-8b", "--gpu", "h100", "--context", "1000"]
    cautions = run_json(capsys, *base, "--weights", "q4_k_m")["cautions"]
    assert any("highly experimental and under-optimized" in c and "docs.vllm.ai" in c
               for c in cautions)
    sglang = run_json(capsys, *base, "--weights", "q4_k_m", "--engine", "sglang")["cautions"]
    assert any("docs.sglang.io" in c and "unchecked" in c for c in sglang)
    for other in (["--weights", "awq-int4"], ["--weights", "q4_k_m", "--engine", "llama.cpp"]):
        assert not any("GGUF" in c for c in run_json(capsys, *base, *other)["cautions"])
    prefill = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                       "1000", "--weights", "q8_0")["cautions"]
    assert any("highly experimental" in c for c in prefill)
    simulated = run_json(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--weights",
                         "q4_k_m", "--max-model-len", "8192", "--rate", "2",
                         "--num-requests", "50")["cautions"]
    assert any("highly experimental" in c for c in simulated)  # its speeds are priced alike


def test_tensorrt_llm_refuses_gguf_weights(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["decode"], ["prefill", "--prompt-len", "1000"]):
        code, out, err = run(capsys, *command, "llama-3.1-8b", "--gpu", "h100", "--weights",
                             "q4_k_m", "--engine", "trtllm")
        assert code == 2 and out == "" and "trtllm loads no GGUF file (q4_k_m)" in err


# --- finding 9: one step-cost profile for the three serving engines -----------------------


def test_sglang_and_trtllm_say_their_step_times_are_vllms(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = ["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,64", "--context", "1000"]
    vllm = run_json(capsys, *base)
    assert not any("share one calibrated step-cost profile" in c for c in vllm["cautions"])
    for engine in ("sglang", "trtllm"):
        other = run_json(capsys, *base, "--engine", engine)
        assert [p["expected"]["time_s"] for p in other["points"]] == \
            [p["expected"]["time_s"] for p in vllm["points"]]
        assert any(c.startswith("SGLang, TensorRT-LLM, vLLM share one calibrated step-cost profile")
                   for c in other["cautions"])
    # a profile calibrated on SGLang's own rows is its own: no such caution
    own = bundled_profiles()["sglang"].to_dict()
    own["band_high"] = 1.2
    path = tmp_path / "sglang.json"
    path.write_text(json.dumps({"engines": {"sglang": own}}))
    mine = run_json(capsys, *base, "--engine", "sglang", "--profile", str(path))
    assert not any("share one calibrated" in c for c in mine["cautions"])


def test_on_a_moe_prompt_the_shared_profile_caution_says_vllm_prices_the_experts_slower(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A MoE's prompt is priced slower on vLLM (moe_prompt_expert_slowdown), so SGLang's
    caution may not claim the step times are the same on each without saying so."""
    base = ["prefill", "qwen3-30b-a3b", "--gpu", "h100", "--prompt-len", "8192"]
    vllm = run_json(capsys, *base)
    sglang = run_json(capsys, *base, "--engine", "sglang")
    assert moe_prompt_expert_slowdown("vllm") > moe_prompt_expert_slowdown("sglang") == 1
    assert vllm["expected"]["time_s"] > sglang["expected"]["time_s"]
    shared = next(c for c in sglang["cautions"] if "share one calibrated step-cost" in c)
    assert f"vLLM prices {moe_prompt_expert_slowdown('vllm'):g}x slower" in shared
    dense = run_json(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "8192",
                     "--engine", "sglang")
    assert not any("prices" in c and "share one calibrated" in c for c in dense["cautions"])


def test_where_the_engines_launch_different_matmuls_the_shared_profile_caution_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s at batch 1: SGLang folds the shared expert into the routed
    experts' matmuls, so it launches fewer a forward pass than vLLM and its step is faster on
    the one profile; its caution said the step times "are the same on each". It now names
    each engine's launches; a dense model's, the same on each, still reads the same."""
    from ridgeline.catalog import resolve_model
    from ridgeline.deployment import Deployment
    from ridgeline.engine_names import engine_name
    from ridgeline.hardware import resolve_accelerator
    from ridgeline.launches import engine_matmuls

    base = ["decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--max-model-len",
            "32768", "--batch", "1", "--context", "32768"]
    sglang = run_json(capsys, *base, "--engine", "sglang")
    vllm = run_json(capsys, *base, "--engine", "vllm")
    assert sglang["points"][0]["expected"]["time_s"] < vllm["points"][0]["expected"]["time_s"]
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), num_gpus=8)
    counts = {e: engine_matmuls(dep, e) for e in ("sglang", "vllm")}
    assert counts["sglang"] < counts["vllm"]
    shared = next(c for c in sglang["cautions"] if "share one calibrated step-cost" in c)
    assert "the same on each but for the weight matmuls each launches" in shared
    for engine, n in counts.items():
        assert f"{engine_name(engine)} {n:,}" in shared
    dense = run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1",
                     "--context", "1000", "--engine", "sglang")
    said = next(c for c in dense["cautions"] if "share one calibrated step-cost" in c)
    assert "so these step times are the same on each:" in said


# --- finding 12: a reason wherever expected is null ---------------------------------------


def test_every_null_expectation_carries_the_texts_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Past the pool's seats (256 at 2,048 tokens on one H100) and past the memory (2,000):
    the JSON says what the text says."""
    argv = ["decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "256", "--context", "2048"]
    report = run_json(capsys, *argv)
    (point,) = report["points"]
    assert point["expected"] is None and point["expected_none_code"] == "over_engine_pool"
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.splitlines()[0] == f"DOES NOT RUN AT ONCE on vLLM " \
        f"{report['engine_version']}: {point['expected_none_reason']}"
    assert "runs at most 236 sequences" in point["expected_none_reason"]  # vllm serve's pool
    unfit = run_json(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "2000",
                     "--context", "2048")["points"][0]
    assert unfit["expected_none_code"] == "does_not_fit"
    assert unfit["expected_none_reason"].startswith("does not fit: ")


# --- finding 13: lists, and a batch of one under pipeline parallelism ---------------------


def test_moe_takes_a_list_of_batches_as_decode_does(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "moe", "qwen3-30b-a3b", "--batch", "1,16,64")
    assert report["batches"] == [1, 16, 64]
    assert {1, 16, 64} <= {r["batch"] for r in report["rows"]}
    one = run_json(capsys, "moe", "qwen3-30b-a3b", "--batch", "16")
    row = next(r for r in one["rows"] if r["batch"] == 16)
    assert row in report["rows"]
    code, out, _ = run(capsys, "moe", "qwen3-30b-a3b", "--batch", "1,16,64", "--explain")
    assert code == 0 and all(f"experts touched by the batch of {b}" in out for b in (1, 16, 64))


def test_prefill_takes_a_list_of_prompt_lengths_a_row_each(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["prefill", "llama-3.1-8b", "--gpu", "h100"]
    series = run_json(capsys, *base, "--prompt-len", "1000,8000,32000")["prompts"]
    assert [p["prompt_len"] for p in series] == [1000, 8000, 32000]
    alone = run_json(capsys, *base, "--prompt-len", "8000")
    assert series[1]["expected"] == alone["expected"] and series[1]["time_s"] == alone["time_s"]
    code, out, _ = run(capsys, *base, "--prompt-len", "1000,8000,32000")
    assert code == 0 and f"{alone['expected']['time_s'] * 1e3:,.1f}" in out
    cards = run_json(capsys, *base[:2], "--gpu", "h100,h200", "--prompt-len", "1000,8000")
    assert [(c["accelerator"], c["prompt_len"]) for c in cards["accelerators"]] == [
        ("h100-sxm", 1000), ("h100-sxm", 8000), ("h200-sxm", 1000), ("h200-sxm", 8000)]


def test_a_batch_of_one_under_pipeline_parallelism_is_not_said_to_split(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["decode", "llama-3.1-8b", "--gpu", "h100", "-pp", "3"]
    (one,) = [c for c in run_json(capsys, *base, "--batch", "1")["cautions"]
              if c.startswith("pipeline parallel")]
    assert "a batch of 1 cannot split" in one and "micro-batches" not in one
    (many,) = [c for c in run_json(capsys, *base, "--batch", "1,6")["cautions"]
               if c.startswith("pipeline parallel")]
    assert "up to 3 micro-batches of ⌈batch ÷ 3⌉" in many


@pytest.mark.parametrize("argv", [
    ["decode", "falcon-7b", "--gpu", "h100", "--batch", "1,8", "--context", "4096"],
    ["decode", "falcon-7b", "--gpu", "h100,b200", "--batch", "1", "--context", "4096"],
    ["prefill", "falcon-7b", "--gpu", "h100,b200", "--prompt-len", "4096"],
])
def test_a_context_past_the_models_positions_is_called_too_long_not_an_empty_pool(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Falcon-7B's 2,048 positions: vLLM refuses a 4,096-token max_model_len outright, though
    its pool holds hundreds of such conversations; the table's cell names the length, not a
    pool that holds none."""
    held = run_json(capsys, "fit", "falcon-7b", "--gpu", "h100", "--max-model-len", "2048")
    assert held["conversations"] > 8  # the pool is far from empty
    report = run_json(capsys, *argv)
    cards = report.get("accelerators") or [report]
    rows = [p for c in cards for p in c.get("points", [c])]
    reasons = {row["expected_none_reason"] for row in rows}
    assert len(reasons) == 1 and "past falcon-7b's 2,048 positions" in reasons.pop()
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "too long" in out
    assert "pool holds 0" not in out and "pool too small" not in out

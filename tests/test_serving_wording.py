"""Wording a serving engineer reads as a verdict: a headline that clears the ridge while its
step stays memory-bound says so; 'fits' next to an engine's refusal says it judges the memory
alone; no target is invented; llama.cpp's headline counts what its printed command runs;
per-GPU and per-sequence sizes say which they are."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

QWEN_8_H200 = ["qwen3-235b-a22b", "--gpu", "h200", "--num-gpus", "8"]


def _memory_vs_arithmetic(text: str, pattern: str) -> tuple[str, str]:
    found = re.search(pattern, text)
    assert found, text
    return found.group(1), found.group(2)


@pytest.mark.parametrize("argv", [
    [*QWEN_8_H200, "--max-model-len", "4000"],
    ["gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "4K"],
])
def test_a_batch_past_the_weights_ridge_whose_step_is_memory_bound_says_so_up_front(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Qwen3-235B-A22B on 8 H200s at 4,000 tokens (and gpt-oss-120b on 2 H100s at 4K): the
    weights every token reads reach the ridge, but the step reads its caches and routed
    experts from memory ~10× longer than it computes. The headline keeps its verdict and says
    the step stays memory-bound, with the same times as the caution that explains it."""
    code, out, _ = run_cli(capsys, "fit", *argv)
    head = out.splitlines()[0]
    assert code == 0 and head.startswith("clears the ridge: ")
    assert "but the MoE step stays memory-bound there: the KV cache reads, private to each " \
        "conversation, add " in head
    said = _memory_vs_arithmetic(head, r"\(([\d.,]+) ms memory vs ([\d.,]+) ms arithmetic")
    caution = _memory_vs_arithmetic(out, r"([\d.,]+) ms of memory against ([\d.,]+) ms of "
                                         "arithmetic at the floor, so it stays memory-bound")
    assert said == caution and float(said[0]) > 5 * float(said[1])
    code, out, _ = run_cli(capsys, "fit", *argv, "--json")
    assert json.loads(out)["verdict"] == "clears the ridge"  # the verdict itself is unchanged


def test_a_step_that_clears_the_ridge_whole_says_nothing_of_memory(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 100 tokens: 1,024 seats of short caches clear the ridge
    step and all, so neither the headline nor a caution says memory-bound."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--max-model-len", "100")
    assert code == 0 and out.startswith("clears the ridge")
    assert "memory-bound" not in out


def test_no_target_given_is_not_called_a_target_of_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The article's Llama-3.1-70B fp8 on one H100 at 2,000 tokens holds none under vLLM 0.32
    (its 0.92 budget): without --target-concurrency the headline says not even one fits; with
    one, it names it."""
    argv = ["fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--max-model-len",
            "2000", "--engine-version", "0.32"]
    code, out, _ = run_cli(capsys, *argv)
    head = out.splitlines()[0]
    assert code == 0 and head.startswith(
        "DOES NOT FIT: not even one conversation of 2,000 tokens fits; the pool is short by ")
    assert "target" not in head
    code, out, _ = run_cli(capsys, *argv, "--target-concurrency", "2")
    assert "0 conversations of 2,000 tokens against a target of 2; " in out.splitlines()[0]


def test_a_target_that_is_met_is_named_in_the_headline(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-405B fp8 on 8 H100s at 8,192 tokens: a target of 32 read "fits, under the
    ridge: 47 conversations …" without the target (a failing one says "against a target of
    64"). The headline now says it is met, with the count --json gives; where vLLM's seats
    (--max-num-seqs) run fewer than the target at once, it says held, not met."""
    argv = ["fit", "llama-3.1-405b", "--gpu", "h100", "--num-gpus", "8", "--weights", "fp8",
            "--max-model-len", "8192"]
    report = json.loads(run_cli(capsys, *argv, "--target-concurrency", "32", "--json")[1])
    held = report["conversations"]
    assert held >= 32 and report["verdict_code"] != "does_not_fit"
    head = run_cli(capsys, *argv, "--target-concurrency", "32")[1].splitlines()[0]
    assert f": {held:,} conversations of 8,192 tokens (target 32 met); " in head
    head = run_cli(capsys, *argv, "--target-concurrency", str(held + 1))[1].splitlines()[0]
    assert head.startswith("DOES NOT FIT") and "met" not in head
    assert f"against a target of {held + 1:,}" in head
    seated = [*argv, "--target-concurrency", "32", "--max-num-seqs", "16"]
    head = run_cli(capsys, *seated)[1].splitlines()[0]
    held = json.loads(run_cli(capsys, *seated, "--json")[1])["conversations"]
    assert f": 16 at once (max_num_seqs 16); the pool holds {held:,} conversations" in head
    assert "; target 32 met only with --max-num-seqs " in head and "held" not in head
    assert "target" not in run_cli(capsys, *argv)[1].splitlines()[0]


def lever_batches(run: dict[str, object]) -> dict[str, int]:
    return {str(lever["name"]): int(lever["engine_max_batch"])
            for lever in run["levers"]}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("argv", "flag"), [
    (["llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--weights", "fp8",
      "--max-num-seqs", "4"], "--max-num-seqs"),
    (["llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--max-running-requests", "4"],
     "--max-running-requests"),
    (["llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--max-num-seqs", "4"],
     "--max_batch_size"),
    (["llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--weights", "q4_k_m",
      "-np", "2"], "-np"),
])
def test_seats_short_of_a_held_target_fit_and_name_the_seats_lever(
        capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    """The memory holds the target but the seats (max_num_seqs or the engine's own name for
    it) run fewer at once: a tuning knob rescues it, so the verdict is not DOES NOT FIT
    (issue #5), and the headline names the seats and what raising them runs, the seats
    lever's own figures from --json."""
    base = ["fit", *argv, "--max-model-len", "8192", "--target-concurrency", "8"]
    run = json.loads(run_cli(capsys, *base, "--json")[1])
    assert run["verdict_code"] != "does_not_fit" and run["fits"]
    assert run["conversations"] >= 8 > run["engine_max_batch"]
    raised = {name: batch for name, batch in lever_batches(run).items()
              if name.startswith(f"{flag} ") or f"({flag} " in name}
    assert len(raised) == 1
    name, batch = next(iter(raised.items()))
    seats = name.split(f"{flag} ")[1].split()[0]
    head = run_cli(capsys, *base)[1].splitlines()[0]
    # not "held": the target is met only with the seats lever, named in the verdict itself
    said = f"{flag} 8" + (f" to {seats}" if int(seats.replace(",", "")) > 8 else "")
    assert f"; target 8 met only with {said}; " in head
    assert "held" not in head and f"{run['engine_max_batch']} at once" in head
    assert batch >= 8 and not head.startswith("DOES NOT FIT")
    assert run["target_met"] is False and run["seats_bind"]
    assert run["target_met_with"] == {"flag": flag, "min_value": 8,
                                      "max_value": int(seats.replace(",", ""))}


def test_a_headline_leads_with_what_runs_at_once_where_the_seats_bind(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-32B on 4 A100-40GBs at 1,024 tokens: the pool holds 310, vLLM's max_num_seqs 256
    runs 256, as decode and utilization say. The headline leads with the 256 and its seats,
    then the pool; the ridge is judged at that batch. A target of 300 is met only with the
    seats lever, which the headline names as the condition and --json gives."""
    argv = ["fit", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
            "--max-model-len", "1024"]
    run = json.loads(run_cli(capsys, *argv, "--json")[1])
    batch, held = run["engine_max_batch"], run["conversations"]
    assert batch == run["max_num_seqs"] < held and run["seats_bind"]
    assert run["target_met"] is None and run["target_met_with"] is None
    head = run_cli(capsys, *argv)[1].splitlines()[0]
    assert head.startswith(f"{run['verdict']}: {batch:,} at once (max_num_seqs {batch:,}); "
                           f"the pool holds {held:,} conversations of 1,024 tokens; ")
    assert f"at a batch of {batch:,}," in head and run["stage_batch"] == batch
    target = (batch + held) // 2  # the pool holds it, the seats run fewer
    aimed = json.loads(run_cli(capsys, *argv, "--target-concurrency", str(target),
                               "--json")[1])
    seats = aimed["target_met_with"]
    assert aimed["target_met"] is False and seats["min_value"] == target < seats["max_value"]
    head = run_cli(capsys, *argv, "--target-concurrency", str(target))[1].splitlines()[0]
    assert (f"the pool holds {held:,} conversations of 1,024 tokens; target {target:,} met "
            f"only with --max-num-seqs {target:,} to {seats['max_value']:,}; ") in head
    assert "held" not in head
    for value in (seats["min_value"], seats["max_value"]):  # each end of the range runs it
        raised = json.loads(run_cli(capsys, *argv, "--target-concurrency", str(target),
                                    "--max-num-seqs", str(value), "--json")[1])
        assert raised["target_met"] is True and raised["engine_max_batch"] >= target
    met = json.loads(run_cli(capsys, *argv, "--target-concurrency", str(batch), "--json")[1])
    assert met["target_met"] is True and met["target_met_with"] is None


def test_the_side_by_side_table_names_a_met_target_as_the_headline_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B fp8 on 2 H100s or 2 H200s at 8,192 tokens against a target of 32: the
    H100s hold fewer (does not fit), the H200s meet it, and the table's verdict says so in
    the one-card headline's words; with --max-num-seqs 16 both hold it and the table says
    what the seats run, as each headline does."""
    argv = ["fit", "llama-3.1-70b", "--num-gpus", "2", "--weights", "fp8", "--max-model-len",
            "8192", "--target-concurrency", "32"]

    def verdicts(*extra: str) -> dict[str, str]:
        lines = run_cli(capsys, *argv, "--gpu", "h100,h200", *extra)[1].splitlines()
        return {line.split("  ")[0]: line for line in lines if line.startswith("2 x h")}

    def headline(gpu: str, *extra: str) -> str:
        head = run_cli(capsys, *argv, "--gpu", gpu, *extra)[1].splitlines()[0]
        return head[head.index(" ("):head.index(");") + 1] if " (target" in head else ""

    rows = verdicts()
    assert rows["2 x h100-sxm"].endswith("  does not fit") and headline("h100") == ""
    assert rows["2 x h200-sxm"].endswith("fits, under the ridge (target 32 met)")
    assert headline("h200") == " (target 32 met)"
    rows = verdicts("--max-num-seqs", "16")
    for gpu in ("h100", "h200"):
        run = json.loads(run_cli(capsys, *argv, "--gpu", gpu, "--max-num-seqs", "16",
                                 "--json")[1])
        most = run["target_met_with"]["max_value"]
        batch = next(lv["engine_max_batch"] for lv in run["levers"]
                     if lv["name"] == f"--max-num-seqs {most:,}")
        # the table: not met as launched, with the lever the headline names as its condition
        assert rows[f"2 x {gpu}-sxm"].endswith(
            "fits, under the ridge (target 32 not met as launched: --max-num-seqs 16 runs 16 "
            f"at once; --max-num-seqs {most:,} runs {batch:,})")
        head = run_cli(capsys, *argv, "--gpu", gpu, "--max-num-seqs", "16")[1].splitlines()[0]
        said = "--max-num-seqs 32" + (f" to {most:,}" if most > 32 else "")
        assert f"; target 32 met only with {said}; " in head


def test_no_gpu_count_holds_one_conversation_says_one_conversation(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-405B at 128K on RTX 3060s: no count of them holds even one, and the lever
    says so without a made-up target."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-405b", "--gpu", "rtx-3060",
                           "--max-model-len", "131072")
    levers = next(line for line in out.splitlines() if line.startswith("levers:"))
    assert code == 0 and "GPUs of rtx-3060 hold one conversation at this context" in levers


def test_a_table_with_one_point_out_agrees_in_number(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B at fp8 on one H100: 40,000 tokens are past the memory, and vLLM would
    not start for the 2,000 either (its pool at the default max_model_len holds less than one
    such sequence): the first line says neither prompt runs, then the memory's shortfall;
    the lines under the table point to it rather than repeat it. With one prompt
    past the memory (Llama-3.1-8B at 800,000 tokens), the count agrees in number with one."""
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-70b", "--gpu", "h100", "--weights",
                           "fp8", "--prompt-len", "2000,40000")
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("DOES NOT FIT on vLLM 0.34 for any of the 2 prompts: "
                                          "vLLM would refuse to start at its default")
    assert "; and 40,000 tokens does not fit in memory: 72.7 GB of weights + " in first
    assert "2,000 tokens: the first line's refusal" in out
    assert out.count("would refuse to start") == 1
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                           "2000,800000")
    assert code == 0 and out.startswith("1 of 2 prompts does not fit; the longest, 800,000")


def test_llamacpps_headline_counts_what_its_printed_command_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B Q4_K_M on an RTX 4090 at 8,192 tokens: the memory holds 18 such
    conversations, but `llama-server -c 32768 -np 4` runs 4 (-c is shared by the -np slots):
    the headline says both, the command's first."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp", "--weights", "q4_k_m", "--max-model-len", "8192")
    head = out.splitlines()[0]
    launch = re.search(r"llama-server -c (\d+) -np (\d+)", out)
    held = re.search(r"conversations of 8,192 tokens at once: min\((\d+) conversations", out)
    assert code == 0 and launch and held
    cells, slots = int(launch.group(1)), int(launch.group(2))
    assert cells == slots * 8192  # the command's cells hold its slots' conversations
    assert f"the memory holds {held.group(1)} conversations of 8,192 tokens" in head
    assert f"the llama-server command below runs {slots} at once (-np {slots})" in head
    assert int(held.group(1)) > slots


def test_decode_says_its_fit_judges_the_memory_not_the_engine(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first example: batch 1 fits the H100's memory but vLLM would refuse to
    start. The table's first line leads with the refusal (neither point runs), then batch 32's
    memory shortfall; the column and the single point's line say they judge the memory alone."""
    argv = ["decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--context",
            "2000"]
    code, out, _ = run_cli(capsys, *argv, "--batch", "1,32")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("DOES NOT FIT on vLLM 0.34 at any of the 2 points: ")
    assert "would refuse to start" in lines[0]
    assert "; and batch 32 at 2,000 tokens does not fit in memory: " in lines[0]
    assert lines[2].endswith("bound  fits in memory")
    _, one, _ = run_cli(capsys, *argv, "--batch", "1")  # the refusal, as the point alone says it
    assert one.splitlines()[0].split(" (`ridgeline fit`")[0].removeprefix(
        "DOES NOT FIT on vLLM 0.34: ") in lines[0]
    code, out, _ = run_cli(capsys, *argv, "--batch", "1")
    fit = next(line for line in out.splitlines() if "73.3 GB of weights and KV cache" in line)
    assert fit.startswith("  fits in memory only: ") and "vLLM would not run it" in fit
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1",
                           "--context", "2000")
    assert "  fits: " in out and "fits in memory only" not in out  # one the engine runs


def test_kv_says_a_split_sequences_size_is_over_its_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s at 32K: the per-sequence figure is the eight GPUs' total, the
    MLA latent whole on each; kv says so and gives one GPU's share, an eighth of it."""
    code, out, _ = run_cli(capsys, "kv", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--context", "32k")
    total = re.search(r"per sequence at 32,000: [\d.,]+ GB \(([\d.]+) GiB\) over 8 GPUs, "
                      r"incl\. the latent's replication ×8\n  [\d.]+ GB \(([\d.]+) GiB\) on each GPU",
                      out)
    assert code == 0 and total, out
    assert float(total.group(1)) / 8 == pytest.approx(float(total.group(2)), abs=1e-3)


def test_fits_conversation_column_is_per_gpu_and_agrees_with_one_engines_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "gpt-oss-120b", "--gpu", "h100", "--num-gpus", "2", "--max-model-len", "32K"]
    code, table, _ = run_cli(capsys, *argv, "--engine", "vllm,sglang")
    assert code == 0 and "GiB/conv/GPU" in table
    row = next(line.split() for line in table.splitlines() if line.startswith("vllm "))
    code, one, _ = run_cli(capsys, *argv, "--engine", "vllm")
    assert f"takes {row[3]} GiB per GPU" in one


def test_a_decode_table_none_of_whose_points_fits_says_so_not_only_of_its_worst(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-3-27B in bf16 on one L40S: 54 GB of weights on a 47.6 GB card, so batch 1 fails
    as surely as batch 16. The first line names every point and says the weights alone are
    past the memory, rather than reading as if only batch 16 were too big; with room for the
    weights it names the points but claims nothing of them."""
    code, out, err = run_cli(capsys, "decode", "gemma-3-27b", "--gpu", "l40s", "--batch",
                             "1,16", "--context", "32k", "--json")
    assert code == 0, err
    points = json.loads(out)["points"]
    assert not any(p["fits"] for p in points)
    assert all(p["weight_bytes"] > p["capacity_bytes"] for p in points)
    _, text, _ = run_cli(capsys, "decode", "gemma-3-27b", "--gpu", "l40s", "--batch", "1,16",
                         "--context", "32k")
    first = text.splitlines()[0]
    assert first.startswith(f"DOES NOT FIT at any of the {len(points)} points; the worst, "
                            "batch 16 at 32,000 tokens: ")
    assert first.endswith(f"the weights alone, {points[0]['weight_bytes'] / 1e9:,.1f} GB, "
                          "exceed the memory at any batch")
    _, big, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch",
                        "300,400", "--context", "8k")
    assert big.startswith("DOES NOT FIT at any of the 2 points; the worst, batch 400 at ")
    assert "weights alone" not in big.splitlines()[0]


def test_a_decode_table_counts_the_points_the_engine_refuses_as_not_running(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 8,000 tokens: batch 62 fits the memory but vLLM's pool runs
    at most 60 such sequences; batch 66 is past the memory. The first line counts both, the
    pool's refusal first, rather than '1 of 3 points does not fit' as if batch 62 ran."""
    argv = ["decode", "llama-3.1-8b", "--gpu", "h100", "--context", "8000", "--batch"]
    code, out, _ = run_cli(capsys, *argv, "1,62,66", "--json")
    points = json.loads(out)["points"]
    assert code == 0 and [p["engine_runs"] for p in points] == [True, False, False]
    assert points[1]["fits"] and not points[2]["fits"]
    _, text, _ = run_cli(capsys, *argv, "1,62,66")
    first = text.splitlines()[0]
    assert first.startswith("2 of 3 points do not run on vLLM 0.34: vLLM cannot run a batch of "
                            "62 at 8,000 tokens of context")
    assert first.endswith("; and batch 66 at 8,000 tokens does not fit in memory: 16.1 GB of "
                          "weights + 69.2 GB of KV cache = 85.3 GB > 85.0 GB of memory, short by "
                          "0.2 GB")
    _, none, _ = run_cli(capsys, *argv, "62,66")
    assert none.startswith("DOES NOT RUN on vLLM 0.34 at any of the 2 points: ")


def test_a_batch_past_max_num_seqs_blames_the_seat_limit_not_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 at 4,000 tokens with --max-num-seqs 16: fit's pool holds over
    a hundred such conversations, and max_num_seqs caps the batch at 16. Decode's refusal of
    batch 32 names the cap; it once said the KV pool ran at most 16, which fit contradicts."""
    settings = ("llama-3.1-8b", "--gpu", "h100", "--max-num-seqs", "16")
    code, out, err = run_cli(capsys, "fit", *settings, "--max-model-len", "4k", "--json")
    assert code == 0, err
    fit = json.loads(out)
    assert fit["engine_max_batch"] == 16 < fit["conversations"]
    _, out, _ = run_cli(capsys, "decode", *settings, "--batch", "32", "--context", "4k",
                        "--json")
    reason = json.loads(out)["points"][0]["expected_none_reason"]
    assert "its max_num_seqs lets at most 16 sequences run at once" in reason
    assert "KV pool runs at most" not in reason
    _, text, _ = run_cli(capsys, "decode", *settings, "--batch", "32", "--context", "4k")
    assert "runs at most 16 sequences at 4,000 tokens of context, capped by max_num_seqs" in text
    _, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4k",
                        "--json")
    _, free, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "32",
                         "--context", "4k")
    held = json.loads(out)["engine_max_batch"]
    assert f"KV pool (vllm serve's defaults) runs at most {held} " in free
    assert "capped by" not in free


@pytest.mark.parametrize("batch", [1, 4])
def test_prefills_heading_counts_its_prompts_in_words_that_agree(
        capsys: pytest.CaptureFixture[str], batch: int) -> None:
    """'4 x 2,000-token prompt' read as a typo; the heading agrees with the count it gives."""
    code, out, err = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                             "2000", "--batch", str(batch))
    assert code == 0, err
    noun = "prompt" if batch == 1 else "prompts"
    assert f"prefill floor, {batch} x 2,000-token {noun}:" in out


def test_a_fit_trtllm_trims_to_its_pool_says_the_engine_starts_as_simulate_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B in fp8 on one H100 under trtllm holds no 131,072-token conversation,
    but TensorRT-LLM starts, reducing max_seq_len to its pool (capacity.start_trim_caution,
    which simulate prints and plan's launch line relies on): fit's headline says so, with
    the context called the engine's default where fit defaulted it, and as given where not."""
    from dataclasses import replace

    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.capacity import start_trim_caution
    from ridgeline.memory import EngineSettings

    argv = ["fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--engine", "trtllm"]
    code, out, _ = run_cli(capsys, *argv)
    head = next(x for x in out.splitlines() if x.startswith("DOES NOT FIT"))
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                           weights="fp8", engine="trtllm")
    trim = start_trim_caution(dep, EngineSettings(), None)
    assert code == 0 and "its default, the model's context" in trim
    assert head.endswith(f"; {trim}")
    code, out, _ = run_cli(capsys, *argv, "--max-model-len", "65536")
    given = start_trim_caution(dep, replace(EngineSettings(), max_model_len=65536), 65536)
    assert "(as given)" in given and out.splitlines()[0].endswith(f"; {given}")
    # vLLM refuses to start there instead, and says that, not a trim
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8")
    assert "vLLM refuses to start" in out and "reducing it" not in out


def test_trtllms_shortfall_names_the_memory_and_the_pool_apart(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's pool is 0.9 of the memory left: Llama-3.1-70B on 4 x H100 at 32K, 64
    wanted, 16 held (40.7 GiB, 2.5 GiB each): the pool is short by 160 − 40.7 = 119.3 GiB, the
    memory by that ÷ 0.9 = 132.6 GiB; the headline had called the 132.6 the pool's."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                           "--engine", "trtllm", "--max-model-len", "32K",
                           "--target-concurrency", "64")
    head = out.splitlines()[0]
    assert code == 0
    assert head.endswith("the memory is short by 132.6 GiB per GPU (the pool, 0.9 of what is "
                         "left, by 119.3 GiB)")


def test_a_mac_that_holds_no_conversation_is_pointed_at_a_larger_mac_not_more_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode refuses two Apple GPUs (Metal runs one device), so fit's lever names the Mac
    with the least memory that holds the conversation; fit there holds it, and every smaller
    Mac larger than the first does not."""
    from ridgeline.hardware import catalog

    argv = ["llama-3.1-70b", "--engine", "llama.cpp", "--weights", "q4_k_m",
            "--max-model-len", "131072"]
    code, out, _ = run_cli(capsys, "fit", *argv, "--gpu", "apple-m4-max-32c")
    levers = next(line for line in out.splitlines() if line.startswith("levers:"))
    assert code == 0 and "GPUs of" not in levers
    named = re.search(r"a Mac with more memory: (\S+) \(", levers)
    assert named is not None
    code, _, err = run_cli(capsys, "decode", *argv[:5], "--gpu", "apple-m4-max-32c",
                           "--num-gpus", "2", "--context", "131072")
    assert code == 2 and "one Apple-silicon GPU" in err
    held = {}
    macs = catalog()
    for mac in sorted((a for a in macs.values() if a.vendor == "apple"
                       and macs["apple-m4-max-32c"].memory_bytes < a.memory_bytes
                       <= macs[named.group(1)].memory_bytes), key=lambda a: a.id):
        code, out, _ = run_cli(capsys, "fit", *argv, "--gpu", mac.id, "--json")
        held[mac.id] = json.loads(out)["conversations"] if code == 0 else 0
    assert held[named.group(1)] >= 1
    assert all(n == 0 for mac, n in held.items()
               if macs[mac].memory_bytes < macs[named.group(1)].memory_bytes)


def test_a_prefill_tables_prompt_rate_says_it_is_the_expected_ttfts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The table's prompt tok/s is batch × prompt ÷ the expected TTFT, beside a floor column:
    the note says whose it is (a prompt alone prints the floor's rate and the expected one)."""
    code, out, err = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                             "1000,8000", "--batch", "2", "--json")
    assert code == 0, err
    prompts = json.loads(out)["prompts"]
    code, out, err = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                             "1000,8000", "--batch", "2")
    assert code == 0, err
    for p in prompts:
        rate = p["batch"] * p["prompt_len"] / p["expected"]["time_s"]
        row = next(line for line in out.splitlines() if line.startswith(f"{p['prompt_len']:,} "))
        assert f"{rate:,.0f}" in row.split()
    assert "prompt tok/s: at the expected TTFT" in out


@pytest.mark.parametrize(("model", "gpus", "copied"), [
    ("deepseek-v3", "8", "the latent's"), ("llama-3.1-70b", "16", "the KV heads'")])
def test_kv_names_what_tensor_parallelism_copies(
        capsys: pytest.CaptureFixture[str], model: str, gpus: str, copied: str) -> None:
    """MLA caches one latent and no KV heads: its copies on every rank are the latent's;
    Llama-3.1-70B's 8 KV heads on 16 GPUs are the KV heads' (×16 ÷ 8 = 2)."""
    code, out, err = run_cli(capsys, "kv", model, "--gpu", "h100" if gpus == "16" else "h200",
                             "--num-gpus", gpus, "--context", "8k", "--json")
    assert code == 0, err
    times = json.loads(out)["tp_replication"]
    code, out, err = run_cli(capsys, "kv", model, "--gpu", "h100" if gpus == "16" else "h200",
                             "--num-gpus", gpus, "--context", "8k")
    assert code == 0, err
    assert f"incl. {copied} replication ×{times:g}" in out
    assert "KV-head replication" not in out


def test_a_headline_past_the_weights_ridge_names_what_keeps_the_step_on_memory(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Falcon-7B on an A10 at 2,000 tokens: a batch of 256 takes the weights' matmuls past
    the ridge (209), but the 256 private caches' 4.2 GB, 7.0 ms at the A10's 600 GB/s, keep
    the step on memory (31.4 ms against 30.7): the headline says which clears the ridge and
    what does not, rather than that the batch both reaches the ridge and stays memory-bound
    (vLLM 0.32's pool)."""
    from ridgeline.hardware import resolve_accelerator

    code, out, _ = run_cli(capsys, "fit", "falcon-7b", "--gpu", "a10", "--max-model-len", "2k",
                           "--engine-version", "0.32")
    head = out.splitlines()[0]
    assert code == 0 and head == (
        "clears the ridge: 256 at once (max_num_seqs 256); the pool holds 346 conversations "
        "of 2,000 tokens; the weights' matmuls clear the ridge (209) at a batch of 256, but "
        "the step stays memory-bound there: the KV cache reads, private to each conversation, "
        "add 7.0 ms (31.4 ms memory vs 30.7 ms arithmetic; caution below)")
    kv = re.search(r"read ([\d.]+) GB of KV cache beside", out)
    assert kv, out
    bandwidth = resolve_accelerator("a10").memory_bandwidth_bytes_per_s
    assert float(kv.group(1)) * 1e9 / bandwidth * 1e3 == pytest.approx(7.0, abs=0.1)


def test_a_target_the_seats_cap_says_so_on_the_search_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an H100 with a target of 10,000: the pool holds them at 32 tokens
    (vLLM 0.32's blocks of 16; 0.34's of 64 hold no 10,000), but vLLM's 1,024 seats run 1,024
    at once; the first line says so (as the caution does) instead of calling 10,000 'at
    once'. A target within the seats keeps 'fit at once'."""
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--target-concurrency", "10000", "--engine-version", "0.32")
    assert code == 0 and out.splitlines()[0] == (
        "longest context at which 10,000 conversations fit in the pool: 32 tokens, but vLLM "
        "runs at most 1,024 at once (max_num_seqs): raise --max-num-seqs")
    assert "caution: the pool holds the 10,000 conversations, but at most 1,024 run at once" \
        in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                           "--target-concurrency", "100")
    assert out.splitlines()[0].startswith("longest context at which 100 conversations fit at "
                                          "once: ")


def test_a_small_total_rate_prints_at_the_per_user_precision(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-70B Q4_K_M on an M1 Max at batch 1: the floor's 9.5 tok/s per user is its
    total too, so the total reads 9.5, not 9; the expectation's 4.7 likewise."""
    code, out, _ = run_cli(capsys, "decode", "llama-3-70b", "--gpu", "apple-m1-max-32c",
                           "--weights", "q4_k_m", "--batch", "1", "--context", "128")
    assert code == 0 and "  per user   9.5 tok/s (100% of batch 1)" in out
    assert "  aggregate  9.5 tok/s (1.0x batch 1)" in out
    assert "4.7 tok/s per user, 4.7 in total" in out


def test_fits_zero_at_a_refused_length_says_why_it_is_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-13B at 16,384 tokens on an H100 under vLLM 0.2.5: the length is past its
    4,096 positions, refused on line 1; the pool's 58,880 tokens would hold 3 such
    conversations, so the arithmetic line says its 0 is the refusal's, not the pool's."""
    code, out, _ = run_cli(capsys, "fit", "llama-2-13b", "--gpu", "h100", "--engine-version",
                           "0.2.5", "--max-model-len", "16384")
    assert code == 0 and out.startswith("DOES NOT FIT: vllm refuses --max-model-len 16,384")
    tokens = re.search(r"holds ([\d,]+) tokens in", out)
    assert tokens, out
    held = int(tokens.group(1).replace(",", "")) // 16384
    assert held == 3 and (
        "conversations of 16,384 tokens at once: 0, as the engine serves none past "
        "llama-2-13b's 4,096 positions (max_position_embeddings; line 1); the pool alone "
        f"would hold {held}") in out
    assert "min(0 conversations" not in out


def test_a_small_per_user_share_never_prints_as_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.1-8b at batch 100,000 on an H100 keeps each user at 0.3 % of batch 1's speed:
    it had printed "each user at 0% of batch 1's speed"."""
    argv = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "100000", "--context", "10")
    code, data, _ = run_cli(capsys, *argv, "--json")
    share = json.loads(data)["points"][0]["floor_per_user_vs_batch_1"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and 0 < share < 0.005  # a whole percent rounds it to 0
    shown = out.split("each user at ")[1].split("%")[0]
    assert float(shown) > 0 and float(shown) == pytest.approx(share * 100, abs=0.05)

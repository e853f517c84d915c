"""Real vLLM and SGLang launch lines pasted whole (recipes, InferenceMAX, the SGLang cookbook):
vLLM's underscore spellings read as vllm serve reads them, an unknown flag after --model-path
named as a flag, flags that change the step time alone noted by fit and cautioned by the
commands that price a step, SGLang's --enable-ep-moe read as its expert parallelism, and a
refusal that names the drafter flags the user typed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")


def _ok(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    # its notes are stderr's, which each test reads there
    assert data.pop("notes") == [line.removeprefix("ridgeline: note: ") for line in
                                 err.splitlines() if line.startswith("ridgeline: note: ")]
    return data, err


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out and "Traceback" not in err, (argv, out, err)
    assert len(err.strip().splitlines()) == 1
    return err


@pytest.mark.parametrize(("underscored", "dashed"), [
    (["--enable_expert_parallel"], ["--enable-expert-parallel"]),
    (["--max_model_len=4096"], ["--max-model-len=4096"]),
    (["--gpu_memory_utilization=0.8"], ["--gpu-memory-utilization=0.8"]),
    (["--max_num_seqs", "64"], ["--max-num-seqs", "64"]),
    (["--kv_cache_dtype", "fp8"], ["--kv-cache-dtype", "fp8"]),
    (["--enforce_eager"], ["--enforce-eager"]),
    (["--block_size=32"], ["--block-size=32"])])
def test_vllm_underscore_spellings_read_as_vllm_serve_reads_them(
        capsys: pytest.CaptureFixture[str], underscored: list[str], dashed: list[str]) -> None:
    """vllm serve's FlexibleArgumentParser turns a flag's underscores into dashes: the
    recipes' --enable_expert_parallel and --max_model_len=8192 size what the dashed flags
    size, with no note."""
    # the case's own length, where it sets one: a flag given twice with two values is refused
    length = () if any("max_model_len" in word for word in underscored) else (
        "--max-model-len", "8192")
    model = ("fit", "qwen3-30b-a3b", "--gpu", "h100", *length, "--tensor-parallel-size", "2")
    pasted, err = _ok(capsys, *model, *underscored)
    assert pasted == _ok(capsys, *model, *dashed)[0]
    assert "ignored" not in err and "unrecognized" not in err


def test_another_engines_underscore_flag_keeps_its_meaning_and_sglang_gets_no_vllm_reading(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's --max_batch_size is its own flag, not read through vLLM's spelling;
    under SGLang, whose parser turns no underscore into a dash, --max_num_seqs stays
    unrecognized."""
    trt = ("--engine", "trtllm", "--max_batch_size", "64")
    assert _ok(capsys, *FIT, *trt)[0]["conversations"] == \
        _ok(capsys, *FIT, "--engine", "trtllm", "--max-num-seqs", "64")[0]["conversations"]
    from ridgeline.cli_config_file import vllm_spelling

    err = _refused(capsys, *FIT, "--engine", "sglang", "--max_num_seqs", "64")
    assert "unrecognized arguments: --max_num_seqs" in err
    assert vllm_spelling("--compilation_config.pass_config.x") == \
        "--compilation-config.pass_config.x"


@pytest.mark.parametrize("pasted", [
    ["--model-path", "deepseek-ai/DeepSeek-R1", "--engine", "sglang", "--tp", "8",
     "--no-such-flag", "1"],
    ["--model", "deepseek-ai/DeepSeek-R1", "--tensor-parallel-size", "8", "--no-such-flag"]])
def test_an_unknown_flag_after_model_path_is_named_as_a_flag_not_a_second_model(
        capsys: pytest.CaptureFixture[str], pasted: list[str]) -> None:
    err = _refused(capsys, "fit", *pasted, "--gpu", "h200")
    assert "unrecognized arguments: --no-such-flag" in err
    assert "given twice" not in err and "as MODEL" not in err


def test_a_second_bare_model_after_model_path_is_still_given_twice(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, "fit", "--model-path", "deepseek-v3", "--gpu", "h200", "llama-3.1-8b")
    assert "the model is given twice: deepseek-v3 by --model-path" in err


def test_sglang_watchdog_and_log_interval_after_model_path_are_noted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """InferenceMAX's SGLang line: --decode-log-interval 1 and --watchdog-timeout 600 change
    neither memory nor speed; fit notes them and sizes what the line without them sizes."""
    line = ("fit", "--model-path", "deepseek-v3", "--gpu", "h200", "--engine", "sglang",
            "--tp", "8", "--max-model-len", "8192")
    pasted, err = _ok(capsys, *line, "--decode-log-interval", "1", "--watchdog-timeout", "600")
    assert pasted == _ok(capsys, *line)[0]
    assert "ignored --decode-log-interval 1, --watchdog-timeout 600 (they change neither" in err


def test_speed_only_flags_are_noted_by_fit_and_cautioned_by_simulate(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--stream-interval and --attention-backend (the official GPT-OSS recipes) change the
    step time, not the memory: fit sizes the line without them and names them in its note;
    simulate prices without them and says so in one caution each."""
    speed = ("--stream-interval", "20", "--attention-backend", "FLASHINFER")
    pasted, err = _ok(capsys, *FIT, *speed)
    assert pasted == _ok(capsys, *FIT)[0]
    assert "ignored --stream-interval 20, --attention-backend FLASHINFER (they change the " \
           "step time, not the memory fit sizes)" in err
    sim = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "20")
    report, err = _ok(capsys, *sim, *speed)
    plain = _ok(capsys, *sim)[0]
    before = plain.pop("cautions")
    said = [c for c in report.pop("cautions") if c not in before]
    assert [c.split(" is not priced: ")[0] for c in said] == \
        ["--stream-interval 20", "--attention-backend FLASHINFER"]
    assert report == plain and "note" not in err


def test_a_speed_only_flag_of_another_engine_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, *FIT, "--schedule-conservativeness", "0.3")
    assert "--schedule-conservativeness is SGLang's; vllm has no such flag" in err


def test_max_seq_len_to_capture_is_noted_on_v1_and_refused_on_v0_with_its_own_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    """V1 never reads it (only V0's model runner did): noted; on a V0 release it changes the
    graphs, and the refusal says that, not chunked prefill's reason."""
    pasted, err = _ok(capsys, *FIT, "--max-seq-len-to-capture", "8192")
    assert pasted == _ok(capsys, *FIT)[0] and "ignored --max-seq-len-to-capture 8192 (" in err
    err = _refused(capsys, *FIT, "--max-seq-len-to-capture", "8192", "--engine-version", "0.7.3")
    assert "V0 engine" in err and "CUDA graph" in err and "chunks" not in err


def test_max_num_partial_prefills_is_refused_with_its_reason(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, *FIT, "--max-num-partial-prefills", "4")
    assert "--max-num-partial-prefills is not modelled: vLLM's V1 engine has no concurrent " \
           "partial prefills" in err


def test_sglang_enable_ep_moe_is_its_expert_parallelism(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang <= 0.4's --enable-ep-moe sets ep_size = tp_size: decode prices what
    --enable-expert-parallel (ep = every GPU) prices."""
    line = ("decode", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8",
            "--batch", "32", "--context", "4096")
    switch = _ok(capsys, *line, "--enable-ep-moe")[0]
    assert switch == _ok(capsys, *line, "--enable-expert-parallel")[0]
    assert switch != _ok(capsys, *line)[0]


def test_vllm_pass_config_and_custom_ops_are_named_in_the_note(
        capsys: pytest.CaptureFixture[str]) -> None:
    pasted, err = _ok(capsys, *FIT, "-cc.pass_config.fuse_norm_quant=true")
    assert pasted == _ok(capsys, *FIT)[0]
    assert "ignored -cc's pass_config (" in err
    err = _ok(capsys, *FIT, "--compilation-config", '{"custom_ops": ["+rms_norm"]}')[1]
    assert "ignored --compilation-config's custom_ops (" in err


def test_the_eagle_with_dp_refusal_names_the_drafter_flags_typed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The cookbook's DSv3 latency line (EAGLE with --dp 8): the refusal names the SGLang
    flags the user gave, not ridgeline's --spec-tokens."""
    err = _refused(capsys, "simulate", "deepseek-v3", "--gpu", "h200", "--engine", "sglang",
                   "--tp", "8", "--dp", "8", "--enable-dp-attention",
                   "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                   "--rate", "4", "--num-requests", "10")
    assert "drop --speculative-algorithm, --speculative-num-steps" in err
    assert "--spec-tokens" not in err

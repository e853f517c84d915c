"""One flag under two of its spellings with two values is refused, on the command line and
in a config file, and so is one spelling given twice with two values; the same value twice,
a flag that collects its values, or a command-line value over a file's, still runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

PLAN = ("plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
        "--max-gpus", "1", "--json")


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


# a claim about the question asked (its cards), not the checks: the search unsimulated, once
@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_plans_gpu_beside_gpus_naming_other_cards_is_refused_by_both_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(capsys, *PLAN, "--gpu", "h100", "--gpus", "h200")
    assert "--gpu h100" in said and "--gpus h200" in said and "give it once" in said
    one = _json(capsys, *PLAN, "--gpu", "h200", "--gpus", "h200")
    assert one == _json(capsys, *PLAN, "--gpus", "h200")


def test_two_spellings_compare_as_the_flag_reads_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """8k is 8,000 tokens (ridgeline's k), so --context-length 8000 agrees with it and 8192
    does not."""
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    agreed = _json(capsys, *base, "--max-model-len", "8k", "--context-length", "8000")
    assert agreed == _json(capsys, *base, "--max-model-len", "8000")
    said = _refused(capsys, *base, "--max-model-len", "8k", "--context-length=8192")
    assert "--max-model-len 8k" in said and "--context-length 8192" in said
    said = _refused(capsys, *base, "--kv-dtype", "fp8", "--kv-cache-dtype", "bf16")
    assert "--kv-cache-dtype bf16" in said


@pytest.mark.parametrize("argv", [
    ("roofline", "--gpu", "h100", "--gpu", "a100"),
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--batch", "16"),
    ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--engine", "sglang"),
    ("fit", "llama-3.1-8b", "--gpu", "h100", "--weights", "fp8", "--weights=bf16"),
    ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096", "--max-model-len",
     "8192"),
    ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--rate", "4"),
])
def test_the_same_spelling_twice_with_different_values_is_refused(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """argparse would keep the last and drop the first without a word (roofline would show
    the A100 alone, where --gpu h100,a100 was meant)."""
    flag = next(word.partition("=")[0] for word in argv[::-1] if word.startswith("--"))
    said = _refused(capsys, *argv)
    assert f"{flag} is given twice with different values" in said and "give it once" in said


def test_the_same_value_twice_runs_and_a_second_card_is_offered_side_by_side(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    twice = _json(capsys, *base, "--max-model-len", "8192", "--max-model-len", "8192")
    assert twice == _json(capsys, *base, "--max-model-len", "8192")
    card = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--gpu", "H100", "--json")
    assert card == _json(capsys, *base)
    said = _refused(capsys, "roofline", "--gpu", "h100", "--gpu", "a100")
    assert said.rstrip().endswith("for both side by side, --gpu h100,a100")


def test_a_flag_that_collects_its_values_is_repeated_as_it_should_be(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--override-kv appends: two keys are two overrides, not one flag given twice."""
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine",
                             "llama.cpp", "--max-model-len", "8192", "--override-kv",
                             "llama.context_length=int:8192", "--override-kv",
                             "llama.block_count=int:32")
    assert code == 0 and "fits" in out and not err


def test_a_config_file_setting_one_flag_under_two_keys_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    both = tmp_path / "serve.yaml"
    both.write_text("tensor_parallel_size: 4\ntp: 8\n")
    said = _refused(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--config", str(both))
    assert "tensor_parallel_size and tp in " in said and "serve.yaml set one flag" in said
    same = tmp_path / "same.yaml"
    same.write_text("tensor_parallel_size: 4\ntp: 4\nmax_model_len: 8192\n")
    read = _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--config", str(same),
                 "--json")
    assert read == _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4",
                         "--max-model-len", "8192", "--json")


def test_the_command_line_still_overrides_a_config_files_value(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vllm serve's rule: the file's max_model_len gives way to the typed one, no refusal."""
    conf = tmp_path / "serve.yaml"
    conf.write_text("max_model_len: 4096\n")
    read = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--config", str(conf),
                 "--context-length", "8192", "--json")
    assert read == _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100",
                         "--max-model-len", "8192", "--json")


def test_every_value_given_is_compared_with_the_first(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-model-len 8k --context-length 8k --max-model-len 4k would run at 4k, the 8k
    typed first dropped without a word; a spelling repeated to agree with the others runs,
    and one repeated to change its mind is refused, for the GPU count as for any flag."""
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    said = _refused(capsys, *base, "--max-model-len", "8k", "--context-length", "8k",
                    "--max-model-len", "4k")
    assert "--max-model-len is given twice with different values, 8k and 4k" in said
    agreed = _json(capsys, *base, "--max-model-len", "8k", "--context-length", "8k",
                   "--max-model-len", "8000")
    assert agreed == _json(capsys, *base, "--max-model-len", "8k")
    said = _refused(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "8", "--tp", "4",
                    "--num-gpus", "4", "--json")
    assert "--tp (the GPUs in a tensor-parallel group) is given twice with different values, "\
        "8 and 4" in said
    tp4 = _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--tp", "4",
                "--num-gpus", "4", "--json")
    assert tp4 == _json(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--json")


# a claim about the question asked (its cards), not the checks: the search unsimulated, once
@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_one_value_under_each_spelling_is_not_two_values(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The flag keeps the name as typed and reads it later: the card's catalog record, a KV
    dtype without case, a --speculative-config's JSON, so these name one value."""
    card = _json(capsys, *PLAN, "--gpu", "H100", "--gpus", "h100-sxm")
    assert card == _json(capsys, *PLAN, "--gpus", "h100-sxm")
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
    kv = _json(capsys, *base, "--kv-dtype", "FP8", "--kv-cache-dtype", "fp8")
    assert kv == _json(capsys, *base, "--kv-cache-dtype", "fp8")
    drafter = _json(capsys, *base, "--speculative-config",
                    '{"method":"ngram","num_speculative_tokens":3}',
                    "-sc", '{"method": "ngram", "num_speculative_tokens": 3}')
    assert drafter == _json(capsys, *base, "-sc", '{"method": "ngram", "num_speculative_tokens": 3}')


def test_a_value_outside_the_flags_choices_gets_the_flags_own_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "llama.cpp",
                    "--split-mode", "layer", "-sm", "LAYER")
    assert "invalid choice: 'LAYER'" in said and "one flag" not in said


def test_a_config_files_two_keys_compare_as_the_flag_reads_them(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    conf = tmp_path / "serve.yaml"
    conf.write_text("max_model_len: 8000\ncontext_length: 8k\n")
    read = _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--config", str(conf), "--json")
    assert read == _json(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                         "8000", "--json")


def test_sglangs_ep_with_a_size_is_one_flag_with_ep_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's --ep 8 is its --ep-size (ridgeline's bare --ep, vLLM's switch, takes none):
    --ep 8 --ep-size 1 would run at the last, 1, the 8 dropped without a word."""
    base = ("fit", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8", "--json")
    said = _refused(capsys, *base, "--ep", "8", "--ep-size", "1")
    assert "--ep 8 and --ep-size 1" in said
    agreed = _json(capsys, *base, "--ep", "8", "--ep-size", "8")
    assert agreed == _json(capsys, *base, "--ep-size", "8")
    switch = ("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--json")
    assert _json(capsys, *switch, "--ep", "--ep-size", "8") == _json(capsys, *switch, "--ep")


def test_models_is_model_as_hardware_is_the_cards(capsys: pytest.CaptureFixture[str]) -> None:
    """`ridgeline models` was refused ("did you mean model?") beside `hardware`, a plural in
    all but form: it is now the same command, the bundled list or one model."""
    for rest in ([], ["qwen3-32b"]):
        code, listed, err = run_cli(capsys, "model", *rest, "--json")
        assert code == 0, err
        code, again, err = run_cli(capsys, "models", *rest, "--json")
        assert code == 0, err
        assert json.loads(again) == json.loads(listed)

"""Bad input a 2026-12-06 fuzz of every command found: a flag's value written '--' (an empty
list past argparse's type check, an internal error in 120 flags), simulate's -ngl auto on
vLLM, a vision_config's model_type of the wrong kind, a bench result's fractional cap or token
total, a SpecDecoding line's NaN, and an engine --config written as one JSON object. Each: one
line, exit 2 where refused; what is read is read as the engine reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
MODELS = ROOT / "src/ridgeline/data/models"
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, code, out, err)
    lines = [ln for ln in err.splitlines() if not ln.startswith("ridgeline: note")]
    assert len(lines) == 1 and lines[0].startswith("ridgeline: error: "), err
    return lines[0]


# -- a flag's value written '--' ---------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    [*DECODE, "--batch=--"],                                   # a list of counts
    [*DECODE, "--eplb-config=--"],                             # a JSON value
    [*DECODE, "--engine-version=--"],                          # a release
    [*DECODE, "--profile=--"],                                 # a file
    ["roofline", "--gpu", "h100", "--engine=--"],              # a name from a list
    ["kv", "llama-3.1-8b", "--context", "4k", "--kv-cache-dtype=--"],
    ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--window=--"],
    ["evalstats", "--pct-a=--", "--pct-b", "47.56", "--n", "164"],   # a float
    ["amdahl", "--fraction", "0.18", "--speedup=--"],
    ["measure", "--device=--", "-o", "rows.csv", "--dry-run"],
], ids=lambda argv: next(a for a in argv if a.endswith("=--")))
def test_a_flag_given_a_bare_double_dash_is_refused_by_name(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """--batch=-- reached the arithmetic as [] (Python before 3.13 drops the '--' and skips
    the type check): "max() arg is an empty sequence", or an internal error, exit 1."""
    flag = next(a for a in argv if a.endswith("=--")).removesuffix("=--")
    said = refused(capsys, *argv)
    assert f"argument {flag}" in said and "expected a value, got '--'" in said


def test_a_bare_double_dash_still_ends_the_flags_before_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The '--' that ends the flags, MODEL after it, reads as argparse reads it."""
    code, out, err = run_cli(capsys, "decode", "--gpu", "h100", "--batch", "8", "--",
                             "llama-3.1-8b", "--json")
    assert code == 2  # --json came after the '--': a word, not the flag
    code, out, err = run_cli(capsys, "decode", "--gpu", "h100", "--batch", "8", "--json", "--",
                             "llama-3.1-8b")
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"


def test_a_commands_own_flag_after_a_bare_double_dash_is_named_as_such(
        capsys: pytest.CaptureFixture[str]) -> None:
    """decode -- MODEL --gpu h100 was told "--gpu is a flag of `hardware`, `roofline`, …, not
    of `decode`", which takes it."""
    said = refused(capsys, "decode", "--", "llama-3.1-8b", "--gpu", "h100")
    assert "`decode` takes --gpu, but not after a bare '--'" in said
    assert "not of `decode`" not in said
    said = refused(capsys, *DECODE, "--", "--context", "5")
    assert "`decode` takes --context" in said
    # a flag the command lacks keeps its own hint
    assert "is a flag of" in refused(capsys, "roofline", "--gpu", "h100", "--context", "5")


# -- -ngl auto on an engine without --fit ------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "10"],
    ["decode", "llama-3.1-8b", "--gpu", "h100"],
    ["fit", "llama-3.1-8b", "--gpu", "h100"]], ids=lambda argv: argv[0])
@pytest.mark.parametrize("ngl", ["-1", "auto"])
def test_ngl_auto_on_vllm_is_refused_by_every_command(
        capsys: pytest.CaptureFixture[str], command: list[str], ngl: str) -> None:
    """decode and fit refused -ngl auto on vLLM; simulate ran on, every weight on the GPU,
    exit 0, without a word."""
    said = refused(capsys, *command, f"--n-gpu-layers={ngl}")
    assert "-ngl auto is llama.cpp's --fit; vllm keeps every weight on the GPU" in said


# -- a vision_config's model_type --------------------------------------------------------------
@pytest.mark.parametrize("kind", [[], {}, 5])
def test_a_vision_configs_model_type_of_the_wrong_kind_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: object) -> None:
    """Gemma-3's vision_config with model_type [] met a set of names: "unhashable type:
    'list'", an internal error. The top level's was refused already; now the tower's too."""
    config = json.loads((MODELS / "google--gemma-3-4b-it.json").read_text("utf-8"))
    config["vision_config"]["model_type"] = kind
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    said = refused(capsys, "decode", str(tmp_path / "config.json"), "--gpu", "h100")
    assert f"vision_config: model_type must be a string, got {kind!r}" in said


# -- a bench result's counts -------------------------------------------------------------------
def bench_file(tmp_path: Path, **changes: object) -> str:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text("utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), "utf-8")
    return str(path)


OBSERVE = ("--model", "llama-3.1-8b", "--gpu", "h100")


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_concurrency", 0.5, "max_concurrency is 0.5; a cap on the requests in flight is a "
                             "whole number"),
    ("total_input_tokens", 0.5, "total_input_tokens is 0.5; tokens are counted whole"),
    ("total_output_tokens", 1000.25, "total_output_tokens is 1000.25; tokens are counted whole"),
])
def test_a_bench_results_fractional_count_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: float,
        words: str) -> None:
    """max_concurrency 0.5 was read as a batch of 0.5 ("held at most 0 requests in flight");
    total_input_tokens 0.5 as prompts of 0.001 tokens."""
    assert words in refused(capsys, "observe", bench_file(tmp_path, **{key: value}), *OBSERVE)


def test_a_bench_result_without_its_token_totals_leaves_the_context_unknown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A result without total_input_tokens was read as prompts of 0 tokens: the context the
    outputs' alone (128 tokens, "from the source"). Now it is unknown, and said so."""
    def context(path: str) -> tuple[int, str]:
        code, out, err = run_cli(capsys, "observe", path, *OBSERVE, "--json")
        assert code == 0, err
        read = json.loads(out)
        return read["context_len"], read["context_len_source"]

    tokens, source = context(bench_file(tmp_path))  # mean prompt 1,024 + half of 256
    assert tokens == 1024 + 128 and "from the source" in source
    tokens, source = context(bench_file(tmp_path, total_input_tokens=None))
    assert tokens == 2000 and "assumed" in source


# -- a SpecDecoding line's numbers -------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "words"), [
    ("Mean acceptance length: 2.00", "Mean acceptance length: NaN",
     "Mean acceptance length is nan; it must be a verify step's kept tokens"),
    ("Mean acceptance length: 2.00", "Mean acceptance length: inf",
     "Mean acceptance length is inf"),
    ("Mean acceptance length: 2.00", "Mean acceptance length: two",
     "Mean acceptance length reads 'two', not a number"),
    ("Accepted throughput: 30.00", "Accepted throughput: NaN",
     "Accepted throughput is nan; it must be tokens per second"),
])
def test_a_spec_decoding_line_with_a_number_that_is_none_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
        words: str) -> None:
    """'Mean acceptance length: NaN' did not match the number pattern, so the line read as an
    older vLLM's without a mean: left out of the weighting, exit 0, without a word."""
    text = (FIXTURES / "vllm_spec_server.log").read_text("utf-8")
    assert old in text
    path = tmp_path / "server.log"
    path.write_text(text.replace(old, new, 1), "utf-8")
    said = refused(capsys, "observe", str(path), *OBSERVE)
    assert "server.log, line 3: " + words in said


# -- an engine --config written as JSON --------------------------------------------------------
def test_a_config_file_written_as_one_json_object_reads_as_its_yaml_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's --config is YAML, of which a JSON object is one form; its first key had been
    read as '{"max-model-len"': "`ridgeline fit` takes no --{"max-model-len"". """
    as_json, as_yaml = tmp_path / "serve.json", tmp_path / "serve.yaml"
    as_json.write_text('{"max-model-len": 8192,\n "gpu-memory-utilization": 0.8}\n', "utf-8")
    as_yaml.write_text("max-model-len: 8192\ngpu-memory-utilization: 0.8\n", "utf-8")
    answers = []
    for path in (as_json, as_yaml):
        code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--config",
                                 str(path), "--json")
        assert code == 0, err
        answers.append(json.loads(out))
    for answer in answers:  # the file's name is in its notes and cautions
        answer.pop("notes", None), answer.pop("cautions", None)
    assert answers[0] == answers[1]
    assert answers[0]["max_model_len"] == 8192 and answers[0]["reserved_fraction"] == 0.8


@pytest.mark.parametrize(("text", "words"), [
    ('{"max-model-len": 8192,,}', "serve.json:1: opens with '{' but is not a JSON object"),
    ('{"max-model-len": NaN}', "serve.json: NaN is not a value a setting takes"),
    ('{"a": ' * 5000 + "1" + "}" * 5000, "serve.json: nested too deeply to be a config file"),
])
def test_a_config_file_that_opens_a_brace_and_is_no_json_object_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str) -> None:
    path = tmp_path / "serve.json"
    path.write_text(text, "utf-8")
    assert words in refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--config",
                            str(path))

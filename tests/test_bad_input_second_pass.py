"""The bad-input audit's second pass: a point the engine refuses leads with that verdict and
prints no speed, as one that does not fit does; launch flags whose values the engines' own
parsers or configs refuse (from data/launch_flags.json, with sources) are refused in one
line; a bench JSON with prompts of 0 tokens, a junk vLLM version in a log, a file nested
too deeply (named), and "1 layer" said in the singular."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.launch_flags import launch_flags
from tests.conftest import cli_json, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
L8 = ("llama-3.1-8b", "--gpu", "h100")


# --- 1. a point the engine refuses: the verdict leads, and no throughput is printed -------

@pytest.mark.parametrize(("argv", "verdict"), [
    # past the model's 131,072 positions: vLLM refuses the length
    (("decode", *L8, "--context", "200000"), "DOES NOT FIT"),
    # fits the memory raw, but vLLM's pool holds less than one 30,000-token sequence
    (("decode", "llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--context", "30000"),
     "DOES NOT FIT"),
    # max_num_seqs runs 1,024 at once, not 2,000
    (("decode", *L8, "--context", "100", "--batch", "2000"), "DOES NOT RUN AT ONCE"),
    (("prefill", *L8, "--prompt-len", "200000"), "DOES NOT FIT"),
])
def test_a_point_the_engine_refuses_leads_with_the_verdict_and_prints_no_speed(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], verdict: str) -> None:
    report = cli_json(capsys, *argv)
    point = report["points"][0] if "points" in report else report
    assert point["engine_runs"] is False and point["fits"] is True
    # the JSON gives no speed either, the floor's neither, as a point that does not fit
    # gives none; the reason stands beside it
    floors = ("floor_per_user_tok_s", "floor_aggregate_tok_s") if argv[0] == "decode" \
        else ("floor_prompt_tok_s",)
    assert [point[k] for k in floors] == [None] * len(floors) and point["expected_none_reason"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    lines = out.splitlines()
    # the first line, where a deployment that does not fit says DOES NOT FIT, gives the
    # engine's refusal, word for word the JSON's reason
    assert lines[0] == f"{verdict} on vLLM {report['engine_version']}: " \
        f"{point['expected_none_reason']}" + ("" if verdict == "DOES NOT RUN AT ONCE" or
                                               argv[0] == "prefill"
                                               else " (`ridgeline fit` for the breakdown)")
    assert "arithmetic only: vLLM would not run this" in out  # the floor stays, as arithmetic
    assert "tok/s (" not in out and "prompt tok/s" not in out  # no speed, the floor's neither
    speed = "  tok/s      none: " if argv[0] == "decode" else "  throughput none: "
    assert any(line.startswith(speed + "vLLM would not run") for line in lines)
    assert f"expected on vLLM {report['engine_version']}: nothing (first line)" in out


def test_a_table_gives_floor_speeds_only_where_the_engine_runs_the_point(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Six points, one each of runs, runs ≤ 60 (seats), does not fit and too long (past the
    positions): the floor's speeds are null exactly where engine_runs is false, each such
    point with its reason, and its step time kept."""
    points = cli_json(capsys, "decode", *L8, "--context", "8k,200000",
                   "--batch", "1,64,2000")["points"]
    codes = {p["expected_none_code"] for p in points}
    assert {None, "over_engine_pool", "does_not_fit", "engine_runs_none"} <= codes
    for p in points:
        assert (p["floor_per_user_tok_s"] is None) is (p["floor_aggregate_tok_s"] is None) \
            is (not p["engine_runs"]) is bool(p["expected_none_reason"])
        assert p["floor_step_time_s"] > 0


def test_the_refusal_is_said_as_a_deployment_that_does_not_fit_says_its_own(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Weights that do not fit and a length vLLM refuses: both lead with DOES NOT FIT, give
    the step as arithmetic, and have a 'tok/s none' line where a speed would stand."""
    shapes = []
    for argv in (("decode", "llama-3.1-405b", "--gpu", "h100"),
                 ("decode", *L8, "--context", "200000")):
        code, out, _ = run_cli(capsys, *argv)
        lines = out.splitlines()
        assert code == 0
        shapes.append([lines[0].split(":")[0].split(" on ")[0],
                       [line.split()[0] for line in lines[3:6]]])
    assert shapes[0] == shapes[1] == ["DOES NOT FIT", ["step", "reads", "tok/s"]]


def test_a_point_the_engine_runs_has_no_verdict_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", *L8, "--context", "2000")
    assert code == 0 and out.startswith("llama-3.1-8b on 1 x h100-sxm")
    assert "DOES NOT" not in out and "  per user   219.3 tok/s (100% of batch 1)" in out


def test_vllm_allowed_past_the_positions_prices_the_point(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The override the refusal names runs it: then there is no verdict, and a speed."""
    code, out, err = run_cli(capsys, "decode", *L8, "--context", "200000",
                             "--max-model-len", "200000", "--vllm-allow-long-max-model-len", "1")
    assert code == 0, err
    assert "DOES NOT" not in out and "tok/s per user" in out


# --- 2. launch flags: a value the engine refuses is refused, from data with sources -------

def _fit(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    return run_cli(capsys, "fit", *L8, "--max-model-len", "8192", *flags)


@pytest.mark.parametrize(("flags", "words"), [
    (("--scheduling-policy", "nan"), "--scheduling-policy 'nan' is no choice of vLLM's: "
     "it takes fcfs, priority"),
    (("--prefill-attention-backend", "nan", "--engine", "sglang"),
     "--prefill-attention-backend 'nan' is no choice of SGLang's: it takes, in one release "
     "or another, triton"),
    (("--decode-attention-backend", "FA3", "--engine", "sglang"),
     "--decode-attention-backend 'FA3' is no choice of SGLang's"),
    (("--schedule-policy", "nan", "--engine", "sglang"),
     "--schedule-policy 'nan' is no choice of SGLang's"),
    (("--stream-interval", "-1"), "--stream-interval -1 is out of range: vLLM's config takes "
     "1 or more"),
    (("--stream-interval", "0"), "--stream-interval 0 is out of range"),
    # vLLM has no such flag, in any release read: vllm serve stops ('unrecognized arguments')
    (("--prefill-attention-backend", "fa3"), "--prefill-attention-backend is SGLang's; vllm "
     "has no such flag"),
])
def test_a_value_the_engine_refuses_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], words: str) -> None:
    code, out, err = _fit(capsys, *flags)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1 and words in lines[0], err


@pytest.mark.parametrize("flags", [
    ("--scheduling-policy", "priority"),
    ("--prefill-attention-backend", "fa3", "--engine", "sglang"),
    ("--decode-attention-backend", "dsa", "--engine", "sglang"),  # 0.5.14 on
    ("--prefill-attention-backend", "cutlass_mla", "--engine", "sglang"),  # to 0.5.18
    ("--schedule-policy", "routing-key", "--engine", "sglang"),
    ("--stream-interval", "1"),
    ("--stream-interval", "-1", "--engine", "sglang"),  # SGLang's int has no bound
    ("--attention-backend", "anything"),  # vLLM's list moves by release: left unchecked
])
def test_a_value_the_engine_takes_is_still_read_and_named(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]) -> None:
    code, _, err = _fit(capsys, *flags)
    assert code == 0 and f"{flags[0]} {flags[1]}" in err, err


def test_a_bound_from_a_config_file_names_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("stream-interval: 0\n")
    code, _, err = _fit(capsys, "--config", str(config))
    assert code == 2 and f"{config}: stream-interval 0 is out of range" in err


@pytest.mark.parametrize(("text", "said"), [
    ("scheduling-policy: nan\n", "scheduling-policy 'nan' is no choice of vLLM's"),
    ("kv-cache-dtype: fp7\n", "kv-cache-dtype: unknown KV-cache dtype 'fp7'"),
    ("max-num-seqs: -3\n", "max-num-seqs: max_num_seqs must be positive"),
])
def test_a_choice_refused_from_a_config_file_names_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, said: str) -> None:
    """A value the parser refuses names the file and key it came from, as a bound does; the
    same value typed on the command line names the flag alone."""
    config = tmp_path / "serve.yaml"
    config.write_text(text)
    code, _, err = _fit(capsys, "--config", str(config))
    assert code == 2 and f"error: {config}: {said}" in err and len(err.splitlines()) == 1
    key, _, value = text.strip().partition(": ")
    code, _, err = _fit(capsys, f"--{key}", value)
    assert code == 2 and str(config) not in err and f"--{key}" in err


def test_a_choice_refused_on_the_line_beside_a_file_names_the_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The file and the command line both give --scheduling-policy: the error names
    whichever value it refuses, the file's (read first) or the line's."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("scheduling-policy: fcfs\n")
    bad.write_text("scheduling-policy: nan\n")
    code, _, err = _fit(capsys, "--config", str(good), "--scheduling-policy", "xx")
    assert code == 2 and "error: --scheduling-policy 'xx' is no choice" in err
    code, _, err = _fit(capsys, "--config", str(bad), "--scheduling-policy", "fcfs")
    assert code == 2 and f"error: {bad}: scheduling-policy 'nan' is no choice" in err


def test_every_checked_list_and_bound_is_sourced_in_the_data() -> None:
    """Each flag with a choice list or a per-engine least value is named in the data's
    sources for it, so a list is read from a release's parser, not written by hand."""
    from ridgeline.datafiles import load_data

    sources = load_data("launch_flags.json")["_sources"]
    for record in launch_flags():
        name = record.flags[0].lstrip("-")
        if record.choices:  # named by its flag or its config field
            assert f"--{name}" in sources["choices"] or name.replace("-", "_") in \
                sources["choices"], record.flags
        if record.choices_any_release:
            assert len(set(record.choices)) == len(record.choices)
        for engine, _ in record.minimums:
            assert record.flags[0] in sources["minimums"] and engine in record.engines


# --- 3. the small ones --------------------------------------------------------------------

def test_a_bench_json_with_prompts_of_no_tokens_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    data["total_input_tokens"] = 0
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "observe", str(bench), "--model", "llama-3.1-8b",
                             "--gpu", "h100")
    assert code == 2 and not out
    assert err.strip() == (f"ridgeline: error: {bench}: total_input_tokens is 0 over 500 "
                           "completed requests; a prompt holds one token at least")


@pytest.mark.parametrize("word", ["xyz", "", "v0.9"])
def test_a_log_whose_vllm_version_is_no_release_says_so(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, word: str) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(f"INFO 11-29 11:59:00 [api_server.py:1090] vLLM API server version {word}\n"
                   + (FIXTURES / "vllm_server.log").read_text())
    report = cli_json(capsys, "observe", str(log), "--model", "llama-3.1-8b", "--gpu", "h100")
    said = [n for n in report["notes"] if "states vLLM's version as" in n]
    assert len(said) == 1 and repr(word) in said[0] and "not a release number" in said[0]
    plain = tmp_path / "plain.log"
    plain.write_text("INFO 11-29 11:59:00 [api_server.py:1090] vLLM API server version "
                     "0.9.2.dev12+gabc\n" + (FIXTURES / "vllm_server.log").read_text())
    report = cli_json(capsys, "observe", str(plain), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert not any("states vLLM's version" in n for n in report["notes"])


@pytest.mark.parametrize("argv", [
    ("decode", "llama-3.1-8b", "--gpu-file", "{deep}"),
    ("decode", *L8, "--profile", "{deep}"),
    ("kv", "{deep}", "--context", "8k"),
    ("observe", "{deep}", "--model", "llama-3.1-8b", "--gpu", "h100"),
    ("simulate", *L8, "--trace", "{deep}"),
    ("simulate", *L8, "--trace", "{deepl}"),
])
def test_a_file_nested_too_deeply_is_named(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 30000 + "]" * 30000)
    deepl = tmp_path / "deep.jsonl"
    deepl.write_text("[" * 30000 + "]" * 30000 + "\n")
    argv = tuple(a.format(deep=deep, deepl=deepl) for a in argv)
    code, out, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1, err
    named = str(deepl) + ", line 1" if str(deepl) in argv else str(deep)
    assert lines[0] == f"ridgeline: error: {named} is nested too deeply to be a file " \
        "ridgeline reads"


def test_a_layer_pattern_of_one_layer_is_said_in_the_singular(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = json.loads((Path(__file__).parents[1] / "src/ridgeline/data/models/"
                         "openai--gpt-oss-20b.json").read_text())
    config["layer_types"] = config["layer_types"][:1]
    path = tmp_path / "one" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "model", str(path))
    assert code == 2 and "the layer pattern describes 1 layer but num_hidden_layers is 24" in err
    config["layer_types"] = config["layer_types"] * 2
    path.write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "model", str(path))
    assert code == 2 and "describes 2 layers but" in err

"""A launch command pasted whole: the flags that change neither memory nor speed are read and
named in one note, the ones that change what ridgeline does not price are refused naming the
flag; and vllm bench serve's load flags are simulate's (--random-range-ratio, --dataset-name,
--ignore-eos), as is vLLM's MTP drafter (priced as eagle where the checkpoint has MTP layers)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ridgeline.cli_simulate import ranged
from ridgeline.cli_spec import ENGINE_FLAGS
from ridgeline.datafiles import load_data
from ridgeline.launch_flags import LaunchFlag, launch_flags
from tests.conftest import run_cli, same_answer

FIT = ("fit", "openai/gpt-oss-120b", "--gpu", "h100")
SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "40")
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,16")
PREFILL = ("prefill", "llama-3.1-8b", "--gpu", "h100")
DRAFTER_FLAGS = {f for flags, *_ in ENGINE_FLAGS for f in flags}
IGNORED = [r for r in launch_flags() if r.modelled_away]
REFUSED = [r for r in launch_flags() if not r.modelled_away]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


NUMBERS = {flag for record in launch_flags() for flag, _ in record.types}
CHOICES = {flag: record.choices[0] for record in launch_flags() if record.choices
           for flag in record.flags}


DEFAULTS = {flag: record.default_value for record in launch_flags() if record.default_value
            for flag in record.flags}


def _given(flag: str, takes_value: bool) -> list[str]:
    """The flag, with a value of the type the engines parse it as (--port 1, --host x), one
    of its choices where the engines' parser has a list (--uvicorn-log-level critical), or the
    one value it is ignored at (--watermark 0)."""
    value = DEFAULTS.get(flag) or ("1" if flag in NUMBERS else CHOICES.get(flag, "x"))
    return [flag, value] if takes_value else [flag]


@pytest.mark.parametrize("argv", [FIT, ("simulate", *FIT[1:], "--rate", "2", "--num-requests",
                                          "20")])
def test_a_pasted_gpt_oss_recipe_gives_the_stripped_lines_numbers_and_one_note(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """vLLM's gpt-oss recipe: `vllm serve openai/gpt-oss-120b --async-scheduling`, with the
    usual --trust-remote-code and --port."""
    code, out, err = run_cli(capsys, *argv, "--trust-remote-code", "--async-scheduling",
                             "--port", "8000", "--json")
    stripped = run_cli(capsys, *argv, "--json")
    assert code == 0 and same_answer(out, stripped[1]) and not stripped[2]
    assert err.splitlines() == ["ridgeline: note: ignored --trust-remote-code, --port 8000 "
                                "(they change neither memory nor speed)"]
    # the note is in the JSON too, as stderr says it
    assert json.loads(out)["notes"] == [err.strip().removeprefix("ridgeline: note: ")]


@pytest.mark.parametrize("spelling", [("--model-path", "deepseek-v3"), ("--model-path=deepseek-v3",),
                                      ("--model", "deepseek-v3")])
def test_sglangs_model_path_is_the_model(capsys: pytest.CaptureFixture[str],
                                         spelling: tuple[str, ...]) -> None:
    """sglang.launch_server names the model by --model-path (vllm serve's older --model): the
    pasted line gives what MODEL gives, and MODEL given as well is one line, exit 2."""
    line = ("--engine", "sglang", "--gpu", "h200", "--tp", "8", "--context-length", "8192",
            "--json")
    code, out, _ = run_cli(capsys, "fit", *line, *spelling)
    assert code == 0 and out == run_cli(capsys, "fit", "deepseek-v3", *line)[1]
    assert json.loads(out)["model"] == "deepseek-v3"
    err = refused(capsys, "fit", "llama-3.1-8b", *line, *spelling)
    assert "the model is given twice" in err and "llama-3.1-8b" in err


@pytest.mark.parametrize("second", [("--model-path", "llama-3.1-8b"), ("--model=llama-3.1-8b",)])
def test_two_model_flags_name_both_models_not_a_flag_as_model(
        capsys: pytest.CaptureFixture[str], second: tuple[str, ...]) -> None:
    """--model X with a second --model or --model-path Y: one line naming X and Y, not the
    second flag as if it were MODEL ("and --model-path as MODEL")."""
    err = refused(capsys, "fit", "--model", "deepseek-v3", *second, "--gpu", "h200")
    assert "the model is given twice: deepseek-v3 and llama-3.1-8b" in err
    assert "as MODEL" not in err


@pytest.mark.parametrize("record", IGNORED, ids=lambda r: r.flags[0])
def test_each_harmless_flag_is_read_with_its_value_before_model(
        capsys: pytest.CaptureFixture[str], record: LaunchFlag) -> None:
    """Given before MODEL, a flag that takes a value takes only its own (MODEL stays MODEL) and
    a switch takes none; the numbers are the stripped line's. A flag the run's engine reads as
    its setting (read_by: vLLM's --distributed-executor-backend) is not noted; one that
    changes the step time alone (speed_only) is said in decode's caution instead, its numbers
    still the stripped line's."""
    engine = ("--engine", record.engines[0]) if record.engine_only else ()  # its owner's
    for flag in record.flags:
        given = [flag, json.dumps(dict((k, v[0]) for k, v in record.json_values))] \
            if record.json_values else _given(flag, record.takes_value)
        code, out, err = run_cli(capsys, DECODE[0], *given, *DECODE[1:], *engine, "--json")
        assert code == 0, err
        stripped = run_cli(capsys, *DECODE, *engine, "--json")[1]
        if record.speed_only:
            said = f"{' '.join(given)} is not priced: {record.why}"
            assert err == f"ridgeline: caution: {said}\n"
            report, plain = json.loads(out), json.loads(stripped)
            assert report.pop("cautions") == [said, *plain.pop("cautions")]
            assert report == plain
            continue
        assert same_answer(out, stripped)
        if set(engine[1:] or ["vllm"]) <= set(record.read_by):
            assert "ignored" not in err
        else:
            assert err.startswith(f"ridgeline: note: ignored {' '.join(given)} ")


@pytest.mark.parametrize("record", [r for r in IGNORED if r.since], ids=lambda r: r.flags[0])
def test_a_flag_a_later_vllm_release_added_is_refused_by_the_releases_before_it(
        capsys: pytest.CaptureFixture[str], record: LaunchFlag) -> None:
    """vllm serve of a release before the flag stops at it ('unrecognized arguments'; the
    0.33.0 and 0.34.0 wheels added --watchdog-config and --shuffle-safetensors-files): refused
    in one line naming the release that added it; read and noted from that release on, and
    where no --engine-version is named. Before, every release read it (or none knew it)."""
    from ridgeline.engine_versions import release_before

    major, minor, *_ = record.since.split(".")
    before = f"{major}.{int(minor) - 1}"
    assert release_before("vllm", before, record.since)
    for flag in record.flags:
        given = _given(flag, record.takes_value)
        err = refused(capsys, *DECODE, *given, "--engine-version", before)
        assert err.strip() == (f"ridgeline: error: vLLM {before} has no {flag}: it came in "
                               f"v{record.since}; leave it out, or name that --engine-version "
                               "or a later one")
        for version in (("--engine-version", record.since), ()):
            code, out, err = run_cli(capsys, *DECODE, *given, *version, "--json")
            assert code == 0 and err.startswith(f"ridgeline: note: ignored {' '.join(given)} ")
            assert same_answer(out, run_cli(capsys, *DECODE, *version, "--json")[1])


@pytest.mark.parametrize("record", REFUSED, ids=lambda r: r.flags[0])
def test_a_flag_that_changes_memory_or_speed_is_refused_naming_it(
        capsys: pytest.CaptureFixture[str], record: LaunchFlag) -> None:
    for flag in record.flags:
        # decode, simulate and fit read the drafter's flags themselves (engine_spec.py), fit
        # llama-server's --parallel and -ub (decode refuses them)
        argv = PREFILL if flag in DRAFTER_FLAGS else FIT if flag not in _own("fit") else DECODE
        err = refused(capsys, *argv, *_given(flag, record.takes_value))
        assert f"error: {flag} is not modelled: {record.why}" in err


def _own(command: str) -> set[str]:
    """The spellings ``command`` reads as its own (not as a launch flag's record)."""
    import argparse

    from ridgeline.cli import build_parser
    from ridgeline.launch_flags import _Ignored

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {s for s, a in sub.choices[command]._option_string_actions.items()
            if not isinstance(a, _Ignored)}


def test_the_table_gives_each_flag_once_with_its_reason_and_engines() -> None:
    spellings = [f for r in launch_flags() for f in r.flags]
    assert len(spellings) == len(set(spellings))
    known = {k for k in load_data("engines.json") if not k.startswith("_")}
    for record in launch_flags():
        assert record.why and set(record.engines) <= known, record


def test_chunked_prefill_is_ignored_on_v1_and_refused_where_it_changes_something(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *DECODE, "--enable-chunked-prefill")
    assert code == 0 and out == run_cli(capsys, *DECODE)[1] and "V1 engine chunks" in err
    assert "V0 engine" in refused(capsys, *SIM, "--enable-chunked-prefill", "--engine-version",
                                  "0.8.5 V0")
    assert "sglang has no such flag" in refused(capsys, *SIM, "--enable-chunked-prefill",
                                                "--engine", "sglang")


@pytest.mark.parametrize("spelling", ["--enable-chunked-prefill", "--enable_chunked_prefill"])
def test_chunked_prefill_is_read_as_tensorrt_llms_setting_not_noted(
        capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    """One flag, vLLM's spellings: under TensorRT-LLM it turns enable_chunked_prefill on
    (simulate says so in its policy), with no note that it was ignored."""
    code, out, err = run_cli(capsys, *SIM, "--engine", "trtllm", spelling)
    assert code == 0 and "ignored" not in err
    assert "chunked prefill (enable_chunked_prefill)" in out
    assert "contexts whole" in run_cli(capsys, *SIM, "--engine", "trtllm")[1]


def test_async_scheduling_is_vllms_default_from_0_14_and_refused_elsewhere(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, *SIM, "--async-scheduling", "--json")[:2] == \
        run_cli(capsys, *SIM, "--json")[:2]
    assert "has no --async-scheduling (it came in v0.10.0" in refused(
        capsys, *SIM, "--async-scheduling", "--engine-version", "0.9.2")
    assert "vLLM's" in refused(capsys, *SIM, "--async-scheduling", "--engine", "sglang")


@pytest.mark.parametrize("command", [SIM, DECODE, FIT])
def test_async_scheduling_opt_in_before_0_14_is_priced_synchronous_with_a_caution(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """vLLM 0.10.0-0.13 had --async-scheduling opt-in (the 0.11.2 recipes set it): the run
    is priced as that release runs without it, and a caution says async scheduling is not
    priced there; the release before it (0.9.2) stops on the flag."""
    old = ("--engine-version", "0.11")
    code, out, err = run_cli(capsys, *command, *old, "--async-scheduling", "--json")
    assert code == 0, err
    report = json.loads(out)
    plain = json.loads(run_cli(capsys, *command, *old, "--json")[1])
    before = plain.pop("cautions")
    cautions = [c for c in report.pop("cautions") if c not in before]
    assert report == plain
    assert len(cautions) == 1 and cautions[0].startswith(
        "--async-scheduling on vLLM 0.11 (opt-in there; the default from v0.14)")
    assert "priced synchronous" in cautions[0]
    if command is SIM:  # 0.10.0 and 0.11.0 refuse it beside a pipeline, as vllm serve does
        assert "vLLM 0.11 refuses the pair" in refused(
            capsys, *command, *old, "--async-scheduling", "--pipeline-parallel-size", "2")


def _lengths(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str
             ) -> tuple[list[int], list[int]]:
    path = tmp_path / "rows.csv"
    code, _, err = run_cli(capsys, *argv, "--export", str(path))
    assert code == 0, err
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [int(r["prompt_tokens"]) for r in rows], [int(r["output_tokens"]) for r in rows]


def test_random_range_ratio_draws_vllm_bench_serves_range(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vllm bench serve --random-input-len 1000 --random-output-len 100 --random-range-ratio
    0.5 draws inputs in [500, 1500] and outputs in [50, 150] (RandomDataset)."""
    load = (*SIM[:-1], "400", "--random-input-len", "1000", "--random-output-len", "100")
    prompts, outputs = _lengths(capsys, tmp_path, *load, "--random-range-ratio", "0.5")
    assert 500 <= min(prompts) < 550 and 1450 < max(prompts) <= 1500
    assert 50 <= min(outputs) < 55 and 145 < max(outputs) <= 150
    assert (prompts, outputs) == _lengths(capsys, tmp_path, *SIM[:-1], "400", "--input-len",
                                          "uniform:500,1500", "--output-len", "uniform:50,150")
    assert ranged("7", 0.5, "--output-len") == "uniform:3,11"  # floor below, ceil above
    assert ranged("1", 0.9, "--output-len") == "uniform:1,2"  # an output of at least 1
    same = run_cli(capsys, *load, "--random-range-ratio", "0", "--json")
    assert same[:2] == run_cli(capsys, *load, "--json")[:2]  # its default: the lengths given
    refused(capsys, *SIM, "--random-range-ratio", "1")
    refused(capsys, *SIM, "--random-range-ratio", "0.5", "--input-len", "uniform:1,9")


def test_dataset_name_random_is_the_synthetic_load_at_vllm_bench_serves_lengths(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *SIM, "--dataset-name", "random", "--json")
    assert code == 0 and out == run_cli(capsys, *SIM, "--input-len", "1024", "--json")[1]
    assert "--trace" in refused(capsys, *SIM, "--dataset-name", "sharegpt")


def test_ignore_eos_is_taken_under_every_engine(capsys: pytest.CaptureFixture[str]) -> None:
    """Every request already runs to its output length; only SGLang's admission reads it."""
    for engine in ("vllm", "trtllm"):
        code, out, err = run_cli(capsys, *SIM, "--engine", engine, "--ignore-eos", "--json")
        assert code == 0, err
        assert out == run_cli(capsys, *SIM, "--engine", engine, "--json")[1]


def test_mtp_is_priced_as_eagle_where_the_checkpoint_has_mtp_layers(
        capsys: pytest.CaptureFixture[str]) -> None:
    sim = ("simulate", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--rate", "2",
           "--num-requests", "20", "--spec-tokens", "2", "--json")
    eagle = run_cli(capsys, *sim, "--spec-method", "eagle")
    assert eagle[0] == 0
    # an EAGLE head named nowhere is left out of the pool, as fit says; the MTP layer is in it
    assert eagle[2].startswith("ridgeline: caution: the eagle drafter's weights and cache are "
                               "not in this pool") and eagle[2].count("\n") == 1
    for method in ("mtp", "deepseek_mtp"):
        code, out, err = run_cli(capsys, *sim, "--spec-method", method)
        assert code == 0 and err == ""
        mtp, plain = json.loads(out), json.loads(eagle[1])
        # the same steps and times; only the pool holds the MTP layer too (drafter_memory)
        assert mtp["settings"]["num_blocks"] < plain["settings"]["num_blocks"]
        assert mtp["conversations"] <= plain["conversations"]
        for report in (mtp, plain):
            del report["settings"]["num_blocks"], report["time_series"]
            del report["conversations"]
            # each names its own drafter in the acceptance caution, otherwise the same
            assumed = [c for c in report["cautions"] if "is assumed, not measured" in c]
            assert len(assumed) == 1
            report["cautions"] = [c for c in report["cautions"]
                                  if "drafter's weights and cache" not in c and c not in assumed]
        assert mtp == plain
    for argv in (SIM, DECODE):
        err = refused(capsys, *argv, "--spec-tokens", "2", "--spec-method", "mtp")
        assert "llama-3.1-8b has none" in err


def test_decode_and_prefill_read_no_async_scheduling_as_fit_sizes_the_pool_with_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b on one H100 at 28,000 tokens: without async scheduling vLLM's window
    layers keep blocks for one batch in flight, not two, and one more conversation fits;
    decode and prefill size the pool fit sizes under the switch rather than ignore it in a
    note."""
    base = ("gpt-oss-120b", "--gpu", "h100", "--max-model-len", "28000")

    def held(command: str, *extra: str) -> int:
        where = ("--context",) if command == "decode" else ("--prompt-len",)
        code, out, err = run_cli(capsys, command, *base, *where, "28000", *extra, "--json")
        assert code == 0 and "ignored" not in err, err
        found = json.loads(out)["engine_max_batch"]
        return int(found[0]["engine_max_batch"] if command == "decode" else found)

    def fit(*extra: str) -> int:
        code, out, err = run_cli(capsys, "fit", *base, *extra, "--json")
        assert code == 0, err
        return int(json.loads(out)["conversations"])

    synchronous = fit("--no-async-scheduling")
    assert synchronous != fit()  # the switch changes the pool here
    for command in ("decode", "prefill"):
        assert held(command, "--no-async-scheduling") == synchronous
        assert held(command) == held(command, "--async-scheduling") == fit()
    assert "it came in v0.10.0" in refused(capsys, *DECODE, "--async-scheduling",
                                           "--engine-version", "0.9.2")
    assert "vLLM's" in refused(capsys, *DECODE, "--no-async-scheduling", "--engine", "sglang")


# each removed flag (data/removed_flags.json) with the last release that still took it and a
# command that reads it: fit notes the ignored ones, simulate reads vLLM's older drafter
REMOVED = {record_flag: record for record in load_data("removed_flags.json")["vllm"]
           for record_flag in record["flags"]}
LAST_WITH = {"--swap-space": "0.17.1", "--disable-log-requests": "0.11.2",
             "--eplb-window-size": "0.11.2", "--eplb-step-interval": "0.11.2",
             "--eplb-log-balancedness": "0.11.2", "--speculative-model": "0.8.2",
             "--num-speculative-tokens": "0.8.2", "--ngram-prompt-lookup-max": "0.8.2",
             "--ngram-prompt-lookup-min": "0.8.2", "--max-seq-len-to-capture": "0.10.2",
             "--max_seq_len_to_capture": "0.10.2"}
DRAFTER = ("--speculative-model", "[ngram]", "--num-speculative-tokens", "3")


def _removed_argv(flag: str, alone: bool = False) -> tuple[str, ...]:
    """A command reading ``flag``; a drafter's flag with its pair, unless ``alone``."""
    if flag in DRAFTER:
        return (*SIM, *(DRAFTER[DRAFTER.index(flag):][:2] if alone else DRAFTER))
    if flag.startswith("--ngram-prompt-lookup-"):  # the n-gram drafter's window
        return (*SIM, *(() if alone else DRAFTER), flag, "4")
    record = next(r for r in launch_flags() if flag in r.flags)
    return ("fit", "llama-3.1-8b", "--gpu", "h100", *_given(flag, record.takes_value))


def test_every_removed_flag_is_one_ridgeline_reads_with_its_release_before() -> None:
    read = {f for r in launch_flags() for f in r.flags} | DRAFTER_FLAGS
    assert set(REMOVED) == set(LAST_WITH) and set(REMOVED) <= read
    for record in REMOVED.values():
        assert record["replacement"] and record["pr"] in record["source"], record


@pytest.mark.parametrize("flag", sorted(LAST_WITH))
def test_a_removed_flag_is_refused_from_the_release_that_removed_it(
        capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """vllm serve of the release named refuses the flag: so does ridgeline, in one line naming
    the flag, that release and the change that removed it; the release before reads it."""
    removed_in = REMOVED[flag]["removed_in"]
    asked = removed_in.removesuffix(".0")  # '0.18' is 0.18.0
    err = refused(capsys, *_removed_argv(flag, alone=True), "--engine-version", asked)
    assert f"vLLM {asked} has no {flag}: it was removed in v{removed_in}" in err
    assert REMOVED[flag]["pr"] in err and "earlier --engine-version" in err
    code, _, err = run_cli(capsys, *_removed_argv(flag), "--engine-version", LAST_WITH[flag])
    assert code == 0 and "removed" not in err


@pytest.mark.parametrize("flag", ["--swap-space", "--disable-log-requests",
                                  "--speculative-model"])
def test_a_removed_flag_is_read_as_before_where_no_release_is_named(
        capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """No --engine-version: the pasted line is taken to come from a release that had it."""
    code, _, err = run_cli(capsys, *_removed_argv(flag))
    assert code == 0 and "removed" not in err


def test_a_removed_flag_from_a_config_file_names_the_file_and_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("swap-space: 4\n")
    err = refused(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine-version", "0.18",
                  "--config", str(path))
    assert "no --swap-space (" in err and "v.yaml: swap-space" in err


def test_another_engines_release_does_not_refuse_a_vllm_removal(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.5.3 is past vLLM's 0.12.0 by number, not by release: --disable-log-requests,
    SGLang's too, is read and noted."""
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                           "--engine-version", "0.5.3", "--disable-log-requests")
    assert code == 0 and "ignored --disable-log-requests" in err


def test_vllms_watermark_and_adaptive_threshold_are_read_at_their_defaults_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's --watermark (SchedulerConfig.watermark, 0.0: off) and
    --long-prefill-token-threshold-adaptive (off by default, from 0.31.0), which the simulator's
    scheduler does not model: at their defaults a pasted line runs, the numbers the stripped
    line's; otherwise refused in one line naming the flag."""
    stripped = run_cli(capsys, *SIM, "--json")[1]
    for given in (["--watermark", "0"], ["--watermark", "0.0"],
                  ["--no-long-prefill-token-threshold-adaptive"]):
        code, out, err = run_cli(capsys, *SIM, *given, "--json")
        assert code == 0 and same_answer(out, stripped)
        assert err.startswith(f"ridgeline: note: ignored {' '.join(given)} ")
    for given in (["--watermark", "0.01"], ["--long-prefill-token-threshold-adaptive"]):
        err = refused(capsys, *SIM, *given)
        assert err.startswith(f"ridgeline: error: {' '.join(given)} is not modelled: ")

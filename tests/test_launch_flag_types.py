"""A pasted launch line's flags that change nothing priced are still parsed as the engines
parse them: where vLLM, SGLang or trtllm-serve read a value as an int or a float
(data/launch_flags.json 'types', with sources), a value that is none (--port 80OO, --seed
nan, --swap-space '') would stop the engine's own parser, so ridgeline refuses it in one
line, exit 2; it had read any value and named it in the note."""

from __future__ import annotations

import pytest

from ridgeline.launch_flags import COMMANDS, launch_flags
from tests.conftest import run_cli

TYPED = [(flag, kind, record) for record in launch_flags() for flag, kind in record.types]
BASE = {"fit": ("--max-model-len", "8192"), "decode": ("--context", "8192"),
        "prefill": ("--prompt-len", "512"), "simulate": ("--num-prompts", "4")}
ENGINE_NAMES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}


def _argv(command: str, flag: str, value: str, engine: str = "vllm") -> list[str]:
    return [command, "llama-3.1-8b", "--gpu", "h100", "--engine", engine, *BASE[command],
            f"{flag}={value}"]


def test_every_typed_spelling_is_one_of_its_records_flags() -> None:
    assert {flag for flag, _, _ in TYPED} >= {"--port", "--seed", "--random-seed",
                                              "--swap-space", "--api-server-count"}
    for flag, kind, record in TYPED:
        assert flag in record.flags and kind in ("int", "float") and record.takes_value


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("flag", "kind"), [(f, k) for f, k, _ in TYPED])
def test_a_value_the_engines_type_does_not_read_is_refused(
        capsys: pytest.CaptureFixture[str], command: str, flag: str, kind: str) -> None:
    bad = ["nan", "", "8O", "１", "1_0"] + (["1.5", "1e3"] if kind == "int" else ["inf"])
    for value in bad:
        code, out, err = run_cli(capsys, *_argv(command, flag, value))
        assert code == 2 and not out, (flag, value, code, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and flag in lines[0], (flag, value, err)  # simulate: its own --seed
        assert repr(value) in lines[0]


@pytest.mark.parametrize(("flag", "kind", "record"), TYPED, ids=[f for f, _, _ in TYPED])
def test_a_value_of_the_engines_type_is_read_and_ignored(
        capsys: pytest.CaptureFixture[str], flag: str, kind: str, record) -> None:  # type: ignore[no-untyped-def]
    # an engine that keeps no least value of its own (SGLang's --stream-interval; vLLM's
    # config takes 1 or more: test_bad_input_second_pass)
    engine = next(e for e in ENGINE_NAMES if e in record.engines
                  and e not in dict(record.minimums))
    low, high = dict(record.ranges).get(flag, (-1, 8000))  # a port: -1 is refused (below)
    values = ["8000", "0", str(low), str(high)] + (["4.5", "1e3"] if kind == "float" else [])
    if record.default_value:  # read at its default alone (--watermark 0), in any spelling
        values = [record.default_value, "0.0", "0e3"] if kind == "float" else [
            record.default_value]
    for value in values:
        code, _, err = run_cli(capsys, *_argv("fit", flag, value, engine))
        assert code == 0, (flag, value, err)
        assert f"{flag} {value}" in err  # named in the note of flags read and ignored


def test_a_string_flag_still_takes_any_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *_argv("fit", "--host", ""))
    assert code == 0, err


RANGED = [(flag, bounds, record) for record in launch_flags() for flag, bounds in record.ranges]


def test_the_ports_are_the_ranged_spellings_each_a_typed_int() -> None:
    """The engines bind --port (and SGLang its --disaggregation-bootstrap-port), and Python's
    socket refuses a port outside 0-65535 ('bind(): port must be 0-65535.')."""
    assert {flag for flag, _, _ in RANGED} == {"--port", "--disaggregation-bootstrap-port"}
    for flag, bounds, record in RANGED:
        assert bounds == (0, 65535) and dict(record.types)[flag] == "int"


@pytest.mark.parametrize(("flag", "bounds", "record"), RANGED, ids=[f for f, _, _ in RANGED])
def test_a_port_the_engines_cannot_bind_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], flag: str, bounds: tuple[int, int],
        record) -> None:  # type: ignore[no-untyped-def]
    """--port 99999 was read and named in the note; vllm serve stops binding it."""
    engine = next(e for e in ENGINE_NAMES if e in record.engines)
    low, high = bounds
    for value in (str(high + 1), "99999", str(low - 1), "-8000"):
        code, out, err = run_cli(capsys, *_argv("fit", flag, value, engine))
        assert code == 2 and not out, (flag, value, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"{flag} {int(value)} is out of range" in lines[0], err
        assert "port must be 0-65535" in lines[0]
    code, _, err = run_cli(capsys, *_argv("fit", flag, str(high), engine))  # the last port binds
    assert code == 0 and f"{flag} {high}" in err, err


CHOSEN = [(record.flags[0], record) for record in launch_flags() if record.choices]


def test_the_choice_lists_are_those_read_from_the_engines_parsers() -> None:
    """One list every release has (vLLM's log level and scheduling policy, SGLang's
    disaggregation mode), or, where the list moves, every value a release read takes."""
    chosen = {flag: record.choices for flag, record in CHOSEN}
    assert {flag: chosen.pop(flag) for flag in ("--uvicorn-log-level",
                                                 "--disaggregation-mode",
                                                 "--scheduling-policy")} == {
        "--uvicorn-log-level": ("critical", "error", "warning", "info", "debug", "trace"),
        "--disaggregation-mode": ("null", "prefill", "decode"),
        "--scheduling-policy": ("fcfs", "priority")}
    assert set(chosen) == {"--prefill-attention-backend", "--schedule-policy"}
    assert {"fa3", "flashinfer", "triton", "dsa"} <= set(chosen["--prefill-attention-backend"])
    assert {"lpm", "fcfs", "routing-key"} <= set(chosen["--schedule-policy"])
    assert all(record.choices_any_release for flag, record in CHOSEN if flag in chosen)


@pytest.mark.parametrize(("flag", "record"), CHOSEN, ids=[f for f, _ in CHOSEN])
def test_a_value_the_engines_parser_has_no_choice_for_is_refused_each_choice_read(
        capsys: pytest.CaptureFixture[str], flag: str, record) -> None:  # type: ignore[no-untyped-def]
    """--uvicorn-log-level verbose was read and named; vllm serve stops at 'invalid choice'.
    argparse matches exactly, so 'INFO' is no choice either."""
    engine = next(e for e in ENGINE_NAMES if e in record.engines)
    for value in ("verbose", record.choices[-1].upper(), "", f"{record.choices[0]} "):
        code, out, err = run_cli(capsys, *_argv("fit", flag, value, engine))
        assert code == 2 and not out, (flag, value, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"{flag} {value!r} is no choice of" in lines[0], err
        assert ", ".join(record.choices) in lines[0]
    for value in record.choices:
        code, _, err = run_cli(capsys, *_argv("fit", flag, value, engine))
        assert code == 0 and f"{flag} {value}" in err, (flag, value, err)

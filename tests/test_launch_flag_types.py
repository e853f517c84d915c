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
    engine = next(e for e in ENGINE_NAMES if e in record.engines)
    values = ["8000", "0", "-1"] + (["4.5", "1e3"] if kind == "float" else [])
    for value in values:
        code, _, err = run_cli(capsys, *_argv("fit", flag, value, engine))
        assert code == 0, (flag, value, err)
        assert f"{flag} {value}" in err  # named in the note of flags read and ignored


def test_a_string_flag_still_takes_any_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *_argv("fit", "--host", ""))
    assert code == 0, err

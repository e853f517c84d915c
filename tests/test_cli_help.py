"""A command's --help by concern (cli_help): decode's was 480 lines, its usage alone 60, the
core flags lost among one engine's own (--cache-transceiver-config, --lora-paths); the summary
keeps the core a line each, each engine's own flags folded to a line, and --help-all and
--help-engine print the rest in full, while the parse stays the one the commands had."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_json, run_cli

SERVING = ("decode", "prefill", "fit", "simulate")
CORE = ("--gpu", "--num-gpus", "--max-model-len", "--weights", "--kv-dtype", "--engine",
        "--json", "--explain")


def _commands() -> dict[str, argparse.ArgumentParser]:
    from ridgeline.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(text: str) -> set[str]:
    """The option spellings a help text names."""
    return set(re.findall(r"(?<![\w-])(-{1,2}[\w][\w.-]*)", text))


@pytest.mark.parametrize("command", [*SERVING, "plan"])
def test_the_summary_fits_a_screen_and_names_the_core_flags(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run_cli(capsys, command, "--help")
    _, whole, _ = run_cli(capsys, command, "--help-all")
    assert code == 0 and len(out.splitlines()) < 120
    if command in SERVING:  # the usage a few lines, not a flag list; the summary a sixth
        usage = out.split("\n\n")[0]  # of it all
        assert usage.endswith("[options]") and len(usage.splitlines()) <= 3
        assert len(out.splitlines()) * 4 < len(whole.splitlines())
        assert set(CORE) <= _flags(out)
    own = {"decode": ("--batch", "--context"), "prefill": ("--prompt-len", "--batch"),
           "fit": ("--target-concurrency",), "simulate": ("--rate", "--concurrency"),
           "plan": ("--rate", "--slo-ttft-ms")}[command]
    assert set(own) <= _flags(out)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_help_all_lists_every_flag_the_parser_takes(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run_cli(capsys, command, "--help-all")
    parser = _commands()[command]
    spellings = {s for a in parser._actions if a.help != argparse.SUPPRESS
                 for s in a.option_strings}
    assert code == 0 and spellings and spellings <= _flags(out)
    positionals = [a.metavar or a.dest for a in parser._actions if not a.option_strings]
    assert all(str(name) in out for name in positionals)


def test_each_engines_own_flags_fold_to_a_line_that_says_how_to_open_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli_help import ENGINES, section_of, shown_actions

    parser = _commands()["decode"]
    _, summary, _ = run_cli(capsys, "decode", "--help")
    for engine, title in ENGINES.items():
        own = [a for a in shown_actions(parser) if section_of(a) == engine]
        assert own, engine  # decode takes flags of every engine's own
        assert f"  {title} ({len(own)} flags): --help-engine {engine}" in summary
        assert not any(s in _flags(summary) for a in own for s in a.option_strings)
        code, opened, _ = run_cli(capsys, "decode", "--help-engine", engine)
        assert code == 0 and {s for a in own for s in a.option_strings} <= _flags(opened)
        assert f"--help-engine {engine}\n" not in opened  # its own line is open, not folded
    assert "--cache-transceiver-config" not in summary and "--lora-paths" not in summary


def test_a_short_help_is_printed_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """kv takes 22 flags, one of them SGLang's own: nothing is folded, so --help is
    --help-all, and --help-engine sglang too."""
    from ridgeline.cli_help import summarized

    assert not summarized(_commands()["kv"]) and summarized(_commands()["decode"])
    code, out, _ = run_cli(capsys, "kv", "--help")
    assert code == 0 and "--enable-dp-attention" in out and "folded" not in out
    assert out == run_cli(capsys, "kv", "--help-all")[1]
    assert out == run_cli(capsys, "kv", "--help-engine", "sglang")[1]


def test_a_mistyped_engine_is_refused_in_a_line_with_the_one_meant(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "--help-engine", "vlm")
    assert code == 2 and out == "" and err.count("\n") == 1 and "did you mean vllm?" in err


def test_the_help_flags_leave_the_parse_as_it_was() -> None:
    """A run's namespace carries nothing of the help flags; every other spelling still names
    the action it named (the help flags are the only ones cli_help adds)."""
    from ridgeline.cli_help import HELP, section_of

    parser = _commands()["decode"]
    args = parser.parse_args(["llama-3.1-8b", "--gpu", "h100", "--batch", "8",
                              "--cache-transceiver-config", '{"backend": "DEFAULT"}'])
    assert not any("help" in name for name in vars(args))
    added = {s for a in parser._actions if section_of(a) == HELP for s in a.option_strings}
    assert added == {"-h", "--help", "--help-all", "--help-engine"}


# an example that names the reader's own file, server or device, and what stands in for it
# here: a bundled file of that kind, or nothing (the example is parsed, not run)
_STAND_INS = {"vllm-server.log": "tests/fixtures/vllm_server.log",
              "./my-model/config.json": "src/ridgeline/data/models/EleutherAI--gpt-j-6b.json",
              "http://localhost:8000/metrics": None, "rows.h100-sxm.csv": None,
              "my-profile.json": None}  # calibrate's output (test_profile_command reads one)


def _examples() -> list[tuple[str, str]]:
    from ridgeline.cli_help import EXAMPLES

    return [(command, line) for command, lines in EXAMPLES.items() for line in lines]


def test_every_command_ends_its_help_with_what_it_answers_and_an_example(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`ridgeline decode --help` had no line saying what decode answers and no example; each
    command's help now opens with the line `ridgeline --help` lists it by and ends with an
    example of its own."""
    from ridgeline.cli_help import EXAMPLES

    assert set(EXAMPLES) == set(_commands())
    _, top, _ = run_cli(capsys, "--help")  # which ends saying where the examples are
    assert "`ridgeline COMMAND --help` gives a command's flags, with examples" in top
    assert f"  {EXAMPLES['decode'][0]}" in top.splitlines()
    for command in _commands():
        _, out, _ = run_cli(capsys, command, "--help")
        lines = out.splitlines()
        described = out.split("\n\n")[1]  # past the usage, the line it is listed by
        assert " ".join(described.split()) in " ".join(top.split())
        assert lines[lines.index("examples:") + 1] == f"  {EXAMPLES[command][0]}"


@pytest.mark.parametrize(("command", "line"), _examples())
def test_each_example_in_a_help_runs(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     command: str, line: str) -> None:
    """Each example parses as the command it ends; it runs to an answer (exit 0) where it
    needs nothing of the reader's, or with a bundled file of the kind it names, and a
    measurement only as --dry-run."""
    argv = shlex.split(line)[1:]
    assert argv[0] == command
    stand_ins = [_STAND_INS[w] for w in argv if w in _STAND_INS]
    argv = [str(ROOT / _STAND_INS[w]) if _STAND_INS.get(w) else w for w in argv]
    assert _commands()[command].parse_args(argv[1:]) is not None
    if None in stand_ins or (command == "measure" and "--dry-run" not in argv):
        return
    monkeypatch.chdir(tmp_path if command == "page" else ROOT)  # page writes its -o here
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and out, err


def test_page_help_names_the_cards_it_offers_by_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    """page's --gpu said nothing of the six cards it offers without one."""
    from ridgeline.page import DEFAULT_GPUS

    _, out, _ = run_cli(capsys, "page", "--help")
    assert f"(default: {', '.join(DEFAULT_GPUS)})" in " ".join(out.split())


# what else a run needs of each command whose usage gives the ways to name an accelerator,
# and what stands for each value there (FILE: a card record written by the test)
_NEEDS_A_CARD = {"roofline": [], "decode": ["llama-3.1-8b"],
                 "prefill": ["llama-3.1-8b", "--prompt-len", "1000"],
                 "utilization": ["--running", "8"],
                 "fit": ["llama-3.1-8b", "--max-model-len", "8192"],
                 "simulate": ["llama-3.1-8b", "--rate", "1", "--num-requests", "20"],
                 "observe": ["tests/fixtures/vllm_server.log", "--model", "llama-3.1-8b"]}
_VALUES = {"NAME": "h100", "TFLOPS": "900", "GB/S": "3000", "GIB": "80"}


def _usage(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """A command's usage, its wrapped lines joined."""
    return " ".join(run_cli(capsys, command, "--help")[1].split("\n\n")[0].split())


def test_the_usage_names_every_way_to_give_an_accelerator(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Usage said `--gpu NAME` where --gpu-file or a custom card's figures serve as well; a
    command that requires a card now gives the three ways, a custom card's memory where the
    command requires a model; plan's usage gives its load as --rate or --trace."""
    shown = {c for c in _commands() if "(--gpu NAME | " in _usage(capsys, c)}
    assert shown == set(_NEEDS_A_CARD)
    assert "(--gpu NAME | --gpu-file FILE | --peak-tflops TFLOPS --bandwidth-gbs GB/S " \
        "--gpu-memory-gib GIB)" in _usage(capsys, "decode")
    assert "(--gpu NAME | --gpu-file FILE | --peak-tflops TFLOPS --bandwidth-gbs GB/S)" \
        in _usage(capsys, "roofline")
    assert "(--rate RATE | --trace FILE)" in _usage(capsys, "plan")


@pytest.mark.parametrize("command", sorted(_NEEDS_A_CARD))
def test_each_way_the_usage_gives_an_accelerator_runs(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        command: str) -> None:
    """Each alternative of the usage's accelerator choice, its values filled in, runs the
    command to an answer (exit 0)."""
    record = cli_json(capsys, "hardware", "h100")
    record.update(id="usage-h100", aliases=[])
    path = tmp_path / "card.json"
    path.write_text(json.dumps(record))
    found = re.search(r"\((--gpu NAME [^)]*)\)", _usage(capsys, command))
    assert found is not None
    ways = [way.split() for way in found.group(1).split(" | ")]
    assert [way[0] for way in ways] == ["--gpu", "--gpu-file", "--peak-tflops"]
    monkeypatch.chdir(ROOT)
    for way in ways:
        argv = [str(path) if w == "FILE" else _VALUES.get(w, w) for w in way]
        code, out, err = run_cli(capsys, command, *_NEEDS_A_CARD[command], *argv)
        assert code == 0 and out, (way, err)


def test_help_engine_takes_every_engine_where_the_command_owns_no_flag_of_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """kv's own flags are SGLang's alone, and `kv --help-engine vllm` was refused ("invalid
    choice: 'vllm' (choose from 'sglang')") though `kv --engine vllm` runs: it now prints the
    help, saying kv has no vLLM flags of its own."""
    code, out, err = run_cli(capsys, "kv", "--help-engine", "vllm")
    assert code == 0, err
    assert "kv takes no flags of vLLM's own" in out
    assert out.startswith(run_cli(capsys, "kv", "--help")[1].split("\n\nexamples:")[0])
    code, out, _ = run_cli(capsys, "kv", "--help-engine", "sglang")
    assert code == 0 and "takes no flags of" not in out

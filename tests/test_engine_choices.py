"""vLLM's and SGLang's --kv-cache-dtype is checked as each release checks it
(data/engine_choices.json, with sources): a value the release refuses stops in one line naming
the flag, the value and the release's choices, exit 2, as vllm serve and
sglang.launch_server stop at start-up; without --engine-version the release a run is priced
as (vLLM's default_version, SGLang's newest_checked) decides. A value the release takes but
ridgeline has no cache format for (vLLM's fp8_inc) is refused as not modelled, under either
spelling. ridgeline's own --kv-dtype keeps its names (bf16, fp32, q8_0). Before, any of
ridgeline's names passed under --kv-cache-dtype, and an engine's unmodelled value was
"unknown"."""

from __future__ import annotations

import re

import pytest

from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.engine_choices import kv_cache_dtype_choices, kv_cache_dtype_problem
from ridgeline.engine_versions import release_before, sized_version
from ridgeline.precision import kv_dtype
from tests.conftest import refused_line, run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k")


refused = refused_line


def taken(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, (argv, err)
    return err


def test_every_listed_value_has_a_format_or_a_reason_and_the_releases_are_versions() -> None:
    data = load_data("engine_choices.json")["kv_cache_dtype"]
    assert set(data) == {"vllm", "sglang"}
    for row in data.values():
        assert row["source"] and row["checked_from"]
        for choice in row["choices"]:
            if choice["modelled"]:
                kv_dtype(choice["value"])  # one of ridgeline's names (an alias) for it
            else:
                assert choice["why"], choice
            if choice.get("since") not in (None, "main"):
                assert choice.get("source"), choice  # a value that came later says when


@pytest.mark.parametrize(("engine", "value"), [
    ("vllm", "bf16"), ("vllm", "fp16"), ("vllm", "fp32"), ("vllm", "half"), ("vllm", "e4m3"),
    ("vllm", "q8_0"), ("sglang", "fp8"), ("sglang", "BF16"), ("sglang", "float16"),
    ("sglang", "fp32")])
def test_a_value_the_default_release_refuses_is_refused_naming_its_choices(
        capsys: pytest.CaptureFixture[str], engine: str, value: str) -> None:
    line = refused(capsys, *FIT, "--engine", engine, "--kv-cache-dtype", value)
    release = sized_version(engine, None)
    listed = kv_cache_dtype_choices(engine)
    assert listed is not None
    assert f"{release} (the default --engine-version) refuses --kv-cache-dtype {value}" in line
    assert ", ".join(c.value for c in listed.taken_by(str(release))) in line
    if value == "q8_0":  # llama.cpp's cache: no flag of this engine keeps it
        assert "give" not in line and "q8_0 is ridgeline's name for a cache" in line
        return
    # the hint names a flag and value the engine takes: ridgeline's --kv-dtype with its own
    # name, or the engine's value where only the case was off (SGLang's BF16: bf16)
    hinted = re.search(r"give (--kv-dtype|--kv-cache-dtype) ([^ ,)]+)", line)
    assert hinted, line
    if value != "fp32":  # an fp32 cache needs an fp32 card rate (test_bad_input_audit)
        taken(capsys, *FIT, "--engine", engine, *hinted.groups())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_value_the_release_takes_and_ridgeline_sizes_is_still_taken(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    listed = kv_cache_dtype_choices(engine)
    assert listed is not None
    release = str(sized_version(engine, None))
    # fp8_ds_mla's records fit DeepSeek-V3.2's latent only (test_ds_mla_cache sizes them)
    values = [c.value for c in listed.taken_by(release) if c.modelled
              and not (c.value != "auto" and kv_dtype(c.value).elements_per_token)]
    assert "auto" in values and len(values) >= 3
    for value in values:
        err = taken(capsys, *FIT, "--engine", engine, "--kv-cache-dtype", value, "--json")
        assert "error" not in err


def test_an_fp8_cache_sizes_alike_under_the_engines_spelling_and_ridgelines(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = {}
    for flags in (("--kv-dtype", "fp8"), ("--kv-cache-dtype", "fp8_e4m3")):
        code, out[flags], _ = run_cli(capsys, *FIT, "--engine", "sglang", *flags, "--json")
        assert code == 0
    assert len(set(out.values())) == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_fp8_lever_the_engine_is_told_passes_the_check(engine: str) -> None:
    """fit's fp8-cache lever prints the engine's value (engines.json cli.kv_fp8): one the
    check takes, at the default release."""
    cli = engine_defaults(engine)["cli"]
    assert cli["kv_dtype"] == "--kv-cache-dtype"
    assert kv_cache_dtype_problem(engine, None, cli["kv_fp8"]) == ""


@pytest.mark.parametrize(("engine", "release", "value", "since"), [
    ("vllm", "0.17.1", "float16", "0.18.0"), ("sglang", "0.5.2", "bf16", "0.5.4"),
    ("sglang", "0.5.3.post3", "bfloat16", "0.5.4")])
def test_a_value_a_later_release_brought_is_refused_for_an_earlier_one(
        capsys: pytest.CaptureFixture[str], engine: str, release: str, value: str,
        since: str) -> None:
    line = refused(capsys, *FIT, "--engine", engine, "--engine-version", release,
                   "--kv-cache-dtype", value)
    assert line.endswith(f"refuses --kv-cache-dtype {value}: it takes one of "
                         f"{', '.join(c.value for c in kv_cache_dtype_choices(engine).taken_by(release))}"  # type: ignore[union-attr]
                         f"; {value} came in v{since}, so name that --engine-version or a "
                         "later one")
    taken(capsys, *FIT, "--engine", engine, "--engine-version", since,
          "--kv-cache-dtype", value)


@pytest.mark.parametrize(("value", "before"), [
    ("float16", "0.17.1"), ("turboquant_k8v4", "0.19.1"), ("nvfp4", "0.19.1"),
    ("int4_per_token_head", "0.24.0"), ("nvfp4_4over6", "0.27.1"), ("nvfp4_ds_mla", "0.29.0"),
    ("ultraquant_4bit", "0.31.0"), ("octave_k3v4", "0.32.0"), ("octave_k3v3_compact", "0.32.0")])
def test_a_vllm_value_is_taken_from_the_first_release_wheel_that_lists_it(
        value: str, before: str) -> None:
    """vLLM's CacheDType read in the release wheels (0.17.1-0.34.0): each value is taken by the
    release whose wheel first lists it, and the release before refuses it naming that one; the
    values were read only on main before (refused up to 0.17.0, unknown past it), and
    ultraquant_4bit and the octave caches (0.32.0, 0.33.0) were unknown to ridgeline."""
    listed = kv_cache_dtype_choices("vllm")
    assert listed is not None and listed.read_through is not None
    assert all(c.since != "main" for c in listed.choices)  # every value dated by a release
    choice = next(c for c in listed.choices if c.value == value)
    since = str(choice.since)
    assert release_before("vllm", before, since)
    assert not release_before("vllm", listed.read_through, since)
    assert choice in listed.taken_by(since) and choice in listed.taken_by(listed.read_through)
    assert choice not in listed.taken_by(before)
    refusal = kv_cache_dtype_problem("vllm", before, value)
    assert refusal.startswith(f"vLLM {before} refuses --kv-cache-dtype {value}: ")
    assert f"; {value} came in v{since}" in refusal
    at_since = kv_cache_dtype_problem("vllm", since, value)
    if choice.modelled:
        assert at_since == ""
    else:
        assert at_since == f"--kv-cache-dtype {value} is not modelled: vLLM's {value} is " \
                           f"{choice.why}"


@pytest.mark.parametrize(("engine", "value"), [("vllm", "fp8_inc"), ("vllm", "turboquant_k8v4"),
                                               ("sglang", "fp4_mx_block16")])
@pytest.mark.parametrize("flag", ["--kv-cache-dtype", "--kv-dtype"])
def test_an_engines_value_ridgeline_has_no_format_for_is_refused_as_not_modelled(
        capsys: pytest.CaptureFixture[str], engine: str, value: str, flag: str) -> None:
    """It was 'unknown KV-cache dtype', as if no engine had it."""
    line = refused(capsys, *FIT, "--engine", engine, flag, value)
    assert line.startswith(f"ridgeline: error: {flag} {value} is not modelled: ")
    assert "unknown" not in line


def test_ridgelines_own_flag_and_an_engine_without_the_flag_keep_ridgelines_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    taken(capsys, *FIT, "--kv-dtype", "bf16")
    taken(capsys, *FIT, "--kv-dtype", "fp16")
    taken(capsys, *FIT, "--engine", "trtllm", "--kv-cache-dtype", "bf16")  # kv_cache_config
    # a release before the lists read is not checked (its list was not read)
    assert kv_cache_dtype_problem("vllm", "0.10.0", "bf16") == ""
    assert kv_cache_dtype_problem("sglang", "0.4.6", "fp8") == ""


LLAMA = ("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights",
         "q4_k_m", "--max-model-len", "8k", "--json")


@pytest.mark.parametrize("command", ["fit", "decode"])
def test_llama_servers_fa_aliases_read_as_the_value_they_stand_for(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """llama-server reads -fa enabled/1 as on, disabled/0 as off, -1 as auto (common/arg.cpp;
    PRs #15434 and #15746); ridgeline refused them as no choice ('invalid choice: 1')."""
    values = load_data("engine_choices.json")["flash_attn"]["llama.cpp"]["values"]
    assert set(values.values()) == {"on", "off", "auto"}
    argv = LLAMA if command == "fit" else ("decode", *LLAMA[1:8], "--context", "8192",
                                            "--json")
    for alias, meant in values.items():
        code, out, err = run_cli(capsys, *argv, "-fa", alias)
        assert code == 0, (alias, err)
        code, plain, _ = run_cli(capsys, *argv, "--flash-attn", meant)
        assert code == 0 and out == plain, (alias, meant)


@pytest.mark.parametrize("value", ["On", "yes", "true", "2", ""])
def test_an_fa_value_llama_server_does_not_read_is_refused_naming_those_it_does(
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    line = refused(capsys, *LLAMA, "-fa", value)
    assert f"llama.cpp's -fa takes on, off or auto (or enabled, 1, disabled, 0, -1), got " \
           f"{value!r}" in line


def test_the_docstrings_refusal_is_the_one_fit_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The module docstring's command and the line it prints, read from the docstring."""
    import ridgeline.engine_choices as module

    doc = module.__doc__ or ""
    command = re.search(r"``ridgeline (fit [^`]+)``", doc)
    printed = re.search(r"::\n\n(    ridgeline: error: .+?)\n\n", doc, re.S)
    assert command and printed
    line = refused(capsys, *command.group(1).split())
    assert line == " ".join(printed.group(1).split())

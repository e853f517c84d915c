"""SGLang's --kv-cache-dtype choices as the release wheels 0.5.1-0.5.23 list them
(data/engine_choices.json): bf16 and bfloat16 from 0.5.4, fp4_e2m1 from 0.5.4.post3 and gone
from 0.5.21, mxfp8, nvfp4 and fp4_mx_block16 from 0.5.16. Before, the list was read only to
0.5.9: 0.5.23 (what a run without --engine-version is priced as) was held to take fp4_e2m1
and to refuse mxfp8, nvfp4 and fp4_mx_block16 as no SGLang value at all, and fp4_e2m1's and
bf16's first releases were guesses (0.5.3, 0.5.4).

Each value is taken from its ``since`` and refused by the release before it (the one the
wheels were read at), a value dropped is refused from its ``until`` with the refusal naming
both releases, and one ridgeline has no cache format for is refused as not modelled where the
release takes it.
"""

from __future__ import annotations

import pytest

from ridgeline.engine_choices import EngineChoice, kv_cache_dtype_choices
from ridgeline.engine_versions import release_before, sized_version
from tests.conftest import refused_line, run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k", "--engine", "sglang")

# the newest release read without the value, for each value that came later
BEFORE = {"bf16": "0.5.3.post3", "bfloat16": "0.5.3.post3", "fp4_e2m1": "0.5.4.post2",
          "mxfp8": "0.5.15.post1", "nvfp4": "0.5.15.post1", "fp4_mx_block16": "0.5.15.post1"}


def _choice(value: str) -> EngineChoice:
    listed = kv_cache_dtype_choices("sglang")
    assert listed is not None
    return next(c for c in listed.choices if c.value == value)


def _line(capsys: pytest.CaptureFixture[str], release: str | None, value: str) -> str:
    version = ("--engine-version", release) if release else ()
    code, out, err = run_cli(capsys, *FIT, *version, "--kv-cache-dtype", value, "--json")
    assert (code, bool(out)) in ((0, True), (2, False)), err  # sized, or refused in one line
    return "" if code == 0 else err.strip()


@pytest.mark.parametrize("value", sorted(BEFORE))
def test_a_value_is_taken_from_its_release_and_refused_by_the_one_before(
        capsys: pytest.CaptureFixture[str], value: str) -> None:
    listed = kv_cache_dtype_choices("sglang")
    assert listed is not None
    choice, before = _choice(value), BEFORE[value]
    assert choice.since and release_before("sglang", before, choice.since)
    assert listed.refused_by(before, choice) and choice not in listed.taken_by(before)
    assert choice in listed.taken_by(choice.since) and not listed.refused_by(choice.since,
                                                                             choice)
    line = refused_line(capsys, *FIT, "--engine-version", before, "--kv-cache-dtype", value)
    assert line.startswith(f"ridgeline: error: SGLang {before} refuses --kv-cache-dtype {value}: ")
    assert f"; {value} came in v{choice.since}" in line
    at_since = _line(capsys, choice.since, value)
    if choice.modelled:
        assert at_since == ""  # sized
    else:  # taken by the release, refused by ridgeline as a cache it has no format for
        assert at_since == (f"ridgeline: error: --kv-cache-dtype {value} is not modelled: "
                            f"SGLang's {value} is {choice.why}")


def test_fp4_e2m1_is_refused_from_the_release_that_dropped_it_naming_both_releases(
        capsys: pytest.CaptureFixture[str]) -> None:
    listed = kv_cache_dtype_choices("sglang")
    assert listed is not None
    choice = _choice("fp4_e2m1")
    assert choice.since and choice.until and not choice.modelled
    default = str(sized_version("sglang", None))
    assert not release_before("sglang", default, choice.until)  # 0.5.23 has dropped it
    for release in (choice.until, None):
        said = f"SGLang {release}" if release else \
            f"SGLang {default} (the default --engine-version)"
        taken = listed.taken_by(release or default)
        assert choice not in taken
        assert _line(capsys, release, "fp4_e2m1") == (
            f"ridgeline: error: {said} refuses --kv-cache-dtype fp4_e2m1: it takes one of "
            f"{', '.join(c.value for c in taken)}; fp4_e2m1 was taken from v{choice.since} "
            f"until v{choice.until}, and ridgeline does not size it under any release: "
            f"SGLang's fp4_e2m1 is {choice.why}")
    # the last release that took it answers as not modelled, not as a release refusal
    assert "is not modelled" in _line(capsys, "0.5.20", "fp4_e2m1")
    assert release_before("sglang", "0.5.20", choice.until)


def test_the_newest_release_takes_what_its_wheel_lists(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.23's arg_groups/fields/model.py choices: every one taken or refused as not
    modelled, none as a value SGLang does not take."""
    listed = kv_cache_dtype_choices("sglang")
    assert listed is not None
    default = str(sized_version("sglang", None))
    for choice in listed.taken_by(default):
        line = _line(capsys, None, choice.value)
        assert (line == "") if choice.modelled else ("is not modelled" in line), (choice, line)

"""Follow-ups to the audit of the small commands: the L40S's usable-memory line said no log
pins its runtime total though its own sources cite one; kv's exact bytes and fit's whole
blocks disagreed on one conversation without saying so (a count typed 1e9 stays refused,
as the engines' int flags refuse it);
utilization's missing-rate refusal named no dtype to give, roofline's did; amdahl printed a
target and a ceiling 0.4 apart both as 1,000,000x."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline.amdahl import speedup_ceiling, truthful
from ridgeline.errors import InputError
from ridgeline.hardware import compute_dtype_fix, resolve_accelerator
from ridgeline.units import GIB, parse_count
from tests.conftest import run_cli


def test_l40s_usable_line_names_the_cited_total_and_why_unused(
        capsys: pytest.CaptureFixture[str]) -> None:
    acc = resolve_accelerator("l40s")
    assert acc.runtime_total_bytes is None  # the figure stays unpinned
    code, out, _ = run_cli(capsys, "hardware", "l40s")
    (usable,) = [ln for ln in out.splitlines() if ln.strip().startswith("usable")]
    assert code == 0 and "no log in the record pins" not in usable
    cited = re.search(r"torch total ([\d.]+) GiB", " ".join(acc.sources))
    assert cited and f"{cited.group(1)} GiB" in usable and "keep the rule" in usable
    code, out, _ = run_cli(capsys, "hardware", "a40")  # cites the L40S's log for ECC only
    assert "no log in the record pins" in out


def test_kv_and_fit_say_exact_bytes_and_whole_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("llama-3.1-70b", "--gpu", "h100", "--tp", "2")
    code, out, _ = run_cli(capsys, "kv", *argv, "--context", "2000")
    assert code == 0 and "exact bytes" in out and "whole blocks" in out
    code, out, _ = run_cli(capsys, "fit", *argv, "--max-model-len", "2000", "--json")
    fit = json.loads(out)
    code, text, _ = run_cli(capsys, "fit", *argv, "--max-model-len", "2000")
    block, blocks = fit["block_size"], fit["kv_cache_groups"]["blocks_per_conversation"]
    assert blocks == -(-2000 // block)
    assert f"({blocks} whole blocks of {block} tokens, {blocks * block:,} slots)" in text
    per = float(re.search(r"takes ([\d.]+) GiB per GPU \(", text).group(1))  # type: ignore[union-attr]
    kv = json.loads(run_cli(capsys, "kv", *argv, "--context", "2000", "--json")[1])
    exact = kv["bytes_per_sequence"] / 2 / GIB
    assert per == pytest.approx(exact * blocks * block / 2000, abs=1e-3) and per > exact


@pytest.mark.parametrize("text", ["1e9", "2e3", "1.5e0"])
def test_counts_in_exponent_notation_are_refused(text: str) -> None:
    # the engines' own int flags refuse '1e3' (argparse's int()), so a count mirrors them
    with pytest.raises(InputError, match="whole number"):
        parse_count(text)


def test_utilization_refusal_names_the_dtypes_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    a100 = resolve_accelerator("a100")
    code, _, util = run_cli(capsys, "utilization", "--gpu", "a100", "--running", "8",
                            "--compute-dtype", "fp8")
    code2, _, roof = run_cli(capsys, "roofline", "--gpu", "a100", "--compute-dtype", "fp8")
    assert code == code2 == 2
    assert compute_dtype_fix(a100, ("bf16", "fp16", "fp8", "int8", "fp4")) in util
    assert util.split("; give")[0] == roof.split("; give")[0]  # one wording, then the fix
    assert "; give --compute-dtype" in util and "; give --compute-dtype" in roof


def test_amdahl_tells_a_target_from_a_ceiling_beside_it(capsys: pytest.CaptureFixture[str]) -> None:
    fraction, target = 0.999999, 1000000.3
    ceiling = speedup_ceiling(fraction).ceiling_speedup
    assert abs(target - ceiling) < 0.4
    shown_ceiling = truthful(ceiling, (1.0, target), "f", 2)
    shown_target = truthful(target, (1.0, ceiling), "g", 6)
    assert shown_ceiling != shown_target
    code, out, _ = run_cli(capsys, "amdahl", "--fraction", str(fraction), "--target", str(target))
    assert code == 0 and f"ceiling if the part took no time: {shown_ceiling}x" in out
    assert f"for {shown_target}x end to end" in out
    assert float(shown_ceiling.replace(",", "")) < float(shown_target.replace(",", ""))

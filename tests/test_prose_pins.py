"""Figures quoted in the docs' prose are pinned to the command that computes them
(scripts/prose_pins.py, run by refresh_readme.py --check in CI): a pin that drifts fails."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prose_pins", ROOT / "scripts" / "prose_pins.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["prose_pins"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _all_pins(script: ModuleType) -> list:  # type: ignore[type-arg]
    return [pin for document in script.DOCUMENTS
            for pin in script.pins(document.read_text(encoding="utf-8"), document.name)]


def test_the_docs_pin_their_prose_figures_and_every_pin_parses() -> None:
    script = _script()
    pins = _all_pins(script)
    assert sum(len(pin.checks) for pin in pins) >= 20
    assert {pin.document for pin in pins} >= {"README.md", "fit.md", "plan.md"}
    for pin in pins:
        assert pin.command.startswith("ridgeline ")
        assert all(check.contains or "." in check.path or check.path.isidentifier()
                   for check in pin.checks)


def _quick_pin(script: ModuleType):  # type: ignore[no-untyped-def]
    """The docs' own pin of Llama-3.1-8B's conversations on one H100 (a fit: well under a second)."""
    return next(pin for pin in _all_pins(script) if pin.command.startswith("ridgeline fit llama-3.1-8b")
                and not pin.checks[0].contains and pin.checks[0].expected.replace(",", "").isdigit())


def _as_comment(pin, checks) -> str:  # type: ignore[no-untyped-def]
    return f"<!-- pin: {pin.command} | " + "; ".join(f"{c.path} = {c.expected}" for c in checks) + " -->"


def test_a_drifted_figure_fails_the_check(tmp_path: Path) -> None:
    script = _script()
    pin = _quick_pin(script)
    held = tmp_path / "held.md"
    held.write_text("Some prose." + _as_comment(pin, pin.checks) + "\n", encoding="utf-8")
    count, stale = script.check([held])
    assert (count, stale) == (len(pin.checks), [])

    first = pin.checks[0]
    drifted = script.Check(first.path, str(int(first.expected.replace(",", "")) + 1))
    moved = tmp_path / "moved.md"
    moved.write_text("Some prose." + _as_comment(pin, (drifted, *pin.checks[1:])) + "\n",
                     encoding="utf-8")
    count, stale = script.check([moved])
    assert len(stale) == 1 and f"the prose says {drifted.expected}" in stale[0]

    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "prose_pins.py"), str(moved)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and first.path in result.stderr
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "prose_pins.py"), str(held)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_a_figure_reads_as_the_prose_rounds_it() -> None:
    agrees = _script().agrees
    step_s = 0.021261087942686566
    assert agrees(step_s, "21.26 ms") and agrees(step_s, "21 ms") and agrees(step_s, "21.3 ms") \
        and not agrees(step_s, "21.2 ms") and not agrees(step_s, "21.26")
    assert agrees(63382113976.0, "59.03 GiB") and agrees(70555009024.0, "70.6 GB")
    assert agrees(5.927e-05, "59.3 µs") and not agrees(5.927e-05, "59.2 µs")
    assert agrees(3674648093445.6, "3.7 TB/s") and not agrees(3674648093445.6, "3.6 TB/s")
    assert agrees(33760, "33,760") and not agrees(33761, "33,760")
    assert agrees(True, "true") and agrees("vllm", "vllm") and not agrees(1, "vllm")


@pytest.mark.parametrize("comment", [
    "<!-- pin: ridgeline fit x --json | conversations -->",
    "<!-- pin: ridgeline fit x --json | contains \"9\" -->",
    "<!-- pin: ridgeline fit x | conversations = 9 -->",
    "<!-- pin: ridgeline fit x --json -->",
    "<!-- pin: fit x --json | conversations = 9 -->",
])
def test_a_malformed_pin_is_refused_naming_it(comment: str) -> None:
    with pytest.raises(ValueError):
        _script().pins(comment, "doc.md")

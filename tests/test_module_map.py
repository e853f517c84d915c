"""docs/architecture.md is the code's own map: every module sits in one layer, and the file
is what scripts/module_map.py writes from the modules' docstrings today."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_module_sits_in_a_layer() -> None:
    script = _script()
    mods = script.modules()
    assert "cost" in mods and "sim.scheduler" in mods and "reports.fit" in mods
    assert [name for name in mods if script.layer_of(name) is None] == []


def test_the_layers_run_in_the_briefs_order() -> None:
    """Data before specs, step cost before the simulator and the planner, the CLI last."""
    at = _script().layer_of
    assert at("units") < at("model") < at("roofline") < at("cost") < at("sim.simulator") \
        < at("plan") < at("cli")
    assert at("memory") < at("sim.scheduler") and at("predict") < at("plan")


def test_the_map_is_current() -> None:
    script = _script()
    written = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert written == script.render(script.modules()), \
        "docs/architecture.md is stale: run python scripts/module_map.py"


def test_an_import_against_the_flow_is_listed(tmp_path: Path) -> None:
    """The import reader finds a module's lazy imports, and skips annotation-only ones."""
    script = _script()
    source = tmp_path / "x.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from ridgeline.plan import plan\n"
                      "def f():\n    from ridgeline.sim import scheduler\n"
                      "    from ridgeline.cost import step_cost\n")
    assert script.imports(source, "x") == {"sim.scheduler", "cost"}


def test_help_prints_usage_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`module_map.py --help` (and any mistyped flag) rewrote docs/architecture.md."""
    script = _script()
    out = tmp_path / "architecture.md"
    monkeypatch.setattr(script, "OUT", out)
    for argv, code in ((["--help"], 0), (["--chek"], 2)):
        monkeypatch.setattr("sys.argv", ["module_map.py", *argv])
        with pytest.raises(SystemExit) as stop:
            script.main()
        assert stop.value.code == code and not out.exists()
    assert "--check" in capsys.readouterr().out


def _imported(path: Path, name: str) -> set[str]:
    """The ridgeline modules ``name`` names in any import, those under TYPE_CHECKING too
    (mypy follows them), as module_map names modules ("reports.fit")."""
    package = name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:
                base = ".".join(part for part in ("ridgeline", package, base) if part)
            if base.startswith("ridgeline"):
                stem = base.removeprefix("ridgeline").strip(".")
                found |= {f"{stem}.{a.name}".strip(".") for a in node.names} | {stem}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("ridgeline.") for a in node.names
                      if a.name.startswith("ridgeline.")}
    return found


def _closure(mods: dict[str, Path], start: list[str]) -> set[str]:
    """Every module ``start`` reaches through its imports (lazy and annotation-only too)."""
    seen, todo = set(start), list(start)
    while todo:
        name = todo.pop()
        for found in _imported(mods[name], name) if name in mods else ():
            if found in mods and found not in seen:
                seen.add(found)
                todo.append(found)
    return seen


def test_the_package_and_its_simulator_reach_no_command_line_module() -> None:
    """mypyc type-checks every module `ridgeline` and `ridgeline.sim` reach when it compiles
    the simulator (scripts/compile_simulator.py): fit's report once imported a helper from
    the CLI's llamacpp_launch, which pulled in the CLI, plan and its optional `ray` import,
    and the build failed on a clean install. The library reads no CLI module."""
    mods = _script().modules()
    start = ["__init__"] + [name for name in mods if name.startswith("sim.")]
    reached = _closure(mods, start)
    assert "reports.fit" in reached and "sim.scheduler" in reached  # the walk walks
    assert sorted(m for m in reached if m.startswith("cli") or m in ("plan", "torch_model")) == []

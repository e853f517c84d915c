"""The optional compiled simulator (scripts/compile_simulator.py, mypyc) is the same program:
built from a copy of the source, it reports what the Python one reports, to the last digit.

Skipped, saying why, where mypyc, setuptools, a C compiler or Python's headers are missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = [  # dense; sliding windows (no longer preempting: the SGLang case preempts); Mamba
    # hybrid TP2; speculative decoding; shared prefixes with a small pool; closed loop; SGLang
    # saturated, preempting
    ["llama-3.1-8b", "--gpu", "h100", "--rate", "8", "--num-requests", "1500",
     "--input-len", "lognormal:1000,0.8", "--output-len", "lognormal:250,0.8"],
    ["gemma-3-27b", "--gpu", "h100", "--rate", "12", "--num-requests", "600",
     "--input-len", "lognormal:3000,0.8", "--output-len", "lognormal:400,0.8",
     "--max-model-len", "32768"],
    ["jamba-1.5-mini", "--gpu", "h100", "--num-gpus", "2", "--rate", "6", "--num-requests", "400"],
    ["llama-3.1-8b", "--gpu", "h100", "--rate", "4", "--num-requests", "300",
     "--spec-tokens", "3", "--spec-acceptance", "0.7", "--spec-draft-cost", "0.05"],
    ["qwen3-8b", "--gpu", "l4", "--rate", "3", "--num-requests", "400", "--prefix-groups", "4",
     "--prefix-len", "700", "--max-num-seqs", "16", "--gpu-memory-utilization", "0.85",
     "--max-model-len", "4096"],
    ["llama-3.1-8b", "--gpu", "a100-80gb", "--concurrency", "40", "--num-requests", "500",
     "--input-len", "uniform:100,4000"],
    ["llama-3.1-8b", "--gpu", "l40s", "--engine", "sglang", "--rate", "14",  # SGLang, saturated
     "--num-requests", "600", "--input-len", "lognormal:1000,0.6", "--output-len", "300"],
]


def test_the_build_compiles_every_simulator_module() -> None:
    """compile_simulator.py lists every module of the package (a module left out would run
    as Python inside the compiled build, or not import)."""
    spec = importlib.util.spec_from_file_location("compile_simulator",
                                                  ROOT / "scripts" / "compile_simulator.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    sources = {p.stem for p in (ROOT / "src" / "ridgeline" / "sim").glob("*.py")}
    assert set(script.MODULES) == sources - {"__init__"}


def test_gcc_and_clang_builds_skip_the_misleading_indentation_warning() -> None:
    """GCC's -Wmisleading-indentation had cost the build most of its C compile (a warning
    only): the script turns it off where mypyc's flags are GCC's or Clang's, after mypyc's
    own, and leaves MSVC's flags as mypyc gives them."""
    build = pytest.importorskip("mypyc.build")
    script = _script()
    for opt_level in ("0", "3"):
        unix = build.get_cflags(compiler_type="unix", opt_level=opt_level)
        flags = script.c_flags(unix)
        assert flags[:len(unix)] == unix and "-Wno-misleading-indentation" in flags[len(unix):]
        msvc = build.get_cflags(compiler_type="msvc", opt_level=opt_level)
        assert script.c_flags(msvc) == msvc


def _compiler_missing() -> str:
    for name in ("mypyc", "setuptools"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.exists():
        return f"no Python headers ({headers})"
    return ""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compile_simulator",
                                                  ROOT / "scripts" / "compile_simulator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Each build runs every case in one process (a process each had cost more than the runs):
# ``simulate ... --json`` through the CLI's main, and which build ridgeline.sim is.
RUN_CASES = """import io, json, sys
from contextlib import redirect_stdout
import ridgeline.sim
from ridgeline.cli import main
reports = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["simulate", *args, "--json"])
    reports.append(json.loads(out.getvalue()) if code == 0 else {"exit": code})
print(json.dumps({"build": ridgeline.sim.build(), "reports": reports}))
"""
# The C compiler's optimisation and debug levels of the test's build: "0" builds in about half
# the time of the wheel's "3" (scripts/compile_simulator.py), and the program computes the
# same; no debug information saves about another second of GCC's time.
TEST_OPT_LEVEL = "0"
TEST_DEBUG_LEVEL = "0"


def _simulate_cases(src: Path) -> dict[str, Any]:
    """Every case of CASES simulated by the package under ``src``: its build and reports."""
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", RUN_CASES, json.dumps(CASES)],
                         capture_output=True, text=True, env=env, check=True, cwd=src).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(pure, compiled) copies of the package."""
    if reason := _compiler_missing():
        pytest.skip(f"cannot compile the simulator here: {reason}")
    pure, native = tmp_path_factory.mktemp("pure"), tmp_path_factory.mktemp("native")
    ignore = shutil.ignore_patterns("*.so", "*.pyd", "native.json", "__pycache__")
    for where in (pure, native):
        shutil.copytree(ROOT / "src" / "ridgeline", where / "ridgeline", ignore=ignore)
    written = _script().compile_simulator(native, opt_level=TEST_OPT_LEVEL,
                                          debug_level=TEST_DEBUG_LEVEL)
    assert any(p.name.startswith("simulator.") and p.suffix in (".so", ".pyd") for p in written)
    return pure, native


@pytest.fixture(scope="module")
def simulated(builds: tuple[Path, Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    """CASES simulated by the (pure, compiled) builds."""
    pure, native = builds
    return _simulate_cases(pure), _simulate_cases(native)


def test_the_compiled_build_is_the_one_imported(
        simulated: tuple[dict[str, Any], dict[str, Any]]) -> None:
    pure, native = simulated
    assert (pure["build"], native["build"]) == ("python", "compiled")


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{a[0]}-{a[4]}" for a in CASES])
def test_compiled_and_python_simulators_report_the_same(
        simulated: tuple[dict[str, Any], dict[str, Any]], case: int) -> None:
    expected, got = (run["reports"][case] for run in simulated)
    assert expected.get("completed", 0) > 0, expected
    assert got == expected


def test_the_cases_take_the_paths_they_are_named_for(
        simulated: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The paths the comparisons are there for are taken (read from the pure build's
    reports): prefix-cache hits, speculative decoding, a closed loop, a saturated SGLang
    run that preempts."""
    reports = simulated[0]["reports"]

    def report(flag: str) -> dict[str, Any]:
        [case] = [i for i, args in enumerate(CASES) if flag in args]
        return reports[case]  # type: ignore[no-any-return]

    assert report("--prefix-groups")["prefix_cache_hit_blocks"] > 0
    assert report("--spec-tokens")["settings"]["spec_tokens"] == 3
    assert report("--concurrency")["settings"]["workload"]["max_concurrency"] == 40
    sglang = report("--engine")
    assert sglang["settings"]["engine"] == "sglang"
    assert sglang["preemptions"] > 0 and sglang["overloaded"]


def test_a_source_edited_after_compiling_is_reported(builds: tuple[Path, Path]) -> None:
    _, native = builds
    source = native / "ridgeline" / "sim" / "blocks.py"
    original = source.read_text()
    try:
        source.write_text(original + "\n# edited\n")
        env = dict(os.environ, PYTHONPATH=str(native))
        run = subprocess.run([sys.executable, "-c", "import ridgeline.sim"], capture_output=True,
                             text=True, env=env, cwd=native)
        assert "older than its source (blocks.py)" in run.stderr
    finally:
        source.write_text(original)

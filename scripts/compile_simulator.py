#!/usr/bin/env python3
"""Compile the simulator (``ridgeline.sim``) with mypyc, in place: the same source, about
3–4× faster. Optional — ridgeline is pure Python and runs the same without it.

    python scripts/compile_simulator.py [--src src] [--clean]

Needs mypy, setuptools and a C compiler at build time only; the compiled modules need
nothing at run time. The extension modules land beside their sources (``src/ridgeline/sim/
*.so``, git-ignored) with ``native.json``, the hash of each source they were built from:
``ridgeline.sim`` warns when a source has changed since, so an editable install never runs
stale compiled code silently. The opt-in build hook (``hatch_build.py``,
``HATCH_BUILD_HOOK_ENABLE_CUSTOM=1 pip install .``) calls this for a compiled wheel.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Every module of the simulator package, timer included; ``__init__`` stays Python (it holds
# the staleness check).
MODULES = ("blocks", "config", "data_parallel", "decodes", "fast_path", "histogram",
           "independent_ranks", "lanes",
           "metrics", "overload", "pipeline", "request", "run", "scheduler", "simulator",
           "time_series", "timer", "token_ratio", "workload")
GROUP = "ridgeline.sim.native"  # the shared library: ridgeline/sim/native__mypyc.*.so
STAMP = "native.json"
# GCC's -Wmisleading-indentation (in -Wall) looks up the source line of every if/else/loop
# body to compare columns; on mypyc's one 10 MB C file those look-ups took 21 of GCC 12's 34 s
# at -O0 (-ftime-report: "parser function body"). A warning only: the object code is the same
# without it (``objcopy --strip-debug`` then ``cmp``). GCC ignores a -Wno- flag it does not
# know, and mypyc passes Clang -Wno-unknown-warning-option.
FAST_PARSE_FLAGS = ["-Wno-misleading-indentation"]


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def c_flags(mypyc_flags: list[str]) -> list[str]:
    """mypyc's C compiler flags for an extension, plus FAST_PARSE_FLAGS where they are GCC's or
    Clang's (mypyc gives those "-Werror"; MSVC's start with "/" and stay as they are)."""
    return [*mypyc_flags, *FAST_PARSE_FLAGS] if "-Werror" in mypyc_flags else list(mypyc_flags)


def compiled_files(src: Path) -> list[Path]:
    """The extension modules and stamp a build left in ``src``."""
    sim = src / "ridgeline" / "sim"
    out = [p for p in sim.iterdir() if p.suffix in (".so", ".pyd")]
    return sorted([*out, sim / STAMP] if (sim / STAMP).exists() else out)


def clean(src: Path) -> list[Path]:
    removed = compiled_files(src)
    for p in removed:
        p.unlink()
    return removed


def compile_simulator(src: Path, quiet: bool = True, opt_level: str = "3",
                      debug_level: str = "1") -> list[Path]:
    """Build the extension modules in place under ``src``; return the files written.

    ``opt_level`` is the C compiler's optimisation level ("0" to "3"): the build and the
    wheel hook use "3"; a lower level builds faster, runs slower, and computes the same.
    ``debug_level`` is its debug-information level (mypyc's default "1"; "0" writes none).
    """
    from mypyc.build import mypycify
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    src = src.resolve()
    clean(src)
    sim = src / "ridgeline" / "sim"
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(src)  # mypyc names modules from the paths it is given
        try:
            paths = [f"ridgeline/sim/{m}.py" for m in MODULES]
            stdout = sys.stdout
            if quiet:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (restored below)
            try:
                extensions = mypycify(paths, opt_level=opt_level, debug_level=debug_level,
                                      group_name=GROUP, target_dir=str(Path(tmp) / "c"))
                for ext in extensions:
                    ext.extra_compile_args = c_flags(ext.extra_compile_args)
                cmd = build_ext(Distribution({"name": "ridgeline", "ext_modules": extensions}))
                cmd.inplace = True
                cmd.build_temp = str(Path(tmp) / "temp")
                cmd.build_lib = str(Path(tmp) / "lib")
                cmd.ensure_finalized()
                cmd.run()
            finally:
                if quiet:
                    sys.stdout.close()
                    sys.stdout = stdout
        finally:
            os.chdir(cwd)
            shutil.rmtree(src / "build", ignore_errors=True)
    stamp = {m: source_hash(sim / f"{m}.py") for m in MODULES}
    (sim / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    return compiled_files(src)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parent.parent / "src"),
                        help="the source tree holding ridgeline/ (default: this checkout's src)")
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = parser.parse_args()
    src = Path(args.src)
    if args.clean:
        removed = clean(src)
        print(f"removed {len(removed)} files")
        return 0
    try:
        written = compile_simulator(src)
    except ImportError as exc:
        print(f"error: compiling needs mypy and setuptools ({exc})", file=sys.stderr)
        return 2
    print(f"compiled {len(MODULES)} modules into {src / 'ridgeline' / 'sim'} "
          f"({len(written)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

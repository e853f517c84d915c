"""Opt-in build hook: a wheel with the simulator compiled by mypyc.

    HATCH_BUILD_HOOK_ENABLE_CUSTOM=1 pip install .

Off by default (ridgeline is pure Python); when enabled, hatchling installs the hook's build
dependencies (mypy, setuptools) and this compiles ``ridgeline.sim`` in place through
``scripts/compile_simulator.py`` and ships the extension modules in a platform wheel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CompileSimulator(BuildHookInterface):  # type: ignore[type-arg,misc,unused-ignore]
    PLUGIN_NAME = "custom"

    def _script(self) -> Any:
        path = Path(self.root) / "scripts" / "compile_simulator.py"
        spec = importlib.util.spec_from_file_location("compile_simulator", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        src = Path(self.root) / "src"
        written = self._script().compile_simulator(src)
        build_data["artifacts"] += [str(p.relative_to(self.root)) for p in written]
        if version == "standard":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if version == "standard":  # the wheel has them; leave the source tree as it was
            self._script().clean(Path(self.root) / "src")

    def clean(self, versions: list[str]) -> None:
        self._script().clean(Path(self.root) / "src")

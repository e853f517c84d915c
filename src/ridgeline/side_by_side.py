"""Side-by-side comparisons (several engines or accelerators in one table) that keep the
entries that run.

An entry the code refuses (TensorRT-LLM on an AMD card, vLLM on a Mac) is set aside with the
error its own run gives, and the table shows the others; a comparison where no entry runs
fails with the first entry's error, as that entry alone would.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ridgeline.errors import InputError

T = TypeVar("T")


@dataclass(frozen=True)
class NotRun:
    """An entry of a comparison that cannot run, and why."""

    name: str  # as the comparison's rows name it: an engine or accelerator id
    error: str  # the one-line error a run of this entry alone prints

    @property
    def line(self) -> str:
        """The entry's line under the table: its error where that names it ('trtllm does not
        run on mi300x (amd); try --engine vllm'), else the name, then the error."""
        named = re.search(rf"(?<![\w.-]){re.escape(self.name)}(?![\w.-])", self.error)
        return self.error if named else f"{self.name}: {self.error}"

    def to_dict(self, key: str) -> dict[str, Any]:
        return {key: self.name, "error": self.error}


def run_each(names: Sequence[str], run: Callable[[str], T],
             label: Callable[[str], str] = str) -> tuple[list[T], tuple[NotRun, ...]]:
    """``run`` on each name, in order: the results of those that run, and the entries whose
    run was refused (InputError), each under ``label(name)``. Where none runs, the first
    refusal is raised: the one-line error a single entry's run gives."""
    results: list[T] = []
    refused: list[tuple[str, InputError]] = []
    for name in names:
        try:
            results.append(run(name))
        except InputError as exc:
            refused.append((name, exc))
    if not results:
        raise refused[0][1]
    return results, tuple(NotRun(label(name), str(exc)) for name, exc in refused)


def not_run_dict(entries: tuple[NotRun, ...], key: str) -> dict[str, Any]:
    """The ``not_run`` entries of a comparison's JSON, or nothing where every entry ran."""
    return {"not_run": [e.to_dict(key) for e in entries]} if entries else {}


def weights_by_engine(deployments: Sequence[Any]) -> str:
    """The weights a comparison's header names: one label where every entry runs the same,
    else the most entries' label and each other engine's in brackets ("as stored
    (llama.cpp-cuda: mxfp4_moe)": llama.cpp runs gpt-oss as its GGUF,
    served_model.llamacpp_weights)."""
    labels: dict[str, str] = {d.engine: d.weights.label for d in deployments}
    values = list(labels.values())
    common = max(values, key=values.count)  # the first on a tie
    others = [f"{engine}: {label}" for engine, label in labels.items() if label != common]
    return common + (f" ({', '.join(others)})" if others else "")

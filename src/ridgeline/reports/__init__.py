"""Answers to each command: a result object with ``to_dict``, ``text_lines`` and ``steps``.

The library computes; a report gathers one answer with its explanation; ``render`` prints it.
A report of several points (decode's batches and contexts) may also give ``step_groups``,
(heading, steps) per point, and ``--explain`` works each point through under its heading.
"""

from __future__ import annotations

from typing import Any, Protocol

from ridgeline.explain import Step


class Report(Protocol):
    @property
    def steps(self) -> tuple[Step, ...]: ...

    def to_dict(self) -> dict[str, Any]: ...

    def text_lines(self) -> list[str]: ...

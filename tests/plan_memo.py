"""One search per question within a test module: a ``PlanMemo`` stands in for
``ridgeline.plan.plan`` (the CLI's `plan` looks it up there on each call) and answers a
question the module's tests asked before with its first answer. A plan is a function of its
arguments, its loads drawn from their own seeds, and a PlanResult is frozen; ``workers`` and
``executor`` only spread one search over processes, so a question asked with others is the
same question. A card named by id is keyed by its record too, so a user's record registered
anew under one id is asked afresh. A test that patches what the search calls (a spy) calls
the real ``plan`` instead."""

from __future__ import annotations

import inspect
from typing import Any

import ridgeline.plan as planning
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.hardware import Accelerator, resolve_accelerator

SEARCH = planning.plan
_SIGNATURE = inspect.signature(SEARCH)
_HOW = frozenset({"workers", "executor"})  # how the search is spread, not what it asks


def _question(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments that decide the answer, defaults filled in as the search reads them and
    ``gpus`` a tuple of (name, record); None where a card is not known (the search refuses
    it: asked each time)."""
    bound = _SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    asked = {k: v for k, v in bound.arguments.items() if k not in _HOW}
    # the search reads no prices as {} and no profile as the engine's own (``_plan``)
    asked["prices"] = dict(asked["prices"] or {})
    asked["profile"] = asked["profile"] or profile_for(asked["engine"])
    try:
        asked["gpus"] = tuple((g, g if isinstance(g, Accelerator) else resolve_accelerator(g))
                              for g in asked["gpus"])
    except InputError:
        return None
    return asked


class PlanMemo:
    """``plan`` answered once per question (``_question``) for as long as this object lives:
    one a module holds shares a search between its tests."""

    def __init__(self, search: Any = SEARCH) -> None:
        self._search = search  # the search asked (the real one, or a stand-in already there)
        self._answered: list[tuple[dict[str, Any], planning.PlanResult]] = []
        self.searches = 0  # the searches made, not answered from before

    def __call__(self, *args: Any, **kwargs: Any) -> planning.PlanResult:
        asked = _question(args, kwargs)
        for question, result in self._answered:
            if question == asked:
                return result
        self.searches += 1
        result = self._search(*args, **kwargs)
        if asked is not None:
            self._answered.append((asked, result))
        return result

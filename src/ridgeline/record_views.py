"""How the records the Python API hands out behave in a user's hands: a mapping inside a
shared record that no one can change (ReadOnlyDict), and a repr that shows a result's
headline (headline_repr) or the settings given (given_fields_repr) rather than every field
and --explain step it carries."""

from __future__ import annotations

import math
from dataclasses import MISSING, fields
from typing import NoReturn, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ReadOnlyDict(dict[K, V]):
    """A dict no one can change, for a mapping inside a frozen record that a cache hands out
    (an Accelerator's peak_flops): ``acc.peak_flops["bf16"] *= 2`` raises TypeError, where a
    plain dict would double every later lookup's ridge. Still a dict, so json.dumps,
    dataclasses.asdict, ==, pickle and copy take it as one; ``dict(d)`` is a copy to edit."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"this {type(self).__name__} is read-only (a record's figures, shared "
                        "by every lookup): edit a copy, dict(it), or dataclasses.replace the "
                        "record")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __reduce__(self) -> tuple[type[ReadOnlyDict[K, V]], tuple[dict[K, V]]]:
        # pickle and copy rebuild it whole, never item by item through __setitem__
        return type(self), (dict(self),)


def headline_repr(record: object, names: tuple[str, ...]) -> str:
    """``Type(name=value, …)`` for the ``names`` that make ``record``'s headline, fields or
    properties, each float to 6 significant figures: a decode floor of Llama-3.1-8B on an
    H100 reads ``DecodeFloor(batch=32, context=2000, step_time_s=0.00701706, …)`` in 160
    characters, where its fields and --explain steps run to 3,600."""
    def shown(value: object) -> str:
        if isinstance(value, float) and math.isfinite(value):
            return f"{value:.6g}"
        return repr(value)

    return f"{type(record).__name__}(" + ", ".join(
        f"{name}={shown(getattr(record, name))}" for name in names) + ")"


def given_fields_repr(record: object) -> str:
    """``Type(name=value, …)`` for the dataclass fields of ``record`` that differ from their
    defaults, as a user would write the call: EngineSettings(max_model_len=8192), not its
    fifty fields."""
    given = []
    for f in fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if (f.default is MISSING and f.default_factory is MISSING) or value != default:
            given.append(f"{f.name}={value!r}")
    return f"{type(record).__name__}({', '.join(given)})"

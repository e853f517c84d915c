"""Reading a JSON record a user hands in (an accelerator, an engine profile): each field by
name, as its kind and within the range the thing it describes can have, or refused with
the field named."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ridgeline.errors import InputError, shorten


class Fields:
    """One record's fields; ``origin`` (a file, a catalog entry) starts every refusal."""

    def __init__(self, data: Mapping[str, Any], origin: str) -> None:
        self.data, self.origin = data, origin

    def refuse(self, key: str, wants: str, value: Any) -> InputError:
        return InputError(f"{self.origin}: {key} must be {wants}, got {shorten(repr(value))}")

    def text(self, key: str, default: str | None = None) -> str:
        """A non-empty string (``default`` where the field is absent)."""
        value = self.data.get(key, default)
        if value is None:
            raise InputError(f"{self.origin}: the record lacks {key!r}")
        if not isinstance(value, str) or (not value.strip() and default is None):
            raise self.refuse(key, "a non-empty string", value)
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings (absent or null: empty); a number, a string or an object in its
        place is refused by name, not iterated (a string's characters are not its ids)."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise self.refuse(key, "a list of strings", value)
        return tuple(value)

    def named_texts(self, key: str, allowed: tuple[str, ...]) -> dict[str, str]:
        """An object of ``allowed`` names to non-empty strings (absent or null: empty); a
        name outside them is refused, listing them."""
        value = self.data.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
                isinstance(v, str) and v.strip() for v in value.values()):
            raise self.refuse(key, "an object of field names to non-empty strings", value)
        unknown = next((k for k in value if k not in allowed), None)
        if unknown is not None:
            raise self.refuse(key, f"keyed by {', '.join(allowed)}", unknown)
        return {str(k): v for k, v in value.items()}

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        """One of ``allowed`` words, or "" where the field is absent, null or empty (not
        said): a word outside them (a typo, another spelling) is refused, listing them."""
        value = self.data.get(key)
        if value is None or value == "":
            return ""
        if not isinstance(value, str) or value not in allowed:
            raise self.refuse(key, f"one of {', '.join(allowed)}", value)
        return value

    def number(self, key: str, low: float, high: float, default: float | None = None,
               open_low: bool = False) -> float:
        """A finite number in [low, high] ((low, high] with ``open_low``)."""
        value = self.data.get(key, default)
        if value is None:
            raise InputError(f"{self.origin}: the record lacks {key!r}")
        return self.check(key, value, low, high, open_low)

    def whole(self, key: str, low: int, high: int, default: int | None = None) -> int:
        """A whole number in [low, high]."""
        value = self.number(key, low, high, default)
        if value != int(value):
            raise self.refuse(key, f"a whole number in [{low}, {high}]", self.data.get(key))
        return int(value)

    def optional(self, key: str, low: float, high: float, open_low: bool = False
                 ) -> float | None:
        """As ``number``, or None where the field is absent or null."""
        value = self.data.get(key)
        return None if value is None else self.check(key, value, low, high, open_low)

    def numbers(self, key: str, low: float, high: float, open_low: bool = False
                ) -> dict[str, float]:
        """An object of names to numbers, each in range (absent: empty)."""
        value = self.data.get(key) or {}
        if not isinstance(value, Mapping):
            raise self.refuse(key, "an object of names to numbers", value)
        return {str(k): self.check(f"{key}[{k}]", v, low, high, open_low)
                for k, v in value.items()}

    def check(self, key: str, value: Any, low: float, high: float, open_low: bool) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(key, "a number", value)
        try:
            x = float(value)
        except OverflowError:  # an integer of hundreds of digits
            raise self.refuse(key, f"at most {high:g}", value) from None
        if not math.isfinite(x) or x < low or (open_low and x == low) or x > high:
            left = "(" if open_low else "["
            if math.isinf(high):
                wants = f"a finite number above {low:g}" if open_low \
                    else f"a finite number of at least {low:g}"
            else:
                wants = f"in {left}{low:g}, {high:g}]"
            raise self.refuse(key, wants, value)
        return x

"""The arithmetic behind a number: formula, inputs with their sources, and the result.

Every answer carries a tuple of ``Step``; ``--explain`` prints them so that each figure
is "one division you can repeat".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Quantity:
    name: str
    value: float | str
    unit: str
    source: str = ""
    # where the text needs more than shown_number's four significant digits for the step's
    # division to repeat from it (amdahl's times, to 5: 6.7275 ÷ 14.607 = 0.4606), the digits
    # it shows; the JSON keeps the value whole, a number (step_dict leaves this out)
    digits: int = field(default=0, compare=False)

    def show(self) -> str:
        shown = self.value if isinstance(self.value, str) else shown_number(self.value)
        if self.digits and not isinstance(self.value, str) \
                and "e" not in (more := f"{self.value:,.{self.digits}g}"):
            shown = more
        text = f"{self.name} = {shown} {self.unit}".rstrip()
        return f"{text}  [{self.source}]" if self.source else text


@dataclass(frozen=True)
class Step:
    label: str
    formula: str
    inputs: tuple[Quantity, ...]
    result: Quantity

    def lines(self) -> list[str]:
        out = [f"{self.label}: {self.formula}"]
        out += [f"    {q.show()}" for q in self.inputs]
        out.append(f"    => {self.result.show()}")
        return out


def quantity_dict(quantity: Quantity) -> dict[str, Any]:
    """A quantity as --json gives it: name, value (a number wherever it is one), unit, source."""
    return {"name": quantity.name, "value": quantity.value, "unit": quantity.unit,
            "source": quantity.source}


def step_dict(s: Step) -> dict[str, Any]:
    """A step as --json's ``explain`` gives it: {label, formula, inputs, result}."""
    return {"label": s.label, "formula": s.formula,
            "inputs": [quantity_dict(i) for i in s.inputs], "result": quantity_dict(s.result)}


def step(label: str, formula: str, result: Quantity, *inputs: Quantity) -> Step:
    return Step(label, formula, tuple(inputs), result)


def q(name: str, value: float | str, unit: str = "", source: str = "", digits: int = 0
      ) -> Quantity:
    return Quantity(name, value if isinstance(value, str) else float(value), unit, source,
                    digits)


# the most significant digits a figure that is not whole gets to show it is not (past them,
# float noise: 32.000000000001 prints as 32)
MAX_SIGNIFICANT = 9


def shown_number(value: float) -> str:
    """Four significant digits, but a factor below 10 that is not whole never prints as a
    whole one: block-fp8's 1.000244 bytes per weight prints as 1.0002, not 1 (which reads as
    exact), so the division repeated from the printed inputs gives the printed result
    (DeepSeek-V3's batch to the H100 ridge: 590.7 × 1.0002 ÷ 2 ÷ 0.03125 → 9,454, where 1
    gave 9,452). Larger figures keep four digits (31 ms, not 30.999)."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1e4:  # 15,830 TFLOP/s, not 1.583e+04
        return f"{value:,.0f}"
    if abs(value) < 1e-3:
        return f"{value:.4g}"
    shown = f"{value:,.4g}"
    if abs(value) < 10 and "." not in shown:  # 1.000244 rounds to "1"
        for digits in range(5, MAX_SIGNIFICANT + 1):
            more = f"{value:,.{digits}g}"
            if "." in more:
                return more
    return shown

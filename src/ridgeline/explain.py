"""The arithmetic behind a number: formula, inputs with their sources, and the result.

Every answer carries a tuple of ``Step``; ``--explain`` prints them so that each figure
is "one division you can repeat".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quantity:
    name: str
    value: float | str
    unit: str
    source: str = ""

    def show(self) -> str:
        shown = self.value if isinstance(self.value, str) else shown_number(self.value)
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


def step(label: str, formula: str, result: Quantity, *inputs: Quantity) -> Step:
    return Step(label, formula, tuple(inputs), result)


def q(name: str, value: float | str, unit: str = "", source: str = "") -> Quantity:
    return Quantity(name, value if isinstance(value, str) else float(value), unit, source)


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

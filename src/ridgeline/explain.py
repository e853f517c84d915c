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
        shown = self.value if isinstance(self.value, str) else _num(self.value)
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


def _num(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1e4:  # 15,830 TFLOP/s, not 1.583e+04
        return f"{value:,.0f}"
    if abs(value) < 1e-3:
        return f"{value:.4g}"
    return f"{value:,.4g}"

"""Nelder–Mead, the derivative-free minimiser the profile fit runs in log-parameter space.

The fit's loss is piecewise (clamps, a Huber loss, rows that stop being predictable), so it
takes no gradient: the simplex walks on values alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def minimise(loss: Callable[[Sequence[float]], float], x0: Sequence[float]) -> list[float]:
    """Nelder–Mead from x0 in broad steps, then again in fine ones from where it stopped."""
    best = nelder_mead(loss, x0, step=0.5, iterations=400)
    return nelder_mead(loss, best, step=0.15, iterations=300)


def nelder_mead(f: Callable[[Sequence[float]], float], x0: Sequence[float],
                step: float = 0.5, iterations: int = 300) -> list[float]:
    """Minimise f from x0 (Nelder & Mead 1965; standard coefficients 1, 2, 0.5, 0.5)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)]
                            for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda i: values[i])
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < 1e-10:
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflect = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(reflect)
        if fr < values[0]:
            expand = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(expand)
            simplex[-1], values[-1] = (expand, fe) if fe < fr else (reflect, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflect, fr
        else:
            contract = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(contract)
            if fc < values[-1]:
                simplex[-1], values[-1] = contract, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)]
                                    for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=lambda i: values[i])]

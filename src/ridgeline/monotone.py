"""The largest whole number a monotone test holds for: the one search behind every "most
that fits" (a pool's conversations, llama.cpp's slots, -ngl layers, a replica's batch within
an SLO, the longest context that starts)."""

from __future__ import annotations

from collections.abc import Callable


def longest_holding(holds: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high] for which ``holds(n)``, by bisection: ``holds(low)`` is
    true, and ``holds`` is true up to some n and false past it (a pool holds no more
    conversations as they grow; a step is no faster as the batch grows). ``holds`` is asked
    about log2(high − low) times: [1, 1,000] in 10."""
    while low < high:
        mid = (low + high + 1) // 2
        if holds(mid):
            low = mid
        else:
            high = mid - 1
    return low


def fewest_holding(holds: Callable[[int], bool], low: int, high: int) -> int:
    """The smallest n in [low, high] for which ``holds(n)``, by bisection: ``holds(high)``
    is true, and ``holds`` is false up to some n and true from it on (a pool of more
    replicas waits no longer). ``high`` where nothing below it holds; [13, 47] in 6 asks."""
    return longest_holding(lambda n: n < low or not holds(n), low - 1, high - 1) + 1

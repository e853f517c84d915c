"""The one search behind every "most that fits": the largest n a monotone test holds for."""

import math

import pytest

from ridgeline.monotone import fewest_holding, longest_holding


@pytest.mark.parametrize(("edge", "low", "high"), [(1, 1, 1), (1, 1, 1000), (737, 1, 1000),
                                                   (1000, 1, 1000), (5, 5, 9), (0, 0, 64)])
def test_finds_the_last_n_the_test_holds_for(edge: int, low: int, high: int) -> None:
    asked: list[int] = []

    def holds(n: int) -> bool:
        asked.append(n)
        return n <= edge

    assert longest_holding(holds, low, high) == edge
    # bisection: about log2 of the range's width questions, each inside the range
    assert len(asked) <= math.ceil(math.log2(high - low + 1))
    assert all(low <= n <= high for n in asked)


def test_a_pool_that_shrinks_with_each_slot() -> None:
    # held(n) falls as slots are added (each takes a slice of a 10,000-token pool for its
    # own buffers); the most slots that each hold one 100-token conversation
    def held(slots: int) -> int:
        return (10_000 - 20 * slots) // 100

    most = longest_holding(lambda n: held(n) >= n, 1, 500)
    assert held(most) >= most and held(most + 1) < most + 1


@pytest.mark.parametrize(("edge", "low", "high"), [(13, 13, 47), (40, 13, 47), (47, 13, 47),
                                                   (1, 1, 1), (5, 2, 6)])
def test_finds_the_first_n_the_test_holds_from(edge: int, low: int, high: int) -> None:
    asked: list[int] = []

    def holds(n: int) -> bool:
        asked.append(n)
        return n >= edge

    assert fewest_holding(holds, low, high) == edge
    assert len(asked) <= math.ceil(math.log2(high - low + 1))
    assert all(low <= n < high for n in asked)  # high itself taken as holding, never asked

"""A note that compares two figures prints them apart, or says nothing: "mean 8.0 ms is
above its p99, 8.0 ms" and "0.2 s, 1.4× the 0.2 s" read as misprints."""

from __future__ import annotations

from ridgeline.reports.simulate_cautions import itl_mean_past_p99
from ridgeline.reports.simulate_overload import distinct_places


def test_an_itl_mean_past_its_p99_only_by_what_the_table_hides_gets_no_note() -> None:
    """A 4-request trace: mean 8.024 ms, p99 7.952 ms, both 8.0 in the table: no note. The
    70B run's 38.1 beside 34.5 keeps it."""
    assert itl_mean_past_p99({"mean": 8.024e-3, "p99": 7.952e-3}, 0) == ""
    kept = itl_mean_past_p99({"mean": 38.1e-3, "p99": 34.5e-3}, 357)
    assert "38.1 ms" in kept and "34.5 ms" in kept


def test_queue_means_print_to_the_places_that_tell_them_apart() -> None:
    late, early = 0.234, 0.171
    places = distinct_places(late, early)
    assert places == 2 and f"{late:.{places}f}" != f"{early:.{places}f}"
    assert distinct_places(2.4, 1.7) == 1  # apart at one place: printed as before

"""Shared fixtures: the repository's copy of the published measurements, and a plan searched once
for a test that reads it as text and as JSON (plan_once)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from ridgeline.sim.simulator import Simulator

# The suite's property tests draw the same examples on every run (CI stays green or red for
# the code, not the draw); `pytest --hypothesis-profile=explore` draws fresh ones, and a
# failure found that way is pinned as an example.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "validation" / "measurements.csv"
LOWBATCH = ROOT / "validation" / "lowbatch.csv"
EAGER = ROOT / "validation" / "eager.csv"
ROCM = ROOT / "validation" / "rocm.csv"
CUDA = ROOT / "validation" / "cuda.csv"
SERVING = ROOT / "validation" / "serving.csv"


@pytest.fixture(scope="session")
def measurement_rows() -> list[dict[str, str]]:
    with MEASUREMENTS.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """One command in-process: its exit code (argparse's own refusals included), stdout,
    stderr."""
    from ridgeline.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse refuses a flag's value before main's handler runs
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def same_answer(out: str, other: str) -> bool:
    """Whether two --json answers are the same but for their ``notes`` (the launch line's flags
    read and ignored, which --json keeps as stderr says them): what a flag that changes
    nothing leaves."""
    import json

    mine, theirs = json.loads(out), json.loads(other)
    mine.pop("notes", None)
    theirs.pop("notes", None)
    return bool(mine == theirs)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """One command's --json object, the command having exited 0 (its stderr shown if not)."""
    import json

    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def refused_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a refused command prints: exit 2, nothing on stdout, no traceback."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def plan_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one test, ``ridgeline.plan.plan`` answers a question it was asked before with
    its first answer: a test that reads one plan both as text and as --json searches and
    simulates once (tests/plan_memo.py: what makes two questions the same). The CLI's parsing
    and both reports still run on each call."""
    import ridgeline.plan as planning
    from tests.plan_memo import PlanMemo

    monkeypatch.setattr(planning, "plan", PlanMemo(planning.plan))


@pytest.fixture(scope="module")
def plan_shared() -> Iterator[None]:
    """As plan_once, for a module's tests together: the tests that read one plan (as text and
    as --json) search and simulate it once between them."""
    import ridgeline.plan as planning
    from tests.plan_memo import PlanMemo

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planning, "plan", PlanMemo(planning.plan))
        yield


@pytest.fixture
def simulate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one test, the simulator (``ridgeline.sim.pipeline.run_replica``, as `simulate`
    calls it) answers a run it made before with that run's result: a test that reads one
    simulation as --json and as text simulates once. A run is keyed by its deployment,
    profile, settings and the requests it draws (drawn afresh for the key: a seeded workload
    draws the same ones each pass), so a different load or seed runs anew. The CLI's parsing,
    pool sizing and both reports still run on each call."""
    import ridgeline.sim.pipeline as pipeline

    run = pipeline.run_replica
    answered: list[tuple[Any, Any]] = []

    def once(dep: Any, profile: Any, config: Any, requests: Any, *args: Any,
             **kwargs: Any) -> Any:
        drawn = tuple((r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.prefix_group,
                       r.prefix_tokens) for r in requests)
        key = (repr(dep), repr(profile), repr(config), drawn, args, sorted(kwargs.items()))
        for asked, result in answered:
            if asked == key:
                return result
        result = run(dep, profile, config, requests, *args, **kwargs)
        answered.append((key, result))
        return result

    monkeypatch.setattr(pipeline, "run_replica", once)


def config_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, config: Any) -> str:
    """`ridgeline model` on ``config`` written as a config.json: exit 2, one line, no
    traceback; the line."""
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), "utf-8")
    code, out, err = run_cli(capsys, "model", str(path))
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def explained(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, list[dict]]:
    """A command's --json --explain answer and its steps."""
    import json

    code, out, err = run_cli(capsys, *argv, "--json", "--explain")
    assert code == 0, err
    data = json.loads(out)
    return data, data["explain"]


def explain_by_label(steps: list[dict], label: str) -> dict:
    """The one --explain step of ``label``."""
    (found,) = [s for s in steps if s["label"] == label]
    return found


def explain_inputs(s: dict) -> dict[str, float]:
    """An --explain step's inputs by name, in base units."""
    return {i["name"]: i["value"] for i in s["inputs"]}


def explain_result(s: dict) -> float:
    """An --explain step's result, in base units."""
    return float(s["result"]["value"])



def sim_workloads(most_requests: int) -> Any:
    """A hypothesis strategy of small simulator loads (1 to ``most_requests`` requests):
    fixed, uniform and log-normal prompts, one-token to Zipf outputs, a slow, a fast and an
    all-at-once rate, and a third of them with 3 shared 100-token prefixes."""
    from dataclasses import replace

    from hypothesis import strategies as st

    from ridgeline.sim.workload import Workload

    return st.builds(
        Workload,
        num_requests=st.integers(1, most_requests),
        input_len=st.sampled_from(["64", "uniform:1,700", "lognormal:200,1.0"]),
        output_len=st.sampled_from(["1", "uniform:1,300", "zipf:1.1,400"]),
        rate=st.sampled_from([2.0, 50.0, float("inf")]),
        seed=st.integers(0, 10_000),
    ).flatmap(lambda w: st.sampled_from([(0, 0), (0, 0), (3, 100)]).map(
        lambda prefix: replace(w, prefix_groups=prefix[0], prefix_len=prefix[1])))


def same_run_both_paths(run: Any) -> None:
    """``run(fast)`` → (simulator, result) on the fast path and the plain step: the same
    completions, refusals and preemptions, the run's time within half a percent, and every
    block given back at the end."""
    fast_sim, fast = run(True)
    slow_sim, slow = run(False)
    assert fast.completed == slow.completed and fast.rejected == slow.rejected
    assert fast.preemptions == slow.preemptions
    assert fast.duration_s == pytest.approx(slow.duration_s, rel=0.005)
    assert fast_sim.pool.held == slow_sim.pool.held == 0


def check_balance(sim: Simulator) -> None:
    """The pool's blocks all accounted for: held, free or evictable, and the held ones the
    running and retiring requests' own plus the shared (prefix) blocks still referenced."""
    pool, s = sim.pool, sim.scheduler
    assert pool.held + pool.free + len(pool.evictable) == pool.total
    held = sum(r.private_blocks for r in s.running + sim.retiring) + sum(
        1 for n in pool.refs.values() if n > 0)
    assert held == pool.held


@pytest.fixture
def unsimulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ridgeline.plan.plan`` with its rows left unsimulated (``verify=0``), for a test that
    reads what the search settles before any check runs: the cards searched and left out, the
    layouts priced, the launch lines, the card the cheapest row is on. (With ``plan_once``,
    list it after: the unsimulated question is the one remembered.)"""
    import functools

    import ridgeline.plan as planning

    monkeypatch.setattr(planning, "plan", functools.partial(planning.plan, verify=0))


def leave_splits_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plan`` with its split prefill and decode pools left unchecked (None: no size held),
    for a test whose claim is about the co-located candidates: the splits share neither
    their budget of checks nor, where a single pool holds, the winner, and their simulations
    cost as much as those checks."""
    import ridgeline.plan as planning

    monkeypatch.setattr(planning, "verify_disaggregated", lambda *args, **kwargs: None)


@pytest.fixture
def splits_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """As leave_splits_unchecked, for a whole test."""
    leave_splits_unchecked(monkeypatch)

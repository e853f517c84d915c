"""StepTimer: the simulator's remembered step_cost equals the formula it remembers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline.cost import Seq, batch_shape, shape_time_s
from ridgeline.engines import profile_for
from ridgeline.sim.timer import StepTimer
from tests.test_cost import dep

batches = st.lists(st.tuples(st.sampled_from([1, 1, 1, 2, 37, 700]), st.integers(0, 9000)),
                   min_size=1, max_size=24)
TIMED = [("llama-3.1-8b", 1, 1, False), ("llama-3.1-70b", 4, 2, False),
         ("qwen3-30b-a3b", 4, 1, True), ("deepseek-v3", 8, 1, False),
         ("jamba-1.5-mini", 1, 1, False), ("gemma-3-27b", 2, 1, False)]


@settings(max_examples=40, deadline=None)
@given(batch=batches, which=st.sampled_from(TIMED), engine=st.sampled_from(["vllm", "trtllm"]))
def test_the_step_timer_equals_shape_time(batch: list[tuple[int, int]],
                                          which: tuple[str, int, int, bool], engine: str) -> None:
    """The simulator's memoised timer is the same formula: dense, TP+PP, MoE with EP,
    MLA, a Mamba hybrid and sliding windows."""
    model, n, pp, ep = which
    d = dep(model, n=n * pp, pp=pp, ep=ep)
    profile = profile_for(engine)
    timer = StepTimer(d, profile)
    shape = batch_shape(d, [Seq(new, ctx) for new, ctx in batch])
    assert timer.time_s(shape) == pytest.approx(shape_time_s(d, shape, profile), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(batch=batches, model=st.sampled_from(["llama-3.1-8b", "deepseek-v3", "jamba-1.5-mini",
                                             "gemma-3-27b"]))
def test_a_batch_summed_to_counts_and_sums_costs_what_the_batch_costs(
        batch: list[tuple[int, int]], model: str) -> None:
    """The simulator's summed forms: a decode count and context sum (full attention), or the
    keys each window reads (sliding windows), beside the prefill chunks."""
    d = dep(model, n=8 if model == "deepseek-v3" else 1)
    seqs = [Seq(new, ctx) for new, ctx in batch]
    decodes = [s.context_tokens for s in seqs if s.new_tokens == 1]
    chunks = [s for s in seqs if s.new_tokens > 1]
    timer = StepTimer(d, profile_for("vllm"))
    expected = shape_time_s(d, batch_shape(d, seqs), profile_for("vllm"))
    keys = {w: float(sum(c + 1 if w is None else min(c + 1, w) for c in decodes))
            for w in timer.windows}
    assert timer.keys_time_s(len(decodes), keys, chunks) == pytest.approx(expected)
    if timer.full_attention:
        assert timer.bulk_time_s(len(decodes), sum(decodes), chunks) == pytest.approx(expected)
        if decodes and not chunks:
            assert timer.decode_time_s(len(decodes), sum(decodes)) == pytest.approx(expected)


@settings(max_examples=30, deadline=None)
@given(decodes=st.lists(st.integers(0, 9000), min_size=1, max_size=300),
       model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3",
                              "jamba-1.5-mini"]))
def test_a_decode_only_step_costs_its_shape_to_the_last_digit(decodes: list[int],
                                                              model: str) -> None:
    """bulk_time_s of decodes alone (the fast path's single decode steps, which take
    decode_time_s's remembered terms where one kind of full attention runs) is time_s of the
    step's shape exactly, not only nearly: the simulator's output must not move by a digit."""
    d = dep(model, n=8 if model == "deepseek-v3" else 1)
    timer = StepTimer(d, profile_for("vllm"))
    shape = batch_shape(d, [Seq(1, c) for c in decodes])
    want = StepTimer(d, profile_for("vllm")).time_s(shape)
    assert timer.bulk_time_s(len(decodes), sum(decodes)) == want


def test_only_full_attention_models_are_timed_from_a_context_sum() -> None:
    assert not StepTimer(dep("gemma-3-27b")).full_attention
    assert StepTimer(dep("jamba-1.5-mini")).full_attention  # Mamba layers read no context


@settings(max_examples=25, deadline=None)
@given(batch=batches)
def test_the_step_timer_prices_k_quant_unpacking_as_shape_time_does(
        batch: list[tuple[int, int]]) -> None:
    """On Metal with K-quant weights the weight matmuls carry an unpacking floor: the timer's
    per-token and per-row memos (the LM head counts rows) match the formula."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model

    d = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("apple-m1-max-32c"),
                         "q4_k_m", engine="llama.cpp-metal")
    profile = profile_for("llama.cpp-metal")
    assert profile.kquant_ops_per_weight > 0
    shape = batch_shape(d, [Seq(new, ctx) for new, ctx in batch])
    assert StepTimer(d, profile).time_s(shape) == pytest.approx(
        shape_time_s(d, shape, profile), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(batch=batches, decodes=st.lists(st.integers(0, 9000), min_size=1, max_size=64),
       which=st.sampled_from(TIMED))
def test_a_step_timed_from_its_rows_is_its_shapes_time_to_the_last_digit(
        batch: list[tuple[int, int]], decodes: list[int],
        which: tuple[str, int, int, bool]) -> None:
    """The simulator times a step from its rows (``rows_time_s``; a step of decodes alone
    under one kind of full attention as ``decode_time_s`` sums it, its context-free part
    remembered): the very number its shape gives, so that no simulated run moves."""
    model, n, pp, ep = which
    d = dep(model, n=n * pp, pp=pp, ep=ep)
    timer = StepTimer(d, profile_for("vllm"))
    for seqs in ([Seq(new, ctx) for new, ctx in batch], [Seq(1, ctx) for ctx in decodes]):
        rows = [s.context_tokens for s in seqs if s.new_tokens == 1]
        chunks = [s for s in seqs if s.new_tokens > 1]
        assert timer.rows_time_s(rows, chunks) == timer.time_s(batch_shape(d, seqs))


def test_the_timer_remembers_a_bounded_number_of_step_shapes() -> None:
    """A long run meets ever more (tokens, rows) shapes; the CUDA-graph decisions kept for
    them start over at the bound (memory had grown with the run), and the times stay the
    formula's."""
    d = dep("llama-3.1-8b", n=1, pp=1, ep=False)
    profile = profile_for("vllm")
    timer = StepTimer(d, profile)
    timer.modes_remembered = 4
    for rows in range(1, 30):
        shape = batch_shape(d, [Seq(1, 500 + 7 * i) for i in range(rows)])
        assert timer.time_s(shape) == pytest.approx(shape_time_s(d, shape, profile), rel=1e-12)
        assert len(timer._modes) <= 4

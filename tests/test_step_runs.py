"""step_time_s remembers a batch by its runs of equal sequences, and a load's drawn lengths
are remembered by the lengths and the seed, not the rate: the planner's CPU, the same
answers."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import (
    Seq,
    batch_shape,
    decode_batch,
    runs_shape,
    seq_runs,
    shape_time_s,
    step_time_s,
)
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.serving_load import Load, _samples, _totals

VLLM = profile_for("vllm")


def llama(model: str = "llama-3.1-8b") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator("h100"), "bf16", None,
                            1, 1)


def deepseek_dp2() -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                            None, 8, 1, "vllm", True, data_parallel_size=2)


BATCHES = [
    decode_batch(300, 1_125),  # one object, 300 times
    [Seq(1, 1_125) for _ in range(300)],  # 300 equal objects
    [*decode_batch(40, 900), Seq(512, 0), *decode_batch(3, 2_000), Seq(1, 900)],
    [Seq(1, c) for c in range(50, 4_000, 37)],  # no two alike
    [Seq(2_048, 0)] * 3,
]


def test_runs_spell_the_batch_in_order() -> None:
    a, b = Seq(1, 500), Seq(700, 0)
    runs = seq_runs([a, a, Seq(1, 500), b, a])
    assert runs == ((a, 3), (b, 1), (a, 1))
    assert [s for s, n in runs for _ in range(n)] == [a, a, a, b, a]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-2-9b-it"])  # full; windows too
@pytest.mark.parametrize("batch", BATCHES)
def test_a_batchs_runs_reduce_to_its_own_shape_and_time(model: str, batch: list[Seq]) -> None:
    dep = llama(model)
    shape = batch_shape(dep, batch)
    assert runs_shape(dep, seq_runs(batch)) == shape
    assert step_time_s(dep, batch, VLLM) == shape_time_s(dep, shape, VLLM)


def test_a_data_parallel_batch_is_dealt_over_its_ranks_as_before() -> None:
    dep = deepseek_dp2()
    batch = [*decode_batch(9, 3_000), Seq(256, 0), *decode_batch(4, 1_000)]
    shape = batch_shape(dep, batch)
    assert shape.all_tokens == 9 + 256 + 4 and shape.any_rank_prompt
    assert runs_shape(dep, seq_runs(batch)) == shape
    assert step_time_s(dep, batch, VLLM) == shape_time_s(dep, shape, VLLM)


def test_a_remembered_step_is_not_a_different_batchs() -> None:
    """Equal runs, equal time; one more sequence, or one of another context, another."""
    dep = llama()
    first = step_time_s(dep, decode_batch(64, 1_000), VLLM)
    assert step_time_s(dep, [Seq(1, 1_000) for _ in range(64)], VLLM) == first
    assert step_time_s(dep, decode_batch(65, 1_000), VLLM) > first
    assert step_time_s(dep, [*decode_batch(63, 1_000), Seq(1, 9_000)], VLLM) > first


@pytest.mark.parametrize("batch, words", [
    ([], "at least one sequence"),
    ([*decode_batch(5, 100), Seq(0, 3)], "new_tokens=0"),
    ([Seq(4, -1)], "context_tokens=-1"),
])
def test_a_bad_step_is_refused_by_the_remembered_path_as_by_the_shape(
        batch: list[Seq], words: str) -> None:
    for dep in (llama(), deepseek_dp2()):
        with pytest.raises(InputError, match=words) as shape:
            batch_shape(dep, batch)
        with pytest.raises(InputError) as timed:
            step_time_s(dep, batch, VLLM)
        assert str(timed.value) == str(shape.value)


def test_a_loads_draws_are_shared_by_every_rate_of_its_lengths_and_seed() -> None:
    slow = Load(2.0, "lognormal:900,0.7", "lognormal:210,0.7")
    fast = Load(9.0, "lognormal:900,0.7", "lognormal:210,0.7")
    assert _totals(fast) is _totals(slow) and _samples(fast) is _samples(slow)
    assert fast.refused_share(2_000) == slow.refused_share(2_000) > 0
    other = Load(2.0, "lognormal:900,0.7", "lognormal:210,0.7", seed=1)
    assert _totals(other) != _totals(slow) and _samples(other) != _samples(slow)
    longer = Load(2.0, "lognormal:950,0.7", "lognormal:210,0.7")
    assert longer.means()[0] > slow.means()[0]


def test_lognormal_draws_clip_to_one_token_and_to_the_longest() -> None:
    """The comparisons the sampler's hot path is written in clip as min and max did: a wide
    sigma around 1 token draws 1s, one around five million draws the cap, and between them
    the draw is exp(N(mu, sigma)) rounded."""
    import math
    import random

    from ridgeline.sim.workload import MAX_LENGTH_TOKENS, length_sampler

    short, rng = length_sampler("lognormal:1,3", "input length"), random.Random(5)
    assert min(short(rng) for _ in range(2_000)) == 1
    long, rng = length_sampler("lognormal:5000000,2", "input length"), random.Random(5)
    assert max(long(rng) for _ in range(2_000)) == MAX_LENGTH_TOKENS
    middle, rng, twin = length_sampler("lognormal:800,0.6", "x"), random.Random(9), \
        random.Random(9)
    assert [middle(rng) for _ in range(50)] == [
        round(math.exp(twin.normalvariate(math.log(800), 0.6))) for _ in range(50)]

"""step_cost: the one function every time comes from."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import (
    IDEAL,
    Seq,
    decode_batch,
    mean_decode_context,
    step_cost,
    step_time_s,
)
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.expert_ranks import ep_imbalance


def dep(model: str = "llama-3.1-8b", gpu: str = "h100", n: int = 1, pp: int = 1,
        ep: bool = False) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), "bf16", None, n, pp,
                            expert_parallel=ep)


def test_every_operator_is_reported_with_flops_bytes_time_and_bound() -> None:
    cost = step_cost(dep(), decode_batch(8, 1000), profile_for("vllm"))
    names = {op.name for op in cost.ops}
    assert {"attention projections", "attention", "mlp", "lm head", "elementwise",
            "overhead"} <= names
    for op in cost.ops:
        assert op.time_s > 0 and op.bound in ("compute", "memory", "link", "overhead")
    assert cost.time_s == pytest.approx(sum(op.time_s for op in cost.ops))


def test_the_fast_path_equals_the_full_breakdown() -> None:
    for model in ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "jamba-1.5-mini"):
        d = dep(model, n=8)
        batch = [Seq(1, 500), Seq(1, 4000), Seq(256, 100)]
        profile = profile_for("trtllm")
        assert step_time_s(d, batch, profile) == pytest.approx(step_cost(d, batch, profile).time_s)


def test_an_engine_is_never_faster_than_the_floor() -> None:
    for engine in ("vllm", "trtllm", "llama.cpp-cuda", "llama.cpp-metal"):
        profile = profile_for(engine)
        for batch in (decode_batch(1, 100), decode_batch(64, 4000), [Seq(2048, 0)]):
            assert step_time_s(dep(), batch, profile) >= step_time_s(dep(), batch, IDEAL)


def test_tensor_parallel_adds_all_reduce_and_expert_parallel_no_all_to_all() -> None:
    """TP + EP without data parallelism all-reduces the MoE output as TP does (vLLM runs
    all-to-all kernels only with DP); its busiest rank reads more than its share of the
    experts a small batch touches."""
    tp = step_cost(dep("llama-3.1-70b", n=4), decode_batch(16, 1000))
    assert any(op.name == "tp all-reduce" and op.bound == "link" for op in tp.ops)
    batch = decode_batch(1, 1000)
    ep = step_cost(dep("qwen3-30b-a3b", n=8, ep=True), batch)
    sliced = step_cost(dep("qwen3-30b-a3b", n=8), batch)
    assert {op.name for op in ep.ops} == {op.name for op in sliced.ops}
    link = {op.name: op.time_s for op in ep.ops if op.bound == "link"}
    assert link == {op.name: op.time_s for op in sliced.ops if op.bound == "link"}
    ep_bytes = next(op.bytes for op in ep.ops if op.name == "experts")
    tp_bytes = next(op.bytes for op in sliced.ops if op.name == "experts")
    assert ep_bytes / tp_bytes == pytest.approx(2.51, rel=0.02)  # 8 of 128 on 8 ranks


def test_the_busiest_expert_parallel_rank() -> None:
    """E[max of R binomials]: 8 of 128 experts touched on 8 ranks, 1 a rank and 2.5 on the
    busiest; every expert touched, all 16; Mixtral's 8 over 16 GPUs, one whole expert each
    on eight."""
    from ridgeline.expert_ranks import busiest_rank_experts, ep_rank_experts

    assert busiest_rank_experts(128, 8, 8) == pytest.approx(2.51, abs=0.01)
    assert busiest_rank_experts(128, 8, 128) == 16
    assert busiest_rank_experts(128, 8, 0) == 0
    assert 1.2 < busiest_rank_experts(128, 8, 64) / 8 < 1.4  # half touched: 10.8 of 8
    assert ep_rank_experts(8, 16) == 1 and ep_rank_experts(128, 8) == 16
    assert ep_rank_experts(60, 8) == 8


def _exact_busiest(held: int, p: Fraction, ranks: int) -> float:
    """E[max of ``ranks`` Binomial(held, p)] = Σₖ (1 − F(k)^R), in exact fractions."""
    cdf, expected = Fraction(0), Fraction(0)
    for k in range(held):
        cdf += math.comb(held, k) * p**k * (1 - p) ** (held - k)
        expected += 1 - cdf**ranks
    return float(expected)


def test_the_busiest_rank_of_many_experts_nearly_all_touched_is_not_all_it_holds() -> None:
    """Where (1 − p)^held underflows (512 experts on 2 ranks, 95 % of them touched: 0.05^256,
    under 1e-308) the busiest rank still reads its binomial's maximum, not all 256 it holds;
    so with as many replicas as experts (512 + 512 over 2, each replica touched with
    1 − (1 − 0.96)^(1/2) = 0.8), not all 512."""
    from ridgeline.expert_ranks import (
    busiest_rank_experts,
    busiest_rank_physical_experts,
    replica_touch_probability,
)

    p = Fraction(19, 20)
    expected = _exact_busiest(256, p, 2)
    assert busiest_rank_experts(512, 2, float(p) * 512) == pytest.approx(expected, rel=1e-9)
    assert expected < 250  # 245.2 of the 256 it holds
    p = Fraction(24, 25)
    assert replica_touch_probability(float(p), 2) == pytest.approx(0.8)
    expected = _exact_busiest(512, Fraction(4, 5), 2)
    assert busiest_rank_physical_experts(512, 512, 2, float(p) * 512) == pytest.approx(
        expected, rel=1e-9)
    assert expected < 420  # of the 512 it holds


def test_the_busiest_rank_under_eplb_reads_the_replicas_its_tokens_reach() -> None:
    """With N replicas a rank holds (E + N) ÷ R experts: all read once every expert is
    touched; at one token about as many as without replicas, each token's expert served by
    one of its copies; with none, busiest_rank_experts exactly."""
    from ridgeline.expert_ranks import (
        busiest_rank_experts,
        busiest_rank_physical_experts,
        ep_rank_experts,
        replica_touch_probability,
    )
    from ridgeline.moe import expected_experts_touched

    assert busiest_rank_physical_experts(256, 32, 8, 256) == ep_rank_experts(256 + 32, 8) == 36
    assert busiest_rank_physical_experts(256, 32, 8, 0) == 0
    for touched in (8.0, 100.0, 250.0):
        assert busiest_rank_physical_experts(256, 0, 8, touched) == \
            busiest_rank_experts(256, 8, touched)
    one = expected_experts_touched(256, 8, 1)  # a DeepSeek-V3 token: 8 of 256
    with_replicas = busiest_rank_physical_experts(256, 32, 8, one)
    assert with_replicas == pytest.approx(busiest_rank_experts(256, 8, one), rel=0.01)
    assert round(with_replicas, 3) == 2.548  # the docstring's worked number
    reads = [busiest_rank_physical_experts(256, 32, 8, t) for t in (8, 64, 128, 200, 255)]
    assert reads == sorted(reads) and reads[-1] < 36
    # more touched, more of the replicas read past what the logical experts alone would give
    assert reads[3] - busiest_rank_experts(256, 8, 200) > reads[0] - busiest_rank_experts(256, 8, 8)
    # a replica of an expert with c copies sees 1 ÷ c of its tokens: untouched (1 − p)^(1/c)
    assert replica_touch_probability(0.3, 1) == pytest.approx(0.3)
    assert replica_touch_probability(0.75, 2) == pytest.approx(0.5)
    assert round(replica_touch_probability(1 / 32, 2), 4) == 0.0157
    # replica slots the ranks cannot share evenly (62 + 2 over 8: 4 slots, on 4 ranks): the
    # ranks still hold 8 each, all read once every expert is touched
    assert busiest_rank_physical_experts(62, 2, 8, 62) == 8


def sglang_trivial_layout_served(num_experts: int, redundant: int, ranks: int) -> list[int]:
    """Each rank's experts that take tokens, walked slot by slot as SGLang lays them out
    without --enable-eplb: physical slot s holds logical s mod E (init_trivial) on rank
    s ÷ ((E + N) ÷ R); logical i runs as physical i, so only slots below E serve."""
    per_rank = (num_experts + redundant) // ranks
    served = [0] * ranks
    for slot in range(num_experts + redundant):
        logical = slot % num_experts
        if slot == logical:  # the one slot its tokens reach
            served[slot // per_rank] += 1
    return served


def test_sglangs_replicas_without_eplb_leave_the_first_ranks_more_experts_to_serve() -> None:
    """SGLang's trivial layout without --enable-eplb: the replicas sit on the last ranks and
    take no token, the first ranks serve (E + N) ÷ R experts each, so the busiest carries
    that many E-ths of the tokens (over the mean's 1 ÷ R) and reads the ones touched."""
    import itertools

    from ridgeline.expert_ranks import (
        busiest_rank_experts,
        busiest_rank_routed_experts,
        trivial_layout_imbalance,
        trivial_layout_routed_experts,
    )
    from ridgeline.moe import expected_experts_touched

    for e, n, r in ((256, 32, 8), (128, 16, 8), (64, 64, 4), (8, 4, 4), (160, 0, 8)):
        walked = sglang_trivial_layout_served(e, n, r)
        assert list(trivial_layout_routed_experts(e, n, r)) == walked
        assert sum(walked) == e  # every logical expert served once
        assert trivial_layout_imbalance(e, n, r) == pytest.approx(max(walked) * r / e)
        assert busiest_rank_routed_experts(e, n, r, e) == max(walked)  # all touched
        assert busiest_rank_routed_experts(e, n, r, 0) == 0
    assert trivial_layout_imbalance(256, 32, 8) == pytest.approx((256 + 32) / 256)  # 1.125
    for touched in (8.0, 100.0):  # no replica: busiest_rank_experts exactly
        assert busiest_rank_routed_experts(256, 0, 8, touched) == \
            busiest_rank_experts(256, 8, touched)
    # E[max over ranks] of independent touches, enumerated over all 2^8 touch patterns of a
    # small layout (8 + 4 over 4 ranks: 3, 3, 2 and 0 served)
    served, p = sglang_trivial_layout_served(8, 4, 4), 3 / 8
    exact = 0.0
    for pattern in itertools.product((0, 1), repeat=8):
        weight = p ** sum(pattern) * (1 - p) ** (8 - sum(pattern))
        first = 0
        most = 0
        for count in served:
            most = max(most, sum(pattern[first:first + count]))
            first += count
        exact += weight * most
    assert busiest_rank_routed_experts(8, 4, 4, 3) == pytest.approx(exact, rel=1e-12)
    one = expected_experts_touched(256, 8, 1)  # a DeepSeek-V3 token
    busiest = busiest_rank_routed_experts(256, 32, 8, one)
    assert busiest > busiest_rank_experts(256, 8, one)  # 36-expert ranks read more
    assert round(busiest, 2) == 2.66  # the docstring's worked number
    reads = [busiest_rank_routed_experts(256, 32, 8, t) for t in (8, 64, 128, 200, 255)]
    assert reads == sorted(reads) and reads[-1] < 36


def test_sglangs_unrouted_replicas_price_the_busiest_ranks_tokens_and_reads() -> None:
    """An 8,192-token prompt touches every expert: SGLang's replicas without --enable-eplb
    make the busiest EP8 rank's expert matmuls (E + N) ÷ E of plain EP's and its reads the
    36 experts it serves, as many as under --enable-eplb; a vLLM deployment is left alone
    (vLLM refuses the replicas without EPLB)."""
    from ridgeline.expert_ranks import (
        busiest_rank_experts,
        busiest_rank_routed_experts,
        trivial_layout_imbalance,
        trivial_layout_routed_experts,
    )
    from ridgeline.moe import expected_experts_touched

    def experts(d: Deployment, batch: list[Seq]) -> tuple[float, float]:
        op = next(o for o in step_cost(d, batch).ops if o.name == "experts")
        return op.flops, op.bytes

    plain = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                             None, 8, expert_parallel=True, engine="sglang")
    idle = plain.with_eplb(False, 32)
    assert idle.unrouted_redundant_experts == 32 and not idle.eplb_balanced
    assert idle != plain and hash(idle) != hash(plain)  # its own step-cost cache entry
    vllm = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                            None, 8, expert_parallel=True)
    assert vllm.with_eplb(False, 32) == vllm
    prompt = [Seq(8192)]
    (flops_plain, bytes_plain), (flops_idle, bytes_idle) = (experts(d, prompt)
                                                            for d in (plain, idle))
    assert flops_idle / flops_plain == pytest.approx(trivial_layout_imbalance(256, 32, 8))
    served = max(trivial_layout_routed_experts(256, 32, 8))
    assert bytes_idle / bytes_plain == pytest.approx(served / (256 // 8))
    assert bytes_idle == pytest.approx(experts(plain.with_eplb(True, 32), prompt)[1])
    one = decode_batch(1, 100)  # one token: the reads by the formula, the matmuls by 1.125
    touched = expected_experts_touched(256, 8, 1)
    (f1, b1), (f2, b2) = experts(plain, one), experts(idle, one)
    assert b2 / b1 == pytest.approx(busiest_rank_routed_experts(256, 32, 8, touched)
                                    / busiest_rank_experts(256, 8, touched))
    assert f2 / f1 == pytest.approx(trivial_layout_imbalance(256, 32, 8))


def test_pipeline_stages_pay_a_hand_off() -> None:
    cost = step_cost(dep("llama-3.1-70b", "a100", n=4, pp=4), decode_batch(1, 100))
    assert any(op.name == "pipeline send" for op in cost.ops)


def test_prefill_attention_grows_quadratically_and_decode_linearly() -> None:
    d = dep()
    def att(batch: list[Seq]) -> float:
        return next(op.flops for op in step_cost(d, batch).ops if op.name == "attention")
    assert att([Seq(8000, 0)]) / att([Seq(4000, 0)]) == pytest.approx(4, rel=0.01)
    assert att([Seq(1, 8000)]) / att([Seq(1, 4000)]) == pytest.approx(2, rel=0.01)


def test_moe_decode_reads_few_experts_and_prefill_reads_all() -> None:
    d = dep("qwen3-30b-a3b")
    def experts(batch: list[Seq]) -> float:
        return next(op.bytes for op in step_cost(d, batch).ops if op.name == "experts")
    assert experts(decode_batch(1, 10)) < 0.1 * experts([Seq(4096, 0)])


def test_empty_or_malformed_batches_are_refused() -> None:
    with pytest.raises(InputError):
        step_cost(dep(), [])
    with pytest.raises(InputError):
        step_cost(dep(), [Seq(0, 10)])


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 512), context=st.integers(1, 100_000))
def test_step_time_grows_with_batch_and_context(batch: int, context: int) -> None:
    d, profile = dep(), profile_for("vllm")
    t = step_time_s(d, decode_batch(batch, context), profile)
    assert step_time_s(d, decode_batch(batch + 1, context), profile) >= t
    assert step_time_s(d, decode_batch(batch, context + 1000), profile) >= t


def test_all_reduce_across_nodes_pays_the_inter_node_network() -> None:
    from ridgeline.parallel import all_reduce_time_s

    acc = resolve_accelerator("h100")
    inside, across = all_reduce_time_s(16e6, 8, acc), all_reduce_time_s(16e6, 16, acc)
    assert across > 2 * inside  # 400 Gb/s between nodes against 450 GB/s NVLink inside
    nvl72 = resolve_accelerator("gb200")
    assert all_reduce_time_s(16e6, 16, nvl72) < across  # one NVLink domain of 72


def test_pipeline_hops_cross_nodes_only_between_full_nodes() -> None:
    from ridgeline.parallel import pipeline_hops

    acc = resolve_accelerator("h100")
    assert pipeline_hops(8, 2, acc) == (0, 1)
    assert pipeline_hops(4, 2, acc) == (1, 0)
    assert pipeline_hops(1, 1, acc) == (0, 0)


def test_expert_parallel_pays_for_the_busiest_rank() -> None:
    plain = step_cost(dep("qwen3-30b-a3b", n=4), decode_batch(64, 1000))
    ep = step_cost(dep("qwen3-30b-a3b", n=4, ep=True), decode_batch(64, 1000))
    flops = {c: next(op.flops for op in c.ops if op.name == "experts") for c in (plain, ep)}
    assert flops[ep] == pytest.approx(ep_imbalance(False) * flops[plain])  # no EPLB: 1.2


def test_a_prefill_step_pays_its_own_per_layer_overhead() -> None:
    """Decode-only steps replay CUDA graphs; a step with prompt tokens pays the prefill rate
    on every layer (and a profile without one pays the decode rate everywhere)."""
    from dataclasses import replace

    d = dep()
    base = profile_for("vllm")
    plain = replace(base, prefill_layer_overhead_s=None)
    eager = replace(base, prefill_layer_overhead_s=base.layer_overhead_s + 1e-4)
    layers = d.model.num_layers
    decode, prefill = decode_batch(8, 1000), [Seq(512, 0)]
    assert step_cost(d, decode, eager).time_s == pytest.approx(step_cost(d, decode, plain).time_s)
    extra = step_cost(d, prefill, eager).time_s - step_cost(d, prefill, plain).time_s
    assert extra == pytest.approx(1e-4 * layers)
    mixed = [*decode, Seq(64, 0)]  # a chunk among decodes: not a graph replay either
    assert step_time_s(d, mixed, eager) > step_time_s(d, mixed, plain)


def test_small_all_reduces_inside_nvlink_pay_a_fixed_latency_not_a_ring() -> None:
    """A decode step's activations (16 KB) all-reduce in ~8 µs at any TP degree inside one
    NVLink domain (one-/two-shot kernels); a prefill's 16 MB still takes the ring; a PCIe card
    has only the ring."""
    from ridgeline.parallel import LOW_LATENCY_ALL_REDUCE_S, all_reduce_time_s, link_latency_s

    h100, l40s = resolve_accelerator("h100"), resolve_accelerator("l40s")
    small = [all_reduce_time_s(16e3, n, h100) for n in (4, 8)]
    assert all(LOW_LATENCY_ALL_REDUCE_S <= t < LOW_LATENCY_ALL_REDUCE_S * 1.01 for t in small)
    assert small[-1] < 2 * 7 * link_latency_s(h100)  # the ring's 14 hops would cost more
    # even at TP2 the shot kernels beat a ring's launch plus two hops
    assert all_reduce_time_s(16e3, 2, h100) < LOW_LATENCY_ALL_REDUCE_S * 1.01
    big = all_reduce_time_s(16e6, 8, h100)  # a prefill's activations: the bytes dominate
    assert big == pytest.approx(LOW_LATENCY_ALL_REDUCE_S + 2 * 7 / 8 * 16e6 / 450e9)
    assert big > 8 * small[-1]
    assert all_reduce_time_s(16e3, 8, l40s) > 2 * 7 * link_latency_s(l40s)


def test_infinity_fabric_reaches_only_the_links_to_the_peers_it_talks_to() -> None:
    """An MI300X's 448 GB/s a direction is seven point-to-point links of 64, one a peer: a
    TP2 pair all-reduces a prefill's 131 MB over one link, a TP8 group over all seven, and a
    pipeline hand-off goes over one. NVLink is switched: any peers get it all."""
    from ridgeline.parallel import (
        LOW_LATENCY_ALL_REDUCE_S,
        all_reduce_time_s,
        interconnect_bytes_per_s,
    )

    mi300x, h100 = resolve_accelerator("mi300x"), resolve_accelerator("h100")
    assert interconnect_bytes_per_s(mi300x, 1) == pytest.approx(64e9)
    assert interconnect_bytes_per_s(mi300x, 3) == pytest.approx(192e9)
    assert interconnect_bytes_per_s(mi300x) == interconnect_bytes_per_s(mi300x, 7) == 448e9
    assert interconnect_bytes_per_s(h100, 1) == interconnect_bytes_per_s(h100) == 450e9
    message = 8000 * 8192 * 2  # Llama-3.1-70B's 8,000-token prompt, one layer's activations
    assert all_reduce_time_s(message, 2, mi300x) == pytest.approx(
        LOW_LATENCY_ALL_REDUCE_S + message / 64e9)
    assert all_reduce_time_s(message, 8, mi300x) == pytest.approx(
        LOW_LATENCY_ALL_REDUCE_S + 2 * 7 / 8 * message / 448e9)


def test_pcie_all_reduces_take_what_nccl_measured_on_pcie_only_machines() -> None:
    """docs/collectives.md: NCCL all-reduces took 13-17 µs at 8-16 KB on 2 PCIe GPUs, and
    15-33 µs on 4 and 19-71 µs on 8 at 8-64 KB. Around 1 MB the model runs ahead of them (72 µs on 4 cards
    against 102-109 measured): the message sizes a decode step sends are what is pinned."""
    from ridgeline.parallel import all_reduce_time_s

    card = resolve_accelerator("rtx-4090")
    assert 13e-6 <= all_reduce_time_s(8 * 1024, 2, card) <= 17e-6
    assert 15e-6 <= all_reduce_time_s(64 * 1024, 4, card) <= 33e-6
    assert 19e-6 <= all_reduce_time_s(8 * 1024, 8, card) <= 71e-6
    assert all_reduce_time_s(2**20, 4, card) > all_reduce_time_s(64 * 1024, 4, card) * 2


def test_without_flash_attention_the_scores_round_trip_through_memory() -> None:
    """llama.cpp without -fa: per layer, heads × query-key pairs × 20 B (f32 scores written,
    softmax read and write, converted to f16, read by P·V)."""
    from dataclasses import replace

    from ridgeline.cost import SCORE_BYTES_PER_PAIR, score_bytes

    flash = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                             "q4_k_m", None, engine="llama.cpp-cuda")
    naive = replace(flash, flash_attention=False)
    prompt = [Seq(4096, 0)]
    pairs = 4096 * 4097 / 2  # causal: query i sees i keys
    assert score_bytes(naive, prompt) == pytest.approx(32 * 32 * pairs * SCORE_BYTES_PER_PAIR)
    assert score_bytes(naive, prompt) / 1e9 == pytest.approx(171.8, rel=1e-3)
    assert score_bytes(flash, prompt) == 0
    # a decode step writes one row of scores per head: heads × (context + 1) pairs per layer
    assert score_bytes(naive, decode_batch(2, 999)) == pytest.approx(32 * 32 * 2000 * 20)
    # the traffic is the engine's: the memory-bound attention op pays for it, the floor does not
    cost = step_cost(naive, prompt, profile_for("llama.cpp-cuda"))
    att = next(op for op in cost.ops if op.name == "attention")
    att_flash = next(op for op in step_cost(flash, prompt, profile_for("llama.cpp-cuda")).ops
                     if op.name == "attention")
    assert att.bytes - att_flash.bytes == pytest.approx(score_bytes(naive, prompt))
    assert att.time_s > att_flash.time_s
    # long prompts suffer more than short ones: the scores grow with the square of the prompt
    def slowdown(n: int) -> float:
        p = profile_for("llama.cpp-cuda")
        return step_time_s(naive, [Seq(n, 0)], p) / step_time_s(flash, [Seq(n, 0)], p)
    assert slowdown(4096) > slowdown(512) > 1.0
    # sliding-window layers write scores only for the keys inside the window
    gemma = Deployment.build(resolve_model("gemma-3-4b"), resolve_accelerator("rtx-4090"),
                             "q4_k_m", None, engine="llama.cpp-cuda", flash_attention=False)
    full = replace(gemma.model, layers=tuple(replace(layer, window_tokens=None)
                                             for layer in gemma.model.layers))
    assert score_bytes(gemma, prompt) < score_bytes(replace(gemma, model=full), prompt)


def test_without_cuda_graphs_every_decode_step_pays_the_ungraphed_per_layer_cost() -> None:
    graphed = profile_for("vllm")
    eager = graphed.without_cuda_graphs()
    assert graphed.prefill_layer_overhead_s is not None
    assert eager.layer_overhead_s == graphed.prefill_layer_overhead_s > graphed.layer_overhead_s
    d = dep()
    batch = decode_batch(1, 1000)
    extra = (graphed.prefill_layer_overhead_s - graphed.layer_overhead_s) * 32  # 32 layers
    assert step_time_s(d, batch, eager) - step_time_s(d, batch, graphed) == pytest.approx(extra)
    # a prefill step was never graphed: its cost does not change
    prompt = [Seq(2048, 0)]
    assert step_time_s(d, prompt, eager) == pytest.approx(step_time_s(d, prompt, graphed))
    with pytest.raises(InputError, match="serving engine's switch"):
        profile_for("llama.cpp-cuda").without_cuda_graphs()


def test_attention_multiplies_the_cache_at_its_own_rate() -> None:
    """QKᵀ and PV multiply cached K and V: with fp8 weights and a bf16 cache on an H100 they
    run at bf16's 989 TFLOP/s, not fp8's 1,979 (a 32K prompt's attention is compute-bound,
    so its time doubles); an fp8 cache runs them at fp8; llama.cpp at f16."""
    h100 = resolve_accelerator("h100")
    model = resolve_model("llama-3.1-70b")
    bf16_cache = Deployment.build(model, h100, "fp8", "bf16", 2)
    fp8_cache = Deployment.build(model, h100, "fp8", "fp8", 2)
    assert (bf16_cache.attention_compute_dtype, fp8_cache.attention_compute_dtype) == \
        ("bf16", "fp8")
    assert bf16_cache.attention_slowdown == pytest.approx(2.0, rel=1e-3)
    assert "QKᵀ and PV at bf16" in bf16_cache.matmuls_label
    prompt = [Seq(32768)]
    slow = next(op for op in step_cost(bf16_cache, prompt).ops if op.name == "attention")
    fast = next(op for op in step_cost(fp8_cache, prompt).ops if op.name == "attention")
    assert slow.bound == "compute"
    assert slow.time_s == pytest.approx(slow.flops / (h100.peak("bf16")), rel=1e-6)
    assert slow.time_s == pytest.approx(2 * fast.time_s, rel=1e-3)
    gguf = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                            "q4_k_m", None, 1, engine="llama.cpp-cuda")
    assert gguf.attention_compute_dtype == "fp16"


def test_one_mean_decode_context_for_plan_validate_and_observe() -> None:
    """The step at a request's mean context: its prompt and half its output, whole tokens
    (1,000 in and 250 out: 1,125; 251 out rounds down alike for counts and means)."""
    assert mean_decode_context(1000, 250) == 1125
    assert mean_decode_context(1000, 251) == mean_decode_context(1000.0, 251.0) == 1125
    assert mean_decode_context(0, 1) == 1  # never an empty context


def test_k_quant_weights_unpacked_on_the_alus_set_a_floor_under_each_weight_matmul() -> None:
    """A profile pricing 30 operations per K-quant weight: a batch-1 Llama-3.1-70B Q4_K_M
    step on an M1 Max (10.4 TFLOP/s fp16) takes at least 70 B weights × 30 ÷ 10.4e12 ≈ 0.2 s,
    though its 42 GB read at 400 GB/s takes 0.11; Q4_0 weights (no K-quant) and a
    512-token prompt (the unpacking spread over its tokens) are as without it."""
    from dataclasses import replace

    from ridgeline.cost import kquant_ops, step_cost
    from ridgeline.engines import EngineProfile
    from ridgeline.precision import weight_formats

    formats = weight_formats()
    assert formats["q4_k_m"].k_quant and formats["q6_k"].k_quant and formats["q3_k_s"].k_quant
    assert not any(formats[f].k_quant for f in ("q4_0", "q8_0", "iq4_xs", "mxfp4", "fp8"))
    m1 = resolve_accelerator("apple-m1-max-32c")
    plain = EngineProfile("llama.cpp-metal", 0.9, 0.7, 0.0, 0.0)
    unpacking = replace(plain, kquant_ops_per_weight=30.0)
    kquant = Deployment.build(resolve_model("llama-3.1-70b"), m1, "q4_k_m",
                              engine="llama.cpp-metal")
    assert "mlp" in kquant_ops(kquant) and "attention projections" in kquant_ops(kquant)
    one = decode_batch(1, 256)
    weights = kquant.matmul_params_per_token  # every weight multiplied once per token
    floor_s = weights * 30 / m1.peak("fp16")
    assert step_cost(kquant, one, plain).time_s < 0.8 * floor_s
    assert step_cost(kquant, one, unpacking).time_s == pytest.approx(floor_s, rel=0.1)
    assert step_cost(kquant, one, unpacking).ops[0].bound == "compute"
    legacy = Deployment.build(resolve_model("llama-3.1-70b"), m1, "q4_0",
                              engine="llama.cpp-metal")
    assert not kquant_ops(legacy)
    assert step_cost(legacy, one, unpacking).time_s == step_cost(legacy, one, plain).time_s
    prompt = [Seq(512, 0)]
    assert step_cost(kquant, prompt, unpacking).time_s == pytest.approx(
        step_cost(kquant, prompt, plain).time_s, rel=0.05)


def test_thin_expert_matmuls_waste_their_tiles_in_a_prompt_not_in_a_decode() -> None:
    """With 64-column expert tiles, a 512-token ubatch of DeepSeek-V3 (256 experts, top-8:
    about 16 tokens an expert) costs the experts' arithmetic 4× its FLOPs; a decode step's
    matrix-vector experts cost what they did."""
    from dataclasses import replace

    from ridgeline.cost import StepRates, expert_tile_waste
    from ridgeline.engines import profile_for
    from ridgeline.moe import expected_experts_touched

    assert expert_tile_waste(16, 64) == 4.0 and expert_tile_waste(200, 64) == 1.0
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("mi300x"),
                           "q4_k_m", None, 8, engine="llama.cpp-rocm")
    plain = StepRates(dep, replace(profile_for("llama.cpp-rocm"), expert_tile_tokens=0.0))
    tiled = StepRates(dep, replace(profile_for("llama.cpp-rocm"), expert_tile_tokens=64.0))
    per_expert = 512 * 8 / expected_experts_touched(256, 8, 512)
    assert tiled.compute_s("experts", 1e12, 512) == pytest.approx(
        plain.compute_s("experts", 1e12, 512) * 64 / per_expert)
    assert tiled.compute_s("experts", 1e12, 4) == plain.compute_s("experts", 1e12, 4)
    assert tiled.compute_s("mlp", 1e12, 512) == plain.compute_s("mlp", 1e12, 512)


def test_a_routed_layer_pays_the_profiles_cost_per_moe_layer() -> None:
    """A profile's cost per MoE layer lands on each routed-expert layer of a step, and on no
    dense model's: Llama-4-Maverick routes in 24 of its 48 layers (every other one); Llama in
    none. The simulator's timer charges the same."""
    from dataclasses import replace

    from ridgeline.cost import batch_shape
    from ridgeline.sim.timer import StepTimer

    base = profile_for("llama.cpp-cuda")
    plain, routed = (replace(base, moe_layer_overhead_s=s) for s in (0.0, 5e-5))
    moe = Deployment.build(resolve_model("llama-4-maverick"), resolve_accelerator("h200"),
                           "q4_k_m", None, 2, engine="llama.cpp-cuda")
    batch = decode_batch(1, 512)
    extra = step_cost(moe, batch, routed).time_s - step_cost(moe, batch, plain).time_s
    assert extra == pytest.approx(5e-5 * 24)
    shape = batch_shape(moe, batch)
    assert StepTimer(moe, routed).time_s(shape) - StepTimer(moe, plain).time_s(shape) \
        == pytest.approx(extra)
    dense = dep()
    assert step_cost(dense, batch, routed).time_s == pytest.approx(
        step_cost(dense, batch, plain).time_s)


def test_a_rank_serving_every_expert_takes_no_more_than_all_the_tokens() -> None:
    """SGLang's trivial layout with so many replicas that the first rank serves every expert
    (Mixtral's 8 + 8 on 2 ranks: 8 and 0) sends that rank all the routed tokens, R × the
    mean, never the stated skew on top of them (1.2 × 2 = 2.4 of the mean would be more tokens
    than the step has); with 6 replicas (7 and 1) the capped share is the same."""
    from ridgeline.expert_ranks import trivial_layout_imbalance

    def flops(d: Deployment) -> float:
        return next(o for o in step_cost(d, [Seq(4096)]).ops if o.name == "experts").flops

    plain = Deployment.build(resolve_model("mixtral-8x7b"), resolve_accelerator("h100"), None,
                             None, 2, expert_parallel=True, engine="sglang")
    ranks = plain.engine_expert_ranks
    for redundant in (8, 6):
        assert ep_imbalance(False) * trivial_layout_imbalance(8, redundant, ranks) > ranks
        idle = plain.with_eplb(False, redundant)
        # plain EP's busiest rank runs the stated skew × the mean; this one all the tokens
        assert flops(idle) / flops(plain) == pytest.approx(ranks / ep_imbalance(False))


def test_a_deployments_hash_is_remembered_and_a_pickled_copy_hashes_afresh() -> None:
    """Deployment.__hash__ is remembered on the instance (a fit looks one deployment up in the
    step-cost caches hundreds of thousands of times): it is its fields' hash, a replaced
    deployment gets its own, and a copy sent to another process carries none (string hashes
    differ from one process to another)."""
    import pickle
    from dataclasses import replace

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), None,
                           None, 1)
    assert hash(dep) == hash(dep) == dep._fields_hash() and "_hash" in vars(dep)
    sent = pickle.loads(pickle.dumps(dep))
    assert "_hash" not in vars(sent) and sent == dep and hash(sent) == hash(dep)
    tp2 = replace(dep, tensor_parallel_size=2)
    assert hash(tp2) == tp2._fields_hash() != hash(dep)

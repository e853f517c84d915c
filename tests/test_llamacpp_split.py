"""llama.cpp over several GPUs: its default split (-sm layer) makes each GPU a stage of whole
layers that a step passes one after another, so two cards hold twice the model but read it
no faster; -sm tensor is priced as tensor parallelism (-sm row is refused)."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.measurements import read_measurements
from ridgeline.predict import predict
from tests.conftest import MEASUREMENTS, run_cli

DECODE = ("decode", "llama-3.1-70b", "--gpu", "rtx-4090", "--num-gpus", "2", "--engine",
          "llama.cpp-cuda", "--weights", "q4_k_m", "--batch", "1", "--context", "512", "--json")


def point(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code, out, _ = run_cli(capsys, *DECODE, *extra)
    assert code == 0
    return json.loads(out)["points"][0]


def test_llamacpp_splits_by_layer_by_default() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", None, 2, engine="llama.cpp-cuda")
    assert dep.pipeline_parallel_size == 2 and dep.tensor_parallel_size == 1
    tp = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                          "q4_k_m", None, 2, engine="llama.cpp-cuda", split_mode="tensor")
    assert tp.tensor_parallel_size == 2 and tp.pipeline_parallel_size == 1


def test_a_layer_split_reads_the_model_at_one_cards_bandwidth(
        capsys: pytest.CaptureFixture[str]) -> None:
    layer, row = point(capsys), point(capsys, "--split-mode", "tensor")
    bw = resolve_accelerator("rtx-4090").memory_bandwidth_bytes_per_s
    assert layer["memory_time_s"] == pytest.approx(
        (layer["weight_bytes_read"] + layer["kv_bytes_read"]) / bw, rel=0.01)
    assert row["memory_time_s"] == pytest.approx(layer["memory_time_s"] / 2, rel=0.01)
    assert layer["expected"]["time_s"] > row["expected"]["time_s"]


def test_the_cli_prices_what_validate_prices_for_a_two_card_row(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The XD 2 x RTX 4090 70B Q4_K_M tg512 row: the CLI's deployment is the row's."""
    row = next(r for r in read_measurements(MEASUREMENTS).rows
               if r.id == "XD-RTX409024GBx2-70B-Q4_K_M-tg512")
    predicted = predict(row, {"llama.cpp-cuda": profile_for("llama.cpp-cuda")}).predicted
    code, out, _ = run_cli(capsys, "decode", "llama-3-70b", "--gpu", "rtx-4090", "--num-gpus",
                           "2", "--engine", "llama.cpp-cuda", "--weights", "q4_k_m", "--batch",
                           "1", "--context", "256", "--json")
    assert code == 0 and predicted is not None
    cli = json.loads(out)["points"][0]["expected"]["per_user_tok_s"]
    assert cli == pytest.approx(predicted, rel=0.03)  # tg512 averages contexts 1..512
    assert predicted == pytest.approx(row.value, rel=0.15)


def test_the_split_is_named_and_tensor_carries_a_caution(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *DECODE[:-1])
    assert code == 0 and "-sm layer" in out and "caution" not in out
    code, out, _ = run_cli(capsys, *DECODE[:-1], "-sm", "tensor")
    assert code == 0 and "-sm tensor" in out and "no measurement here checks it" in out


def test_split_mode_is_llamacpps(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                             "2", "--engine", "vllm", "--split-mode", "layer")
    assert code == 2 and "llama.cpp's -sm" in err and not out
    with pytest.raises(InputError, match="split mode"):
        Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                         engine="llama.cpp-cuda", split_mode="diagonal")


def test_partial_offload_spreads_the_gpu_layers_over_the_stages() -> None:
    from ridgeline.llamacpp_fit import fit_placement
    from ridgeline.memory import EngineSettings
    from ridgeline.offload import HostOffload

    model, acc = resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-3090")

    def auto(gpus: int) -> int:
        dep = Deployment.build(model, acc, "q4_k_m", None, gpus, engine="llama.cpp-cuda")
        placed = fit_placement(dep, EngineSettings(), 65536, 1, HostOffload(81, 0, 76.8e9))
        assert placed.offload is not None
        return placed.offload.gpu_layers

    one, two = auto(1), auto(2)
    assert one < two <= 81
    # each card holds about half of two cards' layers
    assert abs(two / 2 - one) <= 0.3 * one
    with pytest.raises(InputError, match="-sm layer"):
        Deployment.build(model, acc, "q4_k_m", None, 2, engine="llama.cpp-cuda",
                         split_mode="tensor", offload=HostOffload(40, 0, 76.8e9))


def test_row_split_is_refused_as_unmodelled_and_a_split_needs_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *DECODE[:-1], "-sm", "row")
    assert code == 2 and "-mg" in err and not out  # the KV cache stays on the main GPU
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                             "llama.cpp-cuda", "-sm", "layer")
    assert code == 2 and "--num-gpus" in err
    code, out, err = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "rtx-4090",
                             "--num-gpus", "3", "--engine", "llama.cpp-cuda", "-sm", "tensor")
    assert code == 2 and "8 KV heads" in err  # a tensor split shards the heads


def test_a_layer_split_pipelines_a_prompts_ubatches() -> None:
    """llama.cpp PR #6017: the ubatches of one llama_decode call (-b 2048: four of 512) move
    through the stages one behind the other."""
    from ridgeline.llamacpp_batching import pipelined_s, prefill_time_s

    assert pipelined_s([1.0, 1.0, 1.0, 1.0], 2) == pytest.approx(2.5)  # (4 + 1) halves
    assert pipelined_s([1.0], 4) == 1.0 and pipelined_s([1.0, 2.0], 1) == 3.0
    model, acc = resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090")
    profile = profile_for("llama.cpp-cuda")
    one, two = (Deployment.build(model, acc, "q4_k_m", None, n, engine="llama.cpp-cuda")
                for n in (1, 2))
    assert prefill_time_s(two, profile, 512) >= prefill_time_s(one, profile, 512)  # one ubatch
    long_one, long_two = prefill_time_s(one, profile, 8192), prefill_time_s(two, profile, 8192)
    assert 1.4 < long_one / long_two < 1.7  # 4 ubatches a call: 4 × 2 / (4 + 1) = 1.6


def test_a_split_llamacpp_does_not_pipeline_runs_a_prompts_ubatches_one_after_another() -> None:
    """Llama-3.1-70B on two H100s: -ngl 81 (every layer and the output) pipelines, so a
    2,048-token call's four ubatches take (Σ + the longest) ÷ 2, 2.5 ubatch-times of 4; -ngl
    80 leaves a layer on the host, llama.cpp turns pipelining off, and the four pass the two
    stages one after another: Σ, 4 of 4. --cpu-moe on a split (a tensor override) neither."""
    from ridgeline.cost import Seq, step_time_s
    from ridgeline.floors import busy_stages
    from ridgeline.llamacpp_batching import pipelined_stages, prefill_time_s
    from ridgeline.offload import HostOffload

    model, h100 = resolve_model("llama-3.1-70b"), resolve_accelerator("h100")
    profile = profile_for("llama.cpp-cuda")

    def placed(ngl: int) -> Deployment:
        return Deployment.build(model, h100, "q4_k_m", None, 2, engine="llama.cpp-cuda",
                                offload=HostOffload(ngl, 0, 76.8e9))

    every, short = placed(81), placed(80)
    assert (pipelined_stages(every), pipelined_stages(short)) == (2, 1)

    def ubatches(dep: Deployment) -> list[float]:
        return [step_time_s(dep, [Seq(512, 512 * i)], profile) for i in range(4)]

    u = ubatches(every)
    assert prefill_time_s(every, profile, 2048) == pytest.approx((sum(u) + max(u)) / 2)
    assert prefill_time_s(short, profile, 2048) == pytest.approx(sum(ubatches(short)))
    assert busy_stages(every, 2048) == pytest.approx(2 * 4 / 5)
    assert busy_stages(short, 2048) == 1.0
    moe = Deployment.build(resolve_model("qwen3-30b-a3b"), h100, "q4_k_m", None, 2,
                           engine="llama.cpp-cuda", offload=HostOffload(49, 48, 76.8e9))
    assert pipelined_stages(moe) == 1


def test_the_prefill_floor_and_caution_of_a_split_run_one_stage_at_a_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 80 on two H100s: the floor keeps one stage busy (× 1, not × 1.6 of 2) and says
    why, and the caution on the pipeline's ideal overlap is not given."""
    args = ("prefill", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--weights",
            "q4_k_m", "--engine", "llama.cpp-cuda", "--prompt-len", "2048",
            "--host-bandwidth-gbs", "76.8")
    code, out, _ = run_cli(capsys, *args, "-ngl", "81", "--explain")
    assert code == 0 and "1.6 of 2 pipeline stages busy" in out and "#6017" in out
    code, out, _ = run_cli(capsys, *args, "-ngl", "80", "--explain")
    assert code == 0 and "its 2 stages one after another" in out and "#6017" not in out


def test_the_prefill_floor_has_the_stages_the_ubatches_keep_busy(capsys: pytest.CaptureFixture[str]) -> None:
    times = []
    for gpus in ("1", "2", "4"):
        code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "rtx-4090",
                               "--num-gpus", gpus, "--weights", "q4_k_m", "--engine",
                               "llama.cpp-cuda", "--prompt-len", "8192", "--json")
        assert code == 0
        report = json.loads(out)
        floor, expected = report["floor_time_s"], report["expected"]["time_s"]
        assert floor < expected
        times.append(floor)
    # four ubatches a call, pipelined: 2·4/5 and 4·4/7 of the GPUs busy on average
    assert times[0] == pytest.approx(1.6 * times[1]) == pytest.approx(16 / 7 * times[2])
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "rtx-4090", "--num-gpus",
                           "2", "--weights", "q4_k_m", "--engine", "llama.cpp-cuda",
                           "--prompt-len", "512", "--json")
    one_ubatch = json.loads(out)["floor_time_s"]
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "rtx-4090",
                           "--weights", "q4_k_m", "--engine", "llama.cpp-cuda", "--prompt-len",
                           "512", "--json")
    assert one_ubatch == pytest.approx(json.loads(out)["floor_time_s"])  # nothing to pipeline


def test_the_pipelining_prs_own_rows_score_as_documented() -> None:
    """validation/pipeline.csv: one A100 within 7 %, eight within 3 % at one and two
    ubatches, and 34 % too fast at four (docs/answers.md's figures)."""
    from pathlib import Path

    from ridgeline.measurements import read_measurements as read

    rows = read(Path(__file__).resolve().parent.parent / "validation" / "pipeline.csv").rows
    errors = {r.id: predict(r).predicted / r.value - 1 for r in rows}  # type: ignore[operator]
    assert len(errors) == 6
    for row_id, error in errors.items():
        if "x8" in row_id and "pp2048" in row_id:
            assert 0.30 < error < 0.40
        elif "x8" in row_id:
            assert abs(error) < 0.035
        else:
            assert abs(error) < 0.075


def test_more_gpus_than_layers_is_refused() -> None:
    with pytest.raises(InputError, match="more GPUs than layers"):
        Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                         "q4_k_m", None, 33, engine="llama.cpp-cuda")


def test_a_short_last_ubatch_counts_for_its_share_in_the_floor() -> None:
    """513 tokens are one ubatch and a token: hardly anything to pipeline."""
    from ridgeline.floors import busy_stages

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                           "q4_k_m", None, 8, engine="llama.cpp-cuda")
    assert busy_stages(dep, 513) == pytest.approx(1.0, abs=0.01)
    assert busy_stages(dep, 2048) == pytest.approx(8 * 4 / 11)


def test_a_layer_split_overlaps_arithmetic_not_reads() -> None:
    """The stages' arithmetic overlaps across ubatches; their reads cannot beat one pass over
    the weights at one stage's bandwidth, which the first ubatch alone makes. Qwen3.5-397B on
    8 H100s had floored 2,048 tokens at 82 ms and 512 at 237 ms, its bandwidth credited 8x."""
    from ridgeline.floors import prefill_floor

    dep = Deployment.build(resolve_model("qwen3.5-397b-a17b"), resolve_accelerator("h100"),
                           None, None, 8, engine="llama.cpp-cuda")
    times = [prefill_floor(dep, n).time_s for n in (256, 512, 1024, 2048, 8192)]
    assert times == sorted(times)
    for n in (512, 8192):
        f = prefill_floor(dep, n)
        assert f.memory_time_s == pytest.approx(f.bytes_moved / dep.bandwidth_bytes_per_s)
    # more GPUs never raise the floor: Qwen3-30B-A3B at 16K tokens, compute-bound
    model, h100 = resolve_model("qwen3-30b-a3b"), resolve_accelerator("h100")
    floors = [prefill_floor(Deployment.build(model, h100, None, None, n,
                                             engine="llama.cpp-cuda"), 16_384).time_s
              for n in (1, 2, 4)]
    assert floors == sorted(floors, reverse=True)


def test_a_tensor_split_lever_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-3090", "--num-gpus",
                           "2", "--weights", "q8_0", "--engine", "llama.cpp-cuda", "-sm",
                           "tensor", "--max-model-len", "8192")
    assert code == 0 and "4 GPUs (-sm tensor)" in out and "row split" not in out


# -- which GPU holds which layers: llama.cpp's rule (src/llama-model.cpp, load_tensors, read at
# ggml-org/llama.cpp commit 00342301 and in the b9993/b10437 copies: act_gpu_layers =
# min(-ngl, n_layer + 1) slots, the output layer the last, slot il on the first device whose
# cumulative -ts split point exceeds (il - i_gpu_start) / act_gpu_layers, by upper_bound)

def by_rule(n_layer: int, shares: list[int], n_gpu_layers: int | None = None,
            output_first: bool = True) -> list[int | None]:
    """The rule worked by hand in exact fractions: the devices of slots 0..n_layer."""
    from fractions import Fraction

    ngl = n_layer + 1 if n_gpu_layers is None else n_gpu_layers
    first = max((n_layer + 1 if output_first else n_layer) - ngl, 0)
    slots = min(ngl, n_layer + 1)
    bounds = [Fraction(sum(shares[:k + 1]), sum(shares)) for k in range(len(shares))]
    out: list[int | None] = []
    for il in range(n_layer + 1):
        if il < first or il - first >= slots:
            out.append(None)
        else:
            out.append(next(k for k, b in enumerate(bounds) if Fraction(il - first, slots) < b))
    return out


def test_llamacpp_counts_the_output_layer_as_one_more_slot_of_the_split() -> None:
    """80 layers and the output over two equal GPUs: 81 slots, slot il on the first GPU while
    il / 81 < 1/2, so layers 0-40 (41) there and 39 with the output layer on the second —
    not 40 and 40."""
    from collections import Counter

    from ridgeline.llamacpp_split import layer_devices

    where = layer_devices(80, 2)
    assert list(where) == by_rule(80, [1, 1])
    assert Counter(where[:80]) == {0: 41, 1: 39} and where[80] == 1
    # three GPUs, 126 layers (Llama-3.1-405B): 127 slots cut at 1/3 and 2/3, in f32
    assert list(layer_devices(126, 3)) == by_rule(126, [1, 1, 1])
    assert Counter(layer_devices(126, 3)[:126]) == {0: 43, 1: 42, 2: 41}


def test_an_explicit_tensor_split_deals_the_slots_by_its_shares() -> None:
    """-ts 3,1 on 80 layers: the first GPU takes slots il / 81 < 3/4, layers 0-60 (61), the
    second 19 and the output; a zero share leaves a GPU nothing."""
    from collections import Counter

    from ridgeline.llamacpp_split import layer_devices, split_points

    assert split_points([3, 1]) == (0.75, 1.0)
    where = layer_devices(80, 2, [3, 1])
    assert list(where) == by_rule(80, [3, 1])
    assert Counter(where[:80]) == {0: 61, 1: 19} and where[80] == 1
    assert set(layer_devices(80, 2, [1, 0])) == {0}
    for bad in ([0, 0], [1, -1]):
        with pytest.raises(InputError, match="tensor-split"):
            split_points(bad)
    with pytest.raises(InputError, match="3 shares for 2 GPUs"):
        layer_devices(80, 2, [1, 1, 1])


def test_partial_offload_splits_the_gpu_slots_only() -> None:
    """-ngl 41 on 80 layers (PR #18148, output first): slots 40..80 on the GPUs, 41 of them,
    halved at 41 / 2: layers 40-60 on the first, 61-79 and the output on the second, 0-39 on
    the host. The rule before it put the last 41 layers there and the output on the host."""
    from ridgeline.llamacpp_split import layer_devices

    assert list(layer_devices(80, 2, n_gpu_layers=41)) == by_rule(80, [1, 1], 41)
    assert layer_devices(80, 2, n_gpu_layers=41)[40:42] == (0, 0)
    assert layer_devices(80, 2, n_gpu_layers=41)[:40] == (None,) * 40
    old = layer_devices(80, 2, n_gpu_layers=41, output_first=False)
    assert list(old) == by_rule(80, [1, 1], 41, output_first=False)
    assert old[80] is None and old[39] == 0


def test_each_gpu_of_the_split_holds_its_own_layers_weights_and_cache() -> None:
    """Llama-3.1-70B Q4_K_M on two GPUs: the first holds 41 layers' weights and 41/80 of the
    cache, the second 39 layers', the final norm and the lm_head; together every weight the
    GPUs hold (the input embedding stays on the host)."""
    from ridgeline.llamacpp_split import split_devices
    from ridgeline.offload import gpu_weight_bytes
    from ridgeline.quantization import LM_HEAD
    from ridgeline.stages import _layer_bytes

    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-3090"),
                           "q4_k_m", None, 2, engine="llama.cpp-cuda")
    first, second = split_devices(dep)
    layer = _layer_bytes(dep)[0]
    assert (first.layers, first.output, second.layers, second.output) == (41, False, 39, True)
    assert first.weight_bytes == pytest.approx(41 * layer)
    assert second.weight_bytes == pytest.approx(
        39 * layer + dep.bytes_by_category[LM_HEAD], rel=1e-4)  # + the final norm
    assert first.weight_bytes + second.weight_bytes == pytest.approx(gpu_weight_bytes(dep))
    assert (first.growing_share, second.growing_share) == (41 / 80, 39 / 80)
    assert second.describe() == "GPU 2 of 2 (39 layers and the output layer)"


def test_a_tied_output_layer_is_the_embeddings_copy_on_the_last_gpu() -> None:
    """Llama-3.2-1B ties its lm_head to the embedding: 17 slots over two GPUs put 9 layers on
    the first, 7 and the embedding's copy (the output) on the second."""
    from ridgeline.llamacpp_split import split_devices
    from ridgeline.quantization import EMBEDDING

    dep = Deployment.build(resolve_model("llama-3.2-1b"), resolve_accelerator("rtx-4090"),
                           "q8_0", None, 2, engine="llama.cpp-cuda")
    first, second = split_devices(dep)
    assert (first.layers, second.layers) == (9, 7)
    assert second.weight_bytes - first.weight_bytes * 7 / 9 == pytest.approx(
        dep.bytes_by_category[EMBEDDING], rel=1e-3)


def test_host_experts_and_host_layers_leave_the_split_gpus_only_what_they_hold() -> None:
    """Qwen3-30B-A3B, -ngl 30 and --cpu-moe over two GPUs: the GPUs' weights add up to what
    the deployment keeps on GPUs, and the host's layers hold no GPU's cache."""
    from ridgeline.llamacpp_pool import llamacpp_cache_on_gpu
    from ridgeline.llamacpp_split import split_devices
    from ridgeline.offload import HostOffload, gpu_weight_bytes

    model = resolve_model("qwen3-30b-a3b")
    dep = Deployment.build(model, resolve_accelerator("rtx-4090"), "q4_k_m", None, 2,
                           engine="llama.cpp-cuda", offload=HostOffload(30, 48, 80e9))
    devices = split_devices(dep)
    assert sum(d.weight_bytes for d in devices) == pytest.approx(gpu_weight_bytes(dep))
    assert sum(d.layers for d in devices) == 29  # the output layer took one slot of 30
    assert sum(d.growing_share for d in devices) == pytest.approx(llamacpp_cache_on_gpu(dep)[0])


def test_a_gpu_without_the_output_layer_reserves_no_logits() -> None:
    """The logits live on the output layer's GPU: the others' compute buffer is one layer's
    peak beside two hidden tensors (since PR #23861), or the FFN products where the older
    rule reserved all n_ubatch logits."""
    from ridgeline.llamacpp_memory import compute_buffer_bytes, ffn_peak_bytes, hidden_bytes

    model = resolve_model("llama-3.1-8b")
    with_head = compute_buffer_bytes(model, 512, 8192, True, outputs=4)
    without = compute_buffer_bytes(model, 512, 8192, True, outputs=4, holds_output=False)
    assert with_head - without == 4 * model.vocab_size * 4
    assert compute_buffer_bytes(model, 512, 8192, True, None, holds_output=False) == \
        hidden_bytes(model, 512) + ffn_peak_bytes(model, 512)


def test_the_gpu_holding_more_layers_binds_the_cells() -> None:
    """-c is one number for every GPU, so the pool is the tightest GPU's: Llama-3.1-70B Q4_K_M
    on two RTX 3090s binds on the first (41 layers, 41/80 of each cell's KV), whose compute
    buffer holds no logits; the second's, sized at the same -c, holds the slots' logits on
    top."""
    from ridgeline.kvcache import kv_footprint
    from ridgeline.memory import EngineSettings, kv_pool, stage_pools

    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-3090"),
                           "q4_k_m", None, 2, engine="llama.cpp-cuda")
    settings = EngineSettings(max_model_len=32768)
    first, second = stage_pools(dep, settings)
    pool = kv_pool(dep, settings)
    assert pool == first and pool.split_device is not None and pool.split_device.index == 0
    per_token = kv_footprint(dep.model, 1, dep.kv.bytes_per_element).bytes_per_token_growing
    assert pool.kv_bytes_per_token == pytest.approx(per_token * 41 / 80)
    assert first.blocks < second.blocks
    slots = first.max_num_seqs
    assert first.context_cells == second.context_cells <= first.tokens
    assert second.activation_bytes - first.activation_bytes == pytest.approx(
        slots * dep.model.vocab_size * 4)

"""llama.cpp's --fit (-ngl auto): the placement it picks is the most the GPU holds with the
margin free, experts of the last layers before whole layers for an MoE model, and the CLI
prices and prints that placement."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.context_length import served_positions
from ridgeline.errors import InputError
from ridgeline.llamacpp_fit import default_fit_target_bytes, fit_placement, holds
from ridgeline.memory import EngineSettings
from ridgeline.offload import GPU, HOST, HOST_EXPERTS, HostOffload, host_weight_bytes
from ridgeline.units import GIB, MIB
from tests.conftest import run_cli

DDR5_4800_DUAL = 76.8e9
SETTINGS = EngineSettings()


def whole(model: str, gpu: str, weights: str | None = "q4_k_m") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, 1,
                            engine="llama.cpp-cuda")


def place(dep: Deployment, context: int, sequences: int = 1,
          margin: float | None = None) -> Deployment:
    return fit_placement(dep, SETTINGS, context, sequences, HostOffload(
        dep.model.num_layers + 1, host_bandwidth_bytes_per_s=DDR5_4800_DUAL), margin)


def test_a_deployment_that_fits_is_left_whole() -> None:
    dep = whole("llama-3.1-8b", "rtx-4090")
    assert place(dep, 8192).offload is None


def test_a_dense_model_keeps_the_most_layers_the_margin_allows() -> None:
    dep = whole("llama-3.1-70b", "rtx-4090")  # 42 GB at q4_k_m on a 24 GiB card
    placed = place(dep, 4096)
    o = placed.offload
    assert o is not None and o.chosen_by_fit and o.cpu_expert_layers == 0
    margin = default_fit_target_bytes()
    assert holds(placed, SETTINGS, 4096, 1, margin)
    one_more = dep.offloaded(replace(o, gpu_layers=o.gpu_layers + 1))
    assert not holds(one_more, SETTINGS, 4096, 1, margin)
    # about 0.5 GB a layer: a bit under half of the 80 layers fit beside the output layer
    assert 35 <= o.gpu_layers <= 48


def test_the_margin_costs_layers() -> None:
    dep = whole("llama-3.1-70b", "rtx-4090")
    tight = place(dep, 4096, margin=0.0).offload
    roomy = place(dep, 4096, margin=4 * GIB).offload
    default = place(dep, 4096).offload
    assert tight and roomy and default
    assert tight.gpu_layers >= default.gpu_layers > roomy.gpu_layers


def test_more_context_moves_more_layers_to_the_host() -> None:
    dep = whole("llama-3.1-70b", "rtx-4090")
    short, long = place(dep, 4096).offload, place(dep, 32768).offload
    assert short and long and long.gpu_layers < short.gpu_layers


def test_an_moe_model_moves_the_experts_of_its_last_layers_first() -> None:
    dep = whole("qwen3-30b-a3b", "rtx-3060")  # 17 GiB at q4_k_m on a 12 GiB card
    placed = place(dep, 32768)
    o = placed.offload
    n = dep.model.num_layers
    assert o is not None and o.gpu_layers == n + 1 and o.experts_last
    assert 0 < o.cpu_expert_layers < n
    assert o.placement(n - 1, n) == HOST_EXPERTS and o.placement(0, n) == GPU
    assert not any(o.placement(i, n) == HOST for i in range(n))
    # the fewest: one layer's experts fewer on the host does not fit
    fewer = dep.offloaded(replace(o, cpu_expert_layers=o.cpu_expert_layers - 1))
    assert not holds(fewer, SETTINGS, 32768, 1, default_fit_target_bytes())


def test_the_last_layers_cost_what_the_first_layers_cost_on_a_model_of_alike_layers() -> None:
    dep = whole("qwen3-30b-a3b", "rtx-3060")
    fit = place(dep, 32768)
    assert fit.offload is not None
    first = dep.offloaded(HostOffload(dep.model.num_layers + 1, fit.offload.cpu_expert_layers,
                                      DDR5_4800_DUAL))
    assert host_weight_bytes(fit) == pytest.approx(host_weight_bytes(first))


def test_an_moe_model_whose_dense_weights_overflow_lowers_ngl_with_every_expert_on_host() -> None:
    dep = whole("deepseek-v3", "rtx-3060-ti")  # 3 dense layers, MLA and shared experts > 8 GiB
    placed = place(dep, 8192)
    o = placed.offload
    n = dep.model.num_layers
    assert o is not None
    all_experts = dep.offloaded(HostOffload(n + 1, n, DDR5_4800_DUAL, experts_last=True))
    assert not holds(all_experts, SETTINGS, 8192, 1, default_fit_target_bytes())
    assert 0 < o.gpu_layers <= n and o.cpu_expert_layers == n
    assert "every expert on the host" in o.describe(dep.model)


def test_a_card_too_small_for_the_compute_buffer_does_not_fit() -> None:
    acc = resolve_accelerator("rtx-3060")
    tiny = replace(acc, memory_bytes=1.2 * GIB, memory_size=1.2, memory_unit="GiB",
                   ecc_visible_bytes=None)
    dep = Deployment.build(resolve_model("llama-3.1-8b"), tiny, "q4_k_m", None, 1,
                           engine="llama.cpp-cuda")
    with pytest.raises(InputError, match="does not fit"):
        place(dep, 4096)


def test_fit_is_llamacpps() -> None:
    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("rtx-4090"),
                           "awq-int4", None, 1, engine="vllm")
    with pytest.raises(InputError, match=r"llama\.cpp"):
        place(dep, 4096)


def test_the_fit_target_is_llamacpps_default() -> None:
    assert default_fit_target_bytes() == 1024 * MIB


# -- the CLI ---------------------------------------------------------------------------
AUTO_70B = ("decode", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", "--batch", "1", "--context", "4096")


def test_decode_prices_the_placement_fit_picks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *AUTO_70B, "-ngl", "auto", "--host-bandwidth-gbs", "76.8",
                           "--json")
    assert code == 0
    auto = json.loads(out)
    ngl = place(whole("llama-3.1-70b", "rtx-4090"), 4096).offload
    assert ngl is not None
    code, out, _ = run_cli(capsys, *AUTO_70B, "-ngl", str(ngl.gpu_layers),
                           "--host-bandwidth-gbs", "76.8", "--json")
    assert code == 0
    explicit = json.loads(out)
    assert auto["points"] == explicit["points"]


def test_minus_one_is_auto(capsys: pytest.CaptureFixture[str]) -> None:
    _, auto, _ = run_cli(capsys, *AUTO_70B, "-ngl", "auto", "--host-bandwidth-gbs", "76.8")
    _, minus, _ = run_cli(capsys, *AUTO_70B, "-ngl", "-1", "--host-bandwidth-gbs", "76.8")
    assert "--fit" in auto and auto == minus


def test_all_is_the_whole_model(capsys: pytest.CaptureFixture[str]) -> None:
    """With no -ngl and no --host-bandwidth-gbs the build's default --fit is set aside: the
    answer is -ngl all's, "does not fit", and a caution names the weights --fit would move
    and the flag that prices them, in place of -ngl all's shorter hint (the answer had been
    -ngl all's alone). Its max-batch line is llama-server's under that --fit, fit's one
    conversation, where -ngl all's holds none, and a caution says which is which."""
    _, default, _ = run_cli(capsys, *AUTO_70B)
    _, every, _ = run_cli(capsys, *AUTO_70B, "-ngl", "all")
    said = [line for line in default.splitlines() if line not in every.splitlines()]
    hints = [line for line in every.splitlines() if line not in default.splitlines()]
    (moved,) = [line for line in said if "would move" in line]
    assert "DOES NOT FIT" in every and "--host-bandwidth-gbs" in moved
    assert any("would keep layers in host memory" in line for line in hints)
    assert any("could not load them with every layer on the GPU" in line for line in hints)
    assert any("(--fit-target 1,024 MiB left free) runs at most 1 sequence" in line
               for line in said)
    assert any("-ngl all's run holds no sequence" in line for line in said)
    assert [line for line in default.splitlines() if line not in said] \
        == [line for line in every.splitlines() if line not in hints]


@pytest.mark.parametrize("ngl", ["all", "auto", "20"])
def test_every_ngl_is_llamacpps(capsys: pytest.CaptureFixture[str], ngl: str) -> None:
    vllm = [("vllm" if arg == "llama.cpp-cuda" else arg) for arg in AUTO_70B]
    code, out, err = run_cli(capsys, *vllm, "-ngl", ngl)
    assert code == 2 and "vllm keeps every weight on the GPU" in err and not out


@pytest.mark.parametrize(("extra", "names"), [
    (("-ngl", "auto"), "--host-bandwidth-gbs"),  # the fit offloads: the host must be known
    (("-ngl", "auto", "--n-cpu-moe", "3"), "--n-cpu-moe"),
    (("-ngl", "20", "--fit-target", "512"), "-ngl auto"),
    (("-ngl", "auto", "--output-layer-last"), "--output-layer-last"),
    (("-ngl", "some"), "number of layers"),
])
def test_refusals(capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], names: str) -> None:
    code, out, err = run_cli(capsys, *AUTO_70B, *extra)
    assert code == 2 and names in err and "Traceback" not in err and not out


def test_fit_prints_the_placement_and_the_llama_server_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "qwen3-30b-a3b", "--gpu", "rtx-3060", "--engine",
                           "llama.cpp-cuda", "--weights", "q4_k_m", "--max-model-len", "32768",
                           "-ngl", "auto")
    assert code == 0
    assert "llama.cpp's --fit" in out and "experts of the last" in out
    assert "-ngl auto --fit on" in out and "--n-cpu-moe" not in out


def test_fit_offers_what_fit_would_do_as_a_lever(capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl all (every layer on the GPU, --fit stopped) does not hold the target; the lever is
    what llama-server does with no -ngl, and what ridgeline does by default."""
    argv = ("fit", "qwen3-30b-a3b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", "--max-model-len", "32768", "--target-concurrency", "2",
            "--json")
    code, out, _ = run_cli(capsys, *argv, "-ngl", "all")
    assert code == 0
    levers = {lv["name"].split(" (")[0]: lv for lv in json.loads(out)["levers"]}
    assert levers["llama.cpp --fit"]["conversations"] >= 2
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and json.loads(out)["conversations"] == levers["llama.cpp --fit"][
        "conversations"]


def test_a_deployment_that_does_not_fit_points_at_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *AUTO_70B)  # no host bandwidth: --fit's split is unpriced
    assert code == 0 and "DOES NOT FIT" in out and "--host-bandwidth-gbs GB/s prices" in out
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "rtx-4090", "--engine",
                           "vllm", "--weights", "fp8", "--batch", "1", "--context", "4096")
    assert code == 0 and "DOES NOT FIT" in out and "-ngl auto" not in out  # vLLM keeps all


def test_a_gibibyte_more_margin_moves_a_gibibyte_of_experts() -> None:
    """docs/offload.md's check: Qwen3.5-35B-A3B at -c 65536 on a 16 GB card keeps the experts
    of about 15 layers on the host at the default margin (llama-fit-params on a desktop's
    4070 Ti SUPER: 17⅔), and a GiB more margin moves about a GiB more of them."""
    dep = whole("qwen3.5-35b-a3b", "rtx-4080")
    default, wider = place(dep, 65536).offload, place(dep, 65536, margin=2048 * MIB).offload
    assert default and wider
    assert 14 <= default.cpu_expert_layers <= 16
    per_layer = (host_weight_bytes(place(dep, 65536)) - host_weight_bytes(
        dep.offloaded(replace(default, cpu_expert_layers=default.cpu_expert_layers - 1))))
    moved = wider.cpu_expert_layers - default.cpu_expert_layers
    assert abs(moved - 1024 * MIB / per_layer) <= 1


def test_the_host_share_counts_the_host_layers_cache(capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 40 of Llama-3.1-70B keeps 41 layers on the host: 20 GiB of weights, and at 128K
    cells about as much cache again (a layer's cache lives with it), over a 32 GiB host."""
    argv = (*AUTO_70B[:-2], "-ngl", "40", "--host-bandwidth-gbs", "76.8", "--host-memory-gib",
            "32")
    code, _, _ = run_cli(capsys, *argv, "--context", "4096")
    assert code == 0
    code, out, err = run_cli(capsys, *argv, "--context", "131072")
    assert code == 2 and "does not fit" in err and "KV cache" in err and not out
    from ridgeline.llamacpp_pool import host_cache_bytes
    dep = whole("llama-3.1-70b", "rtx-4090").offloaded(HostOffload(40, 0, DDR5_4800_DUAL))
    per_layer = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, fp16
    assert host_cache_bytes(dep, 131072) == pytest.approx(41 * per_layer * 131072)


# -- llama-server's -c 0: --fit shrinks the trained context before it moves weights -------
def test_an_unset_context_is_the_trained_one_when_it_fits() -> None:
    from ridgeline.llamacpp_fit import fit_context

    dep = whole("llama-3.1-8b", "rtx-4090")
    context, placed = fit_context(dep, SETTINGS, HostOffload(33, 0, DDR5_4800_DUAL))
    assert context == dep.model.max_position_embeddings and placed.offload is None


def test_an_unset_context_shrinks_to_the_longest_that_fits_whole() -> None:
    from ridgeline.llamacpp_fit import CONTEXT_ALIGN, fit_context

    dep = whole("llama-3.1-8b", "rtx-3060")  # 131,072 tokens of fp16 cache is 16 GiB
    context, placed = fit_context(dep, SETTINGS, HostOffload(33, 0, DDR5_4800_DUAL))
    margin = default_fit_target_bytes()
    assert placed.offload is None and context % CONTEXT_ALIGN == 0
    assert 4096 <= context < dep.model.max_position_embeddings
    assert holds(dep, SETTINGS, context, 1, margin)
    assert not holds(dep, SETTINGS, context + CONTEXT_ALIGN, 1, margin)


def test_only_below_the_floor_do_weights_move() -> None:
    from ridgeline.llamacpp_fit import fit_context

    dep = whole("gpt-oss-120b", "rtx-4090", None)  # 61 GiB of weights on a 24 GiB card
    context, placed = fit_context(dep, SETTINGS, HostOffload(37, 0, DDR5_4800_DUAL))
    assert context == 4096 and placed.offload is not None
    wider, _ = fit_context(dep, SETTINGS, HostOffload(37, 0, DDR5_4800_DUAL), min_context=8192)
    assert wider == 8192


def test_fit_and_simulate_take_llama_servers_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("--gpu", "rtx-3060", "--engine", "llama.cpp-cuda", "--weights", "q4_k_m", "-ngl",
            "auto")
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", *base, "--json")
    assert code == 0
    report = json.loads(out)
    assert "-c 0 under --fit" in report["longest_context_search"]
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-8b", *base, "--concurrency", "2",
                           "--num-requests", "8")
    assert code == 0 and f"-c {report['max_model_len']:,}" in out


@pytest.mark.parametrize("argv", [
    ("decode", "llama-3.1-8b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda", "-ngl", "auto",
     "--fit-ctx", "8192"),
    ("fit", "llama-3.1-8b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda", "-ngl", "auto",
     "--fit-ctx", "8192", "--max-model-len", "4096"),
    ("fit", "llama-3.1-8b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda", "--fit-ctx", "8192",
     "--max-model-len", "4096"),
])
def test_fit_ctx_is_for_an_unset_context(capsys: pytest.CaptureFixture[str],
                                         argv: tuple[str, ...]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and "--fit-ctx" in err and not out


# -- from the audit of -ngl auto ---------------------------------------------------------
def test_every_layer_on_the_host_leaves_the_gpu_any_number_of_cells() -> None:
    """-ngl 0: the cache lives with the layers on the host; the GPU is left the compute
    buffer, whose mask grows with -c, and --fit can place a batch of 16 at 8K."""
    from ridgeline.capacity import conversations
    from ridgeline.memory import kv_pool

    dep = whole("llama-3.1-8b", "rtx-3060", "q8_0").offloaded(HostOffload(0, 0, DDR5_4800_DUAL))
    pool = kv_pool(dep, EngineSettings(max_model_len=131072))
    assert pool.host_cells > 1_000_000 and conversations(pool, dep, 131072) >= 4
    placed = place(whole("llama-3.1-8b", "rtx-3060", "q8_0"), 8192, 16)
    assert placed.offload is not None and 0 < placed.offload.gpu_layers < 33


def test_every_layer_on_the_host_holds_the_cells_the_hosts_ram_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 0 with --host-memory-gib 64: the cache lives in the host's RAM beside 4.52 GiB of
    weights, (64 − 4.52) GiB ÷ 128 KiB a cell, 59 conversations of 8K; not the 2,961 the
    GPU's compute-buffer mask alone would allow (24 million cells, 23 GiB of buffer)."""
    argv = ("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-3090", "--weights",
            "q4_k_m", "--max-model-len", "8192", "-ngl", "0", "--json")
    code, out, _ = run_cli(capsys, *argv, "--host-memory-gib", "64")
    report = json.loads(out)
    assert code == 0 and report["conversations"] == 59
    assert 486_000 < report["tokens"] < 488_000  # 59.48 GiB ÷ 128 KiB
    code, out, _ = run_cli(capsys, *argv)  # no RAM given: the GPU's mask is the only bound
    assert code == 0 and json.loads(out)["conversations"] > 1000
    code, out, _ = run_cli(capsys, *argv[:-1], "--host-memory-gib", "64")
    assert code == 0 and "= KV cache" not in out and "in host memory" in out
    assert "takes 1.000 GiB of host memory" in out and "59 conversations" in out


def test_every_layer_on_the_host_without_its_ram_counts_no_conversations_by_the_gpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 0 without --host-memory-gib: the headline had read 'the memory holds 3,033
    conversations', the mask's count (terabytes of host cache), and levers up to -np 3033;
    it says the cache is the host's, what the command runs and what one takes, and asks for
    the RAM, with no lever counted by the mask."""
    argv = ("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "--weights",
            "q4_k_m", "--max-model-len", "8000", "-ngl", "0")
    code, out, _ = run_cli(capsys, *argv)
    headline = out.splitlines()[0]
    assert code == 0 and "the memory holds" not in headline and "3,033" not in headline
    assert headline.startswith("fits, under the ridge: the KV cache is in host memory (-ngl 0), "
                               "which the GPU does not bound: the llama-server command below "
                               "runs 4 conversations of 8,000 tokens at once (-np 4), 0.977 "
                               "GiB of host memory each; --host-memory-gib counts how many")
    assert "levers:" not in out and "-np 3033" not in out
    assert "conversations of 8,000 tokens at once: slots (-np) 4 = 4 (the host's RAM, not given" in out
    report = json.loads(run_cli(capsys, *argv, "--json")[1])
    assert report["host_cache_unbounded"] is True and report["levers"] == []
    code, out, _ = run_cli(capsys, *argv, "--host-memory-gib", "64")  # the RAM counts them
    assert code == 0 and out.startswith("fits, under the ridge: the memory holds 60 ")
    assert "levers:" in out
    report = json.loads(run_cli(capsys, *argv, "--host-memory-gib", "64", "--json")[1])
    assert report["host_cache_unbounded"] is False


def test_every_layer_on_the_host_reserves_the_compute_buffer_for_the_c_it_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl 0 without --host-memory-gib: llama.cpp reserves the compute buffer for the n_ctx
    it starts (graph_reserve over its memory's cells), -c 32,000 here (4 slots of 8,000). The
    budget had sized it at the 24 million cells the GPU's mask allows, 23.24 GiB of a 4090's
    buffer for a command that reserves 0.13 GiB; the mask still bounds how far -c may go."""
    from ridgeline.llamacpp_memory import compute_buffer_bytes

    argv = ("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "--weights",
            "q4_k_m", "--max-model-len", "8000", "-ngl", "0")
    report = json.loads(run_cli(capsys, *argv, "--json")[1])
    assert report["llama_server_c"] == 32_000 and report["tokens"] > 24_000_000
    # the GPU memory the buffer leaves is unused, not a KV pool: the cells are the host's
    assert report["kv_cache_on_host"] is True and report["pool_bytes_total"] > 20 * 2**30
    buffer = compute_buffer_bytes(resolve_model("llama-3.1-8b"), 512, 32_000, True, 4)
    assert report["taken_bytes_per_gpu"]["activations"] == pytest.approx(buffer)
    assert buffer < 0.2 * GIB
    out = run_cli(capsys, *argv, "--explain")[1]
    assert "mask = 0.0" in out and "[32,000 cells × n_ubatch 512 × 2 B]" in out
    assert "cells = 32,000  [the -c llama-server starts (slots × context)" in out


def test_the_host_ram_is_checked_on_the_placement_picked_not_on_the_probes(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = (*AUTO_70B, "-ngl", "auto", "--host-bandwidth-gbs", "76.8")
    code, out, _ = run_cli(capsys, *argv, "--host-memory-gib", "24")  # -ngl 44: 20 GiB there
    assert code == 0 and "-ngl 44" in out
    code, _, err = run_cli(capsys, *argv, "--host-memory-gib", "16")
    assert code == 2 and "does not fit" in err


def test_an_engine_comparison_refuses_placement_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--weights",
                             "q4_k_m", "--engine", "llama.cpp-cuda,vllm", "--max-model-len",
                             "8192", "-ngl", "auto")
    assert code == 2 and "-ngl" in err and not out


def test_n_cpu_moe_over_several_gpus_is_refused_as_an_uneven_split() -> None:
    dep = Deployment.build(resolve_model("gpt-oss-120b"), resolve_accelerator("rtx-3090"), None,
                           None, 2, engine="llama.cpp-cuda")
    with pytest.raises(InputError, match="even split"):
        dep.offloaded(HostOffload(37, 18, DDR5_4800_DUAL))
    assert dep.offloaded(HostOffload(37, 36, DDR5_4800_DUAL)).offload is not None  # --cpu-moe


def test_fit_starts_llama_server_with_the_cells_it_placed_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--weights",
                           "q4_k_m", "--engine", "llama.cpp-cuda", "-ngl", "auto")
    assert code == 0 and "-c 4,096" in out
    assert "llama-server -c 4096 " in out and "1 conversation of 4,096 tokens" in out


def test_several_gpus_get_the_offload_levers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "rtx-3090", "--num-gpus",
                           "2", "--weights", "q8_0", "--engine", "llama.cpp-cuda",
                           "--max-model-len", "8192", "--json", "-ngl", "all")
    assert code == 0
    names = [lv["name"] for lv in json.loads(out)["levers"]]
    assert any(n.startswith("llama.cpp --fit") for n in names)
    assert any(n.startswith("-ngl ") for n in names)


def test_fit_says_why_it_cannot_place(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine",
                             "llama.cpp-cuda", "-ngl", "auto", "--fit-target", "30000")
    assert code == 2 and "nothing is left" in err and not out


def test_typed_fit_that_finds_no_placement_answers_as_llama_server_loads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ngl auto typed is llama.cpp's default (-1): where --fit finds no placement (one memory,
    nowhere to move weights) llama-server warns and loads every layer as given, as it does
    with no -ngl; decode says so and answers that run, as the default does (it had refused)."""
    argv = ("decode", "llama-3.1-70b", "--gpu", "apple-m2-ultra-76c", "--gpu-memory-gib", "64",
            "--weights", "q8_0", "--engine", "llama.cpp-metal")
    code, typed, err = run_cli(capsys, *argv, "-ngl", "auto")
    assert code == 0, err
    code, default, _ = run_cli(capsys, *argv)
    assert code == 0 and typed == default
    (said,) = [line for line in typed.splitlines() if "finds no placement" in line]
    assert "share one memory" in said and "starts as given" in said


def test_placements_are_shown_in_comparisons_and_simulate_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "rtx-3060,rtx-4090",
                           "--weights", "q4_k_m", "--engine", "llama.cpp-cuda", "-ngl", "auto",
                           "--host-bandwidth-gbs", "76.8")
    assert code == 0 and "rtx-3060: llama.cpp's --fit: -ngl" in out
    assert "rtx-4090: llama.cpp's --fit: -ngl 44" in out
    code, out, _ = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "rtx-4090", "--weights",
                           "q4_k_m", "--engine", "llama.cpp-cuda", "-ngl", "auto",
                           "--host-bandwidth-gbs", "76.8", "--max-model-len", "4096",
                           "--max-num-seqs", "1", "--concurrency", "1", "--num-requests", "3",
                           "--json")
    assert code == 0
    offload = json.loads(out)["settings"]["offload"]
    assert offload["chosen_by_fit"] and offload["gpu_layers"] == 44


def test_simulate_holds_the_cells_fit_placed_for(capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server allocates -c cells up front and no more: the simulated pool is that -c."""
    base = ("simulate", "llama-3.1-8b", "--gpu", "rtx-3060", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", "-ngl", "auto", "--concurrency", "2", "--num-requests", "4",
            "--json")
    code, out, _ = run_cli(capsys, *base)
    assert code == 0
    settings = json.loads(out)["settings"]
    assert settings["num_blocks"] * settings["block_size"] == settings["max_model_len"] == 49408
    flags = ("llama-3.1-70b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine",
             "llama.cpp-cuda", "-ngl", "auto", "--host-bandwidth-gbs", "76.8",
             "--max-model-len", "4096", "--max-num-seqs", "2")
    code, out, _ = run_cli(capsys, "fit", *flags, "--json")
    assert code == 0
    printed = json.loads(out)["llama_server_c"]  # no slot fits whole: -c 4096, shared by 2
    code, out, _ = run_cli(capsys, "simulate", *flags, "--concurrency", "1", "--num-requests",
                           "3", "--json")
    settings = json.loads(out)["settings"]
    assert code == 0 and settings["num_blocks"] * settings["block_size"] == printed
    assert settings["max_num_seqs"] == 2 and printed < 2 * settings["max_model_len"]


def test_fit_checks_the_hosts_ram_at_the_c_it_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """Target 16 with 4 slots (-np 4 given): -ngl 14 starts llama-server with -c 32768
    (4 x 8K), and the host's RAM is checked for that -c, not for 16 conversations."""
    argv = ("fit", "llama-3.1-8b", "--gpu", "rtx-3060", "--weights", "q8_0", "--engine",
            "llama.cpp-cuda", "--max-model-len", "8192", "--target-concurrency", "16",
            "--parallel", "4")
    code, out, _ = run_cli(capsys, *argv, "-ngl", "14", "--host-memory-gib", "8")
    assert code == 0 and "llama-server -c 32768" in out and "at 32,768 cells" in out
    code, out, _ = run_cli(capsys, *argv, "-ngl", "auto")
    assert code == 0 and "llama-server -c 131072" in out and "at 131,072 cells" in out


def test_comparisons_say_where_each_card_keeps_its_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("prefill", "llama-3.1-70b", "--prompt-len", "4096"),
                 ("fit", "llama-3.1-70b", "--max-model-len", "8192")):
        code, out, _ = run_cli(capsys, *argv, "--gpu", "rtx-3060,rtx-4090", "--weights",
                               "q4_k_m", "--engine", "llama.cpp-cuda", "-ngl", "auto",
                               "--host-bandwidth-gbs", "76.8")
        assert code == 0 and "where the weights live:" in out and "rtx-4090: llama.cpp's --fit" in out


def test_a_placement_seats_no_more_than_the_cells_it_was_placed_for() -> None:
    """--fit placed llama-3.1-70b for -c 4096: llama-server allocates those 4,096 cells and no
    more, so decode's batch is 4 at 1,024 tokens (not the 10 a 1,024-token pool would give)
    and none at 8,192."""
    from ridgeline.capacity import engine_holds

    placed = place(whole("llama-3.1-70b", "rtx-4090"), 4096)
    assert [engine_holds(placed, c) for c in (1024, 2048, 4096, 8192)] == [4, 2, 1, 0]


def test_fit_could_offload_on_a_discrete_card_not_on_unified_memory_nor_a_given_split() -> None:
    from ridgeline.llamacpp_fit import fit_could_offload

    model = resolve_model("llama-3.1-70b")
    geforce = Deployment.build(model, resolve_accelerator("rtx-4090"), engine="llama.cpp-cuda")
    apple = Deployment.build(model, resolve_accelerator("apple-m2-ultra-76c"),
                             engine="llama.cpp-metal")
    spark = Deployment.build(model, resolve_accelerator("dgx-spark-gb10"),
                             engine="llama.cpp-cuda")
    assert fit_could_offload(geforce) and not fit_could_offload(apple)
    assert not fit_could_offload(spark)  # the GB10's memory is the host's
    assert not fit_could_offload(geforce, "vllm")  # another engine's expectation


@pytest.mark.parametrize(("gpu", "hinted"), [("rtx-4090", True), ("apple-m2-ultra-76c", False)])
def test_decode_and_simulate_name_the_fit_where_it_could_keep_layers_on_the_host(
        capsys: pytest.CaptureFixture[str], gpu: str, hinted: bool) -> None:
    from tests.conftest import run_cli

    model = "llama-3.1-70b" if hinted else "llama-3.1-405b"  # neither fits its card
    _, out, _ = run_cli(capsys, "decode", model, "--gpu", gpu, "--engine", "llama.cpp")
    assert ("llama-server's default --fit" in out and "--host-bandwidth-gbs" in out) is hinted
    code, _, err = run_cli(capsys, "simulate", model, "--gpu", gpu, "--engine", "llama.cpp",
                           "--rate", "1", "--num-requests", "10")
    assert code == 2 and "its weights alone" in err  # as fit says it
    assert ("default --fit would keep layers in host memory" in err) is hinted


def test_llama_server_serves_no_conversation_past_the_trained_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server caps each slot at n_ctx_train (Mistral-7B-v0.1: 32,768) whatever -c, so
    fit holds no 131,072-token conversation and prints no llama-server line for it, and
    simulate refuses the length; at the trained context it still fits."""
    model = resolve_model("mistral-7b")
    trained = served_positions(model, "llama.cpp-cuda")
    assert trained is not None
    base = ("mistral-7b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--target-concurrency", "4")
    code, out, _ = run_cli(capsys, "fit", *base, "--max-model-len", str(4 * trained))
    assert code == 0 and out.startswith("DOES NOT FIT: llama-server caps each slot at")
    assert "start it with: llama-server" not in out
    code, out, _ = run_cli(capsys, "fit", *base, "--max-model-len", str(trained))
    assert code == 0 and out.startswith("fits") and "start it with: llama-server" in out
    code, _, err = run_cli(capsys, "simulate", "mistral-7b", "--gpu", "rtx-4090", "--engine",
                           "llama.cpp", "--max-model-len", str(2 * trained),
                           "--num-requests", "5")
    assert code == 2 and f"llama-server caps each slot at mistral-7b's {trained:,}" in err
    # the two launches that lift n_ctx_train: the GGUF's length rewritten, or YaRN (PR #28030)
    assert f"--override-kv llama.context_length=int:{2 * trained}" in err
    assert "--rope-scaling yarn --rope-scale F" in err


@pytest.mark.parametrize(("model", "gpu", "context"), [
    ("llama-3.1-70b", "h100", 8192),  # placed for one 8,192-cell -c: halving keeps one
    ("llama-3.1-8b", "l4", 60000),  # placed again at half: two fit, as the lever says
])
def test_the_half_context_lever_is_what_fit_says_at_that_context(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, context: int) -> None:
    """Under the default --fit a run at L is placed for -c L × the slots that fit whole (at
    least one); the half-context lever is that run at L/2, placed for its own -c, not the
    first placement's -c holding two half-length conversations a run at L/2 never starts
    with (Llama-3.1-70B on an H100 said 2, where `fit --max-model-len 4096` holds 1)."""
    argv = ("fit", model, "--gpu", gpu, "--engine", "llama.cpp", "--json")
    code, out, _ = run_cli(capsys, *argv, "--max-model-len", str(context))
    assert code == 0
    report = json.loads(out)
    code, out, _ = run_cli(capsys, *argv, "--max-model-len", str(context // 2))
    assert code == 0
    halved = json.loads(out)["conversations"]
    for lever in report["levers"]:
        if lever["name"].startswith("half the context"):
            assert lever["conversations"] == halved
    assert any(lv["name"].startswith("half the context") for lv in report["levers"]) \
        == (halved > report["conversations"])  # a lever only where it gains


@pytest.mark.parametrize(("model", "gpu", "context"), [
    # 4 slots fit whole; 50 slots' window and state caches make --fit move one MoE layer's
    # experts to the host, which the lever priced on the 4-slot placement said nothing of
    ("qwen3-next-80b-a3b", "mi300x", 32768),
    ("llama-3.1-8b", "l4", 8192),  # -np 7: --fit moves 1.38 GiB the lever named nowhere
])
def test_the_slots_lever_is_what_fit_says_with_that_many_slots(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, context: int) -> None:
    """The "N slots (-np N --kv-unified)" lever is the run `fit … -np N` describes: under
    the default --fit that run is placed again for its own -c and slots, so the lever's
    conversations and batch are that run's (Qwen3-Next-80B on an MI300X at 32K said 51
    conversations, where -np 50 holds 50), and it names the weights --fit moves to the
    host where it moves more than the report's own placement."""
    argv = ("fit", model, "--gpu", gpu, "--engine", "llama.cpp", "--max-model-len",
            str(context), "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    report = json.loads(out)
    slots = [lv for lv in report["levers"] if " slots (-np " in lv["name"]]
    assert len(slots) == 1
    n = int(slots[0]["name"].split()[0])
    code, out, _ = run_cli(capsys, *argv, "-np", str(n))
    assert code == 0
    pulled = json.loads(out)
    assert (slots[0]["conversations"], slots[0]["engine_max_batch"]) == (pulled["conversations"],
                                                             pulled["engine_max_batch"])
    code, text, _ = run_cli(capsys, *argv[:-1], "-np", str(n))
    assert code == 0
    assert ("GiB of weights on the host" in slots[0]["name"]) == (
        text.splitlines()[2].startswith("llama.cpp's --fit:")
        and "of weights and" in text.splitlines()[2])

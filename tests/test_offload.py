"""llama.cpp partial offload: where -ngl and --n-cpu-moe put the weights, what streaming the
host's share costs a decode step and a prompt, and what it frees on the GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import Seq, decode_batch, step_cost, step_time_s
from ridgeline.engines import profile_for
from ridgeline.errors import InputError
from ridgeline.floors import decode_floor
from ridgeline.kvcache import kv_footprint
from ridgeline.measurements import read_measurements
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.offload import (
    GPU,
    HOST,
    HOST_EXPERTS,
    HostOffload,
    gpu_attention_share,
    gpu_weight_bytes,
    host_bandwidth_share,
    host_weight_bytes,
    placed_layers,
)
from ridgeline.params import layer_params
from ridgeline.predict import predict
from ridgeline.quantization import EMBEDDING, LM_HEAD
from ridgeline.sim.timer import StepTimer

ROOT = Path(__file__).resolve().parent.parent
DDR4_2400_DUAL = 38.4e9  # 2 channels x 8 B x 2400 MT/s
LLAMA = profile_for("llama.cpp-cuda")


def offloaded(ngl: int, model: str = "qwen2.5-14b", gpu: str = "rtx-5060-ti",
              weights: str = "q4_k_m", experts: int = 0, output_first: bool = True,
              link: float | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, 1,
                            engine="llama.cpp-cuda",
                            offload=HostOffload(ngl, experts, DDR4_2400_DUAL, link, output_first))


def layer_bytes(dep: Deployment) -> float:
    """One repeating layer's weights, from the parameter counts (a uniform dense model)."""
    layer = dep.model.layers[0]
    return sum(n * dep.weights.format_of(c).bytes_per_weight
               for c, n in layer_params(dep.model, layer).items())


def test_ngl_puts_the_output_layer_first_then_the_last_layers() -> None:
    spec = resolve_model("qwen2.5-14b")  # 48 layers
    eight = HostOffload(8, host_bandwidth_bytes_per_s=1e9)
    assert eight.output_on_gpu(48) and eight.repeating_on_gpu(48) == 7
    assert [eight.layer_on_gpu(i, 48) for i in (0, 40, 41, 47)] == [False, False, True, True]
    legacy = HostOffload(8, host_bandwidth_bytes_per_s=1e9, output_first=False)
    assert not legacy.output_on_gpu(48) and legacy.repeating_on_gpu(48) == 8
    assert HostOffload(49, output_first=False).output_on_gpu(48)  # the old "-ngl 99"
    none = HostOffload(0, host_bandwidth_bytes_per_s=1e9)
    assert not none.output_on_gpu(48) and none.repeating_on_gpu(48) == 0
    assert "7 of 48 layers on the GPU, the output layer too" in eight.describe(spec)


def test_weights_split_between_gpu_and_host_add_up() -> None:
    for ngl in (0, 1, 20, 48, 49):
        dep = offloaded(ngl)
        assert gpu_weight_bytes(dep) + host_weight_bytes(dep) == pytest.approx(dep.weight_bytes)
    nothing = offloaded(0)
    assert gpu_weight_bytes(nothing) == pytest.approx(0.0, abs=1.0)
    everything = offloaded(49)  # output + 48 layers: only the token embeddings stay behind
    assert host_weight_bytes(everything) == pytest.approx(everything.bytes_by_category[EMBEDDING])
    # -ngl 1 is the output layer alone
    one = offloaded(1)
    assert gpu_weight_bytes(one) == pytest.approx(one.bytes_by_category[LM_HEAD], rel=1e-4)


def test_a_decode_step_adds_the_host_layers_at_the_host_share() -> None:
    full, part = offloaded(49), offloaded(33)  # 16 layers move to the host
    host_ops = [op for op in step_cost(part, decode_batch(1, 512), LLAMA).ops
                if op.bound == "host"]
    layers = 16 * layer_bytes(part)
    kv = sum(op.bytes for op in host_ops if op.name.startswith("attention ("))
    assert sum(op.bytes for op in host_ops) == pytest.approx(layers + kv, rel=0.01)
    expected = (layers + kv) / (DDR4_2400_DUAL * host_bandwidth_share())
    assert sum(op.time_s for op in host_ops) == pytest.approx(expected, rel=0.01)
    # the step is a sum: the host's time on top of what the GPU keeps
    gap = step_time_s(part, decode_batch(1, 512), LLAMA) - step_time_s(
        full, decode_batch(1, 512), LLAMA)
    assert gap == pytest.approx(expected, rel=0.1)


def test_the_worked_sweep_point() -> None:
    """Qwen2.5-14B Q4_K_M with no layer on an RTX 5060 Ti, host DDR4-2400 dual channel:
    every weight but the embeddings streams at 0.65 x 38.4 GB/s; InventiveHQ measured 2.89."""
    dep = offloaded(0)
    floor = decode_floor(dep, 1, 228)
    host = host_weight_bytes(dep) - dep.bytes_by_category[EMBEDDING]
    assert floor.host_time_s == pytest.approx(host / DDR4_2400_DUAL, rel=0.02)
    tok_s = 1 / step_time_s(dep, decode_batch(1, 228), LLAMA)
    assert tok_s == pytest.approx(2.89, rel=0.05)


@given(st.integers(0, 48), st.integers(1, 8))
def test_more_gpu_layers_never_slow_decode(ngl: int, more: int) -> None:
    slow = step_time_s(offloaded(ngl), decode_batch(1, 1000), LLAMA)
    fast = step_time_s(offloaded(min(49, ngl + more)), decode_batch(1, 1000), LLAMA)
    assert fast <= slow


def test_a_prompt_copies_the_host_weights_over_the_link_once_per_step() -> None:
    slow_link, fast_link = 8e9, 16e9  # both under what the DDR4 host delivers (0.65 × 38.4)
    a = offloaded(0, model="qwen2.5-32b", gpu="rtx-4090", weights="q5_k_m", link=slow_link)
    b = offloaded(0, model="qwen2.5-32b", gpu="rtx-4090", weights="q5_k_m", link=fast_link)
    prompt = [Seq(2048, 0)]
    over_link = [op for op in step_cost(a, prompt, LLAMA).ops
                 if op.name.endswith("(over the host link)")]
    weights = sum(op.bytes for op in over_link if not op.name.startswith("attention ("))
    assert weights == pytest.approx(host_weight_bytes(a) - a.bytes_by_category[EMBEDDING],
                                    rel=0.01)
    # and the host layers' cache, which attention on the GPU reads: the prompt's own K and V
    kv = sum(op.bytes for op in over_link if op.name.startswith("attention ("))
    per_token = kv_footprint(a.model, 2048, a.kv.bytes_per_element).bytes_per_token_growing
    # all 64 layers on the host: the prompt's K and V written to the host cache, read back
    assert kv == pytest.approx(2 * 2048 * per_token, rel=0.01)
    copied = weights + kv
    gap = step_time_s(a, prompt, LLAMA) - step_time_s(b, prompt, LLAMA)
    assert gap == pytest.approx(copied / slow_link - copied / fast_link, rel=0.01)
    # below the op-offload batch the host's CPU does the work: the link plays no part
    assert step_time_s(a, [Seq(16, 0)], LLAMA) == pytest.approx(
        step_time_s(b, [Seq(16, 0)], LLAMA))


def test_expert_offload_moves_only_the_experts() -> None:
    dep = Deployment.build(resolve_model("gpt-oss-120b"), resolve_accelerator("rtx-4090"), None,
                           None, 1, engine="llama.cpp-cuda",
                           offload=HostOffload(37, 36, 89.6e9))
    assert {where for _, where, _ in placed_layers(dep)} == {HOST_EXPERTS}
    host = [op.name for op in step_cost(dep, decode_batch(1, 100), LLAMA).ops
            if op.bound == "host"]
    assert host == ["experts (host memory)"]
    assert gpu_attention_share(dep) == 1.0  # the cache stays with its (GPU) layers
    half = Deployment.build(dep.model, dep.accelerator, None, None, 1, engine="llama.cpp-cuda",
                            offload=HostOffload(37, 18, 89.6e9))
    assert {where for _, where, _ in placed_layers(half)} == {HOST_EXPERTS, GPU}
    assert host_weight_bytes(dep) > host_weight_bytes(half) > 0


def test_the_gpu_keeps_only_its_layers_cache_and_weights() -> None:
    s = EngineSettings(max_model_len=32768)
    full = kv_pool(offloaded(65, "qwen2.5-32b", "rtx-4090"), s)
    part_dep = offloaded(33, "qwen2.5-32b", "rtx-4090")  # output + 32 of 64 layers
    part = kv_pool(part_dep, s)
    assert gpu_attention_share(part_dep) == pytest.approx(0.5)
    assert part.kv_bytes_per_token == pytest.approx(full.kv_bytes_per_token / 2)
    assert part.weight_bytes == pytest.approx(gpu_weight_bytes(part_dep))
    assert part.tokens > 2 * full.tokens  # half the cache per cell, in more free memory
    assert {where for _, where, _ in placed_layers(part_dep)} == {GPU, HOST}


def test_offload_is_llama_cpps_split_by_layer_with_its_host_stated() -> None:
    model, acc = resolve_model("qwen2.5-32b"), resolve_accelerator("rtx-4090")
    with pytest.raises(InputError, match=r"llama\.cpp's"):
        Deployment.build(model, acc, "q4_k_m", engine="vllm", offload=HostOffload(20, 0, 1e10))
    with pytest.raises(InputError, match="-sm layer"):  # several GPUs: by layer only
        Deployment.build(model, acc, "q4_k_m", num_gpus=2, engine="llama.cpp-cuda",
                         offload=HostOffload(20, 0, 1e10), split_mode="tensor")
    # fit needs no host figure; a step that runs layers on the CPU does, a prompt does not
    bare = Deployment.build(model, acc, "q4_k_m", engine="llama.cpp-cuda",
                            offload=HostOffload(20))
    with pytest.raises(InputError, match="host-bandwidth-gbs"):
        step_time_s(bare, decode_batch(1, 100), LLAMA)
    assert step_time_s(bare, [Seq(512, 0)], LLAMA) > 0
    with pytest.raises(InputError, match="share one memory"):
        Deployment.build(model, resolve_accelerator("apple-m4-max-40c"), "q4_k_m",
                         engine="llama.cpp-metal", offload=HostOffload(20, 0, 1e11))
    with pytest.raises(InputError, match="has none"):
        Deployment.build(model, acc, "q4_k_m", engine="llama.cpp-cuda",
                         offload=HostOffload(99, 4, 1e10))
    with pytest.raises(InputError, match="≥ 0"):
        HostOffload(-1)
    # everything on the GPU needs no host figure
    Deployment.build(model, acc, "q4_k_m", engine="llama.cpp-cuda", offload=HostOffload(65))


def test_rows_state_their_offload_in_the_notes() -> None:
    rows = read_measurements(ROOT / "validation" / "offload.csv").rows
    assert rows and all(r.offload() is not None for r in rows)
    ik = next(r for r in rows if r.id == "OF-ik255-Q25-32B-4090-ngl32-tg128").offload()
    assert ik == HostOffload(32, 0, 76.8e9, None, output_first=False)
    full_gpu = read_measurements(ROOT / "validation" / "measurements.csv").rows[0]
    assert full_gpu.offload() is None  # 'ngl 99' without a host: the GPU alone
    for row in rows:
        p = predict(row)
        assert p.predicted is not None, p.reason


@pytest.mark.parametrize("argv, message", [
    (["-ngl", "20", "--host-bandwidth-gbs", "76.8"], "llama.cpp's"),  # engine vllm
    (["--engine", "llama.cpp", "--host-bandwidth-gbs", "76.8", "-ngl", "all"], "give -ngl N"),
    (["--engine", "llama.cpp", "-ngl", "20"], "host-bandwidth-gbs"),
    (["--engine", "llama.cpp", "--n-cpu-moe", "3", "--host-bandwidth-gbs", "9"], "has none"),
    (["--engine", "llama.cpp", "-ngl", "20", "--host-bandwidth-gbs", "9", "--num-gpus", "2",
      "-sm", "tensor"], "-sm layer"),
    (["--engine", "llama.cpp", "--cpu-moe", "--n-cpu-moe", "3"], "drop --n-cpu-moe"),
    (["--engine", "llama.cpp", "-ngl", "-3"], "number of layers"),
    (["--engine", "llama.cpp", "-ngl", "20", "--host-bandwidth-gbs", "-5"], "bandwidth"),
])
def test_bad_offload_flags_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                  message: str) -> None:
    try:
        code = main(["decode", "qwen2.5-32b", "--gpu", "rtx-4090", "--weights", "q4_k_m", *argv])
    except SystemExit as exit_info:  # argparse's own checks
        code = int(str(exit_info.code))
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_decode_prefill_and_fit_answer_with_offload(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["qwen2.5-32b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine", "llama.cpp",
            "-ngl", "40", "--host-bandwidth-gbs", "76.8"]
    assert main(["decode", *base, "--json"]) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert point["host_time_s"] > point["memory_time_s"] and point["bound"] == "host memory"
    assert point["expected"]["per_user_tok_s"] == point["per_user_tok_s"] \
        < point["floor_per_user_tok_s"]
    none_on_gpu = [*base[:-3], "0", *base[-2:]]
    assert main(["prefill", *none_on_gpu, "--prompt-len", "1024", "-ub", "512", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "bound by the host link" in out and "n_ubatch = 512" in out and "ubatches = 2" in out
    assert main(["fit", *base, "--max-model-len", "32768"]) == 0
    out = capsys.readouterr().out
    assert "-ngl 40" in out.split("start it with:")[1] and "stay in host memory" in out


def test_fit_offers_partial_offload_when_the_weights_crowd_out_the_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "qwen2.5-32b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine",
            "llama.cpp", "--max-model-len", "32768", "--json", "-ngl", "all"]  # --fit off
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "does not fit"
    lever = next(lv for lv in report["levers"] if lv["name"].startswith("-ngl "))
    assert lever["conversations"] >= 1
    ngl = int(lever["name"].split()[1])
    lever_argv = argv[:-2]  # the same command with the lever's -ngl for --fit off's "all"
    assert main([*lever_argv, "-ngl", str(ngl), "--host-bandwidth-gbs", "76.8"]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] >= 1
    assert main([*lever_argv, "-ngl", str(ngl + 1), "--host-bandwidth-gbs", "76.8"]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] == 0  # the most layers that fit


def test_the_simulator_prices_each_step_with_the_host_terms() -> None:
    """With offload the timer hands every step to shape_time_s, host terms and all."""
    from ridgeline.cost import batch_shape, shape_time_s

    dep = offloaded(33)
    timer = StepTimer(dep, LLAMA)
    for batch in ([Seq(1, 300)] * 4, [Seq(512, 0), Seq(1, 900)], [Seq(1, 100)] * 40):
        assert timer.time_s(batch_shape(dep, batch)) == pytest.approx(
            shape_time_s(dep, batch_shape(dep, batch), LLAMA))
    assert timer.decode_time_s(4, 1200) == pytest.approx(
        step_time_s(dep, decode_batch(4, 300), LLAMA))


def test_simulate_runs_a_partial_offload(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "qwen2.5-32b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine",
            "llama.cpp", "--concurrency", "2", "--num-requests", "6", "--max-model-len", "8192",
            "--json"]
    tpot = []
    for ngl in ("65", "40"):
        assert main([*argv, "-ngl", ngl, "--host-bandwidth-gbs", "76.8"]) == 0
        tpot.append(json.loads(capsys.readouterr().out)["tpot_s"]["p50"])
    assert tpot[1] > 3 * tpot[0]  # 25 layers streamed from host memory each token


def test_a_card_recorded_with_its_bridge_copies_over_its_pcie_generation() -> None:
    """An RTX 3090's record names its NVLink bridge; its host link is PCIe 4.0 x16."""
    from ridgeline.offload import link_bytes_per_s

    dep = offloaded(30, gpu="rtx-3090")
    assert dep.accelerator.link_kind == "nvlink3-bridge"
    assert link_bytes_per_s(dep) == 32e9
    assert link_bytes_per_s(offloaded(30, gpu="rtx-3090", link=8e9)) == 8e9


def test_a_window_models_growing_cache_follows_its_full_layers() -> None:
    """Gemma-3-27B has a full-attention layer every sixth: with -ngl 58 the five layers left
    on the host are windowed, so every growing cell stays on the GPU."""
    from ridgeline.layouts import FULL
    from ridgeline.llamacpp_pool import llamacpp_cache_on_gpu

    dep = offloaded(58, model="gemma-3-27b", gpu="rtx-4090")
    host = [i for i in range(62) if not dep.offload.layer_on_gpu(i, 62)]  # type: ignore[union-attr]
    assert all(dep.model.layers[i].mixer != FULL for i in host)
    growing, windows = llamacpp_cache_on_gpu(dep)
    assert growing == 1.0 and windows < 1.0


def test_llama_cpp_keeps_the_token_embeddings_on_the_cpu() -> None:
    """Without -ngl or with every layer offloaded the GPU holds the same weights."""
    model, acc = resolve_model("qwen2.5-32b"), resolve_accelerator("rtx-4090")
    plain = Deployment.build(model, acc, "q4_k_m", engine="llama.cpp-cuda")
    every = Deployment.build(model, acc, "q4_k_m", engine="llama.cpp-cuda",
                             offload=HostOffload(99))
    assert gpu_weight_bytes(plain) == pytest.approx(gpu_weight_bytes(every))
    assert gpu_weight_bytes(plain) == pytest.approx(
        plain.weight_bytes - plain.bytes_by_category[EMBEDDING])


def test_fit_offers_expert_offload_for_an_moe_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "gpt-oss-120b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
            "--max-model-len", "32k", "--json", "-ngl", "all"]  # every layer: --fit off
    assert main(argv) == 0
    levers = {lv["name"].split(" (")[0]: lv for lv in json.loads(capsys.readouterr().out)["levers"]}
    flag = next(name for name in levers if name.startswith("--n-cpu-moe"))
    experts = int(flag.split()[1])
    assert levers[flag]["conversations"] >= 1
    assert main([*argv, "--n-cpu-moe", str(experts)]) == 0  # no host bandwidth needed to fit
    assert json.loads(capsys.readouterr().out)["conversations"] >= 1
    assert main([*argv, "--n-cpu-moe", str(experts - 1)]) == 0
    assert json.loads(capsys.readouterr().out)["conversations"] == 0  # the fewest that hold


def test_the_floor_names_what_the_host_time_waits_on(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["qwen2.5-32b", "--gpu", "rtx-4090", "--weights", "q4_k_m", "--engine", "llama.cpp",
            "-ngl", "40", "--host-bandwidth-gbs", "76.8", "--json"]
    for batch, bound in (("1", "host memory"), ("32", "the host link")):
        assert main(["decode", *base, "--batch", batch]) == 0
        assert json.loads(capsys.readouterr().out)["points"][0]["bound"] == bound
    assert main(["prefill", *base, "--prompt-len", "16"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bound"] == "host memory" and "not priced" in report["cautions"][0]


def test_the_hosts_share_must_fit_its_ram_where_given(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b with every expert on the host keeps ~58 GiB there: 32 GiB of RAM is not
    enough, 64 is."""
    argv = ["decode", "gpt-oss-120b", "--gpu", "rtx-4090", "--engine", "llama.cpp", "--cpu-moe",
            "--host-bandwidth-gbs", "89.6", "--host-memory-gib"]
    dep = Deployment.build(resolve_model("gpt-oss-120b"), resolve_accelerator("rtx-4090"),
                           engine="llama.cpp-cuda", offload=HostOffload(37, 36, 89.6e9))
    assert 32 * 2**30 < host_weight_bytes(dep) < 64 * 2**30
    assert main([*argv, "32"]) == 2
    assert "does not fit" in capsys.readouterr().err
    assert main([*argv, "64"]) == 0


def test_expert_offload_carries_its_caution(capsys: pytest.CaptureFixture[str]) -> None:
    """The one published --n-cpu-moe run with its host stated decoded about a quarter slower than
    whole-layer streaming predicts: every expectation with host experts says so."""
    from ridgeline.offload import offload_caution

    row = next(r for r in read_measurements(ROOT / "validation" / "offload.csv").rows
               if r.id.startswith("OF-llmfit755"))
    p = predict(row)
    assert p.predicted is not None and p.predicted > row.value  # optimistic, as it says
    assert p.caveat and "optimistic" in p.caveat
    assert not offload_caution(offloaded(20))  # whole layers: the fitted case
    assert main(["decode", "gpt-oss-120b", "--gpu", "rtx-4090", "--engine", "llama.cpp",
                 "--cpu-moe", "--host-bandwidth-gbs", "89.6"]) == 0
    assert "caution: experts on the host" in capsys.readouterr().out


def test_op_offload_copies_a_host_layers_cache_so_decode_never_speeds_up_with_batch() -> None:
    """From the op-offload batch (32 tokens) attention runs on the GPU, and its host layer's
    KV cache crosses the link first: llama-2-7b with 25 of 32 layers on the host had stepped
    from 815 ms at batch 31 to 180 ms at 32, its host cache read at the GPU's bandwidth."""
    dep = offloaded(8, model="llama-2-7b", gpu="h100-sxm", weights="f16")
    floors = [decode_floor(dep, b, 4096).step_time_s for b in (16, 31, 32, 64)]
    assert floors == sorted(floors)
    from ridgeline.offload import link_bytes_per_s

    per_layer_token = kv_footprint(dep.model, 4096, 2).bytes_per_token_growing / 32
    host_kv = 32 * 4096 * 25 * per_layer_token  # batch 32 × context × the 25 host layers
    assert floors[2] >= host_kv / link_bytes_per_s(dep)


def test_a_copy_over_the_link_is_no_faster_than_the_host_memory_it_reads() -> None:
    """A PCIe 5 link outruns dual-channel DDR4: the copy goes at what the host delivers, as
    the CPU's own reads below the op-offload batch do, so the expected step never drops as
    the batch crosses 32 (Llama-2-7B, 25 of 32 layers on the host)."""
    dep = offloaded(8, model="llama-2-7b", gpu="h100-sxm", weights="f16", link=64e9)
    steps = [step_time_s(dep, decode_batch(b, 1000), LLAMA) for b in (16, 31, 32, 64)]
    assert steps == sorted(steps)


def test_the_bundled_host_share_is_the_one_the_sweep_fits() -> None:
    """engines.json's share is what scripts/fit_offload.py fits today: refitting the step-cost
    profiles moves the GPU layers' price, so a stale share would go unnoticed otherwise."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fit_offload",
                                                  ROOT / "scripts" / "fit_offload.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.fitted_share() == pytest.approx(host_bandwidth_share())

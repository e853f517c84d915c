"""llama.cpp's allocation: KV for every n_ctx cell up front, and the compute buffer its
graph allocator reserves, checked against the buffer sizes llama.cpp logs."""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import conversations, held_conversations
from ridgeline.catalog import all_model_ids
from ridgeline.cli import main
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.datafiles import load_data
from ridgeline.engine_platforms import NO_VULKAN_FAMILIES
from ridgeline.errors import InputError
from ridgeline.hardware import catalog
from ridgeline.kvcache import kv_footprint
from ridgeline.llamacpp_memory import cells_that_fit, compute_buffer_bytes, logits_bytes
from ridgeline.llamacpp_pool import llamacpp_outputs
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.model import ModelSpec
from ridgeline.precision import kv_dtype
from ridgeline.reports.fit import fit_report
from ridgeline.units import MIB
from tests.conftest import run_cli


def _spec(name: str, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int,
          ffn: int) -> ModelSpec:
    """A model from the shape a llama.cpp log prints (print_info lines)."""
    return spec_from_hf_config({
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "intermediate_size": ffn,
        "max_position_embeddings": 32768, "torch_dtype": "float16"}, name=name)


# (model, n_ctx, flash attention, logged "CUDA0 compute buffer size" MiB, where), n_ubatch 512
LOGGED = [
    (lambda: resolve_model("qwen2.5-7b"), 2048, True, 304.00, "llama.cpp #9530, Qwen2-7B"),
    (lambda: resolve_model("gpt-oss-20b"), 16384, True, 398.38, "llama.cpp #15297"),
    (lambda: _spec("glm-z1-32b", 151552, 6144, 61, 48, 2, 23040), 32768, True, 353.00,
     "ik_llama.cpp PR #370, mainline build 5274"),
    (lambda: resolve_model("mistral-7b"), 32000, False, 2094.50, "llama.cpp #7450"),
    (lambda: _spec("pythia-2.8b", 50304, 2560, 32, 32, 32, 10240), 2048, False, 162.00,
     "ggml-org/ci V100 run be421fc"),
    (lambda: _spec("gemma-2-2b", 256000, 2304, 26, 8, 4, 9216), 8192, False, 504.50,
     "llama.cpp #9013, 4 slots x 2,048"),
    # two GPUs, layer split: both log 1,080.00 MiB, the output GPU too: the larger of the
    # scores and the logits, not their sum (ik_llama.cpp #514, mainline build 5622)
    (lambda: resolve_model("qwen3-30b-a3b"), 16384, False, 1080.00,
     "ik_llama.cpp #514, 2 GPUs, each"),
]


@pytest.mark.parametrize(("make", "cells", "flash", "logged_mib", "where"), LOGGED,
                         ids=[row[-1] for row in LOGGED])
def test_compute_buffer_is_within_ten_percent_of_the_logged_one(
        make: object, cells: int, flash: bool, logged_mib: float, where: str) -> None:
    model = make()  # type: ignore[operator]
    predicted = compute_buffer_bytes(model, 512, cells, flash) / MIB
    assert predicted == pytest.approx(logged_mib, rel=0.10), where


def test_flash_attention_keeps_the_buffer_at_the_logits_whatever_the_context() -> None:
    model = resolve_model("llama-3.1-8b")
    short, long = (compute_buffer_bytes(model, 512, n, True) for n in (4096, 131072))
    assert short == long and short > logits_bytes(model, 512)
    # without it the scores take over: 131,072 cells x 512 x 32 heads x 4 B = 8 GiB
    assert compute_buffer_bytes(model, 512, 131072, False) > 8 * 1024 * MIB


@pytest.mark.parametrize("flash", [True, False])
def test_the_cells_that_fit_are_the_most_whose_kv_and_buffer_share_the_room(flash: bool) -> None:
    model = resolve_model("llama-3.1-8b")
    cell = kv_footprint(model, 1, 2).bytes_per_token_growing
    free = 20 * 1024 * MIB
    n = cells_that_fit(free, cell, model, 512, flash)

    def used(cells: int) -> float:
        return cells * cell + compute_buffer_bytes(model, 512, cells, flash)

    assert used(n) <= free < used(n + 1)


def _dep(model: str, gpu: str, weights: str) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                            engine="llama.cpp-cuda")


def test_llamacpp_defaults_to_four_slots_an_f16_cache_and_flash_attention() -> None:
    dep = _dep("llama-3.1-8b", "rtx-4090", "q4_k_m")
    pool = kv_pool(dep, EngineSettings(max_model_len=32000))
    assert dep.kv.id == "fp16" and pool.max_num_seqs == 4 and pool.profile_tokens == 512
    assert pool.activation_bytes == compute_buffer_bytes(dep.model, 512, pool.tokens, True, 4)


def test_without_flash_attention_long_contexts_lose_cells_to_the_scores() -> None:
    dep = _dep("llama-3.1-8b", "rtx-4090", "q4_k_m")
    on = fit_report(dep, 32000, EngineSettings())
    off = fit_report(replace(dep, flash_attention=False), 32000, EngineSettings())
    assert off.pool.tokens < on.pool.tokens and off.conversations < on.conversations
    assert any("flash attention" in lv.name and lv.conversations == on.conversations
               for lv in off.levers)


def test_fit_prints_the_llama_server_command_for_what_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
                 "--weights", "q4_k_m", "--max-model-len", "32000", "--parallel", "2"]) == 0
    out = capsys.readouterr().out
    assert "compute buffer (n_ubatch 512" in out
    assert "llama-server -c 64000 -np 2" in out  # 2 slots x 32,000 tokens
    assert "slots (-np " in out and "q8_0 KV cache" in out
    assert "--kv-unified (" in out  # the defaults need no more flags
    # settings that changed the sizing are repeated in the command, so it starts what was sized
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
                 "--weights", "q4_k_m", "--max-model-len", "32000", "--kv-dtype", "bf16",
                 "--flash-attn", "off", "--ubatch-size", "4096"]) == 0
    out = capsys.readouterr().out
    # -ub 4096 past the default -b 2048 runs (and was sized) as 2,048-token ubatches
    assert "--kv-unified -ub 2048 -fa off -ctk bf16 -ctv bf16 (" in out
    assert "compute buffer (n_ubatch 2,048" in out and "-b 4096" not in out


@pytest.mark.parametrize("command", [["fit", "--max-model-len", "32000"],
                                     ["decode", "--batch", "1", "--context", "4096"],
                                     ["prefill", "--prompt-len", "4096"]])
def test_a_quantized_v_cache_without_flash_attention_is_refused_as_llama_cpp_refuses_it(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """llama_init_from_model returns no context for -ctv q8_0 with -fa off ('quantized V cache
    requires flash_attn to be enabled'): no pool, no speed, no launch line that fails."""
    base = [command[0], "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", *command[1:]]
    for kv in ("q8_0", "q4_0"):
        assert main([*base, "--kv-dtype", kv, "--flash-attn", "off"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "requires flash_attn to be enabled" in err
        assert main([*base, "--kv-dtype", kv]) == 0  # -fa auto turns it on
        capsys.readouterr()
    assert main([*base, "--kv-dtype", "f16", "--flash-attn", "off"]) == 0


def test_with_flash_attention_off_the_q8_0_cache_lever_turns_it_on() -> None:
    """The smaller-cache lever of a -fa off fit is a launch that starts: -fa on with it, and
    the cells its smaller compute buffer leaves as well."""
    dep = _dep("llama-3.1-8b", "rtx-4090", "q4_k_m")
    off = fit_report(replace(dep, flash_attention=False), 32000, EngineSettings())
    (lever,) = [lv for lv in off.levers if "q8_0" in lv.name]
    assert "-fa on -ctk q8_0 -ctv q8_0" in lever.name
    on_q8 = fit_report(replace(dep, kv=kv_dtype("q8_0")), 32000, EngineSettings())
    assert lever.conversations == on_q8.conversations > off.conversations


def test_the_fa_on_levers_pool_is_sized_with_the_deployments_flash_attention() -> None:
    """-fa lives in the Deployment alone (EngineSettings carries no copy to disagree with it):
    a -fa off fit's buffer holds the scores, and its '-fa on' lever is the pool of the same
    launch with flash attention on, whose buffer stays at the logits."""
    assert "flash_attn" not in {f.name for f in fields(EngineSettings)}
    dep = _dep("llama-3.1-8b", "rtx-4090", "q4_k_m")
    off = fit_report(replace(dep, flash_attention=False), 32000, EngineSettings())
    assert off.pool.activation_bytes == compute_buffer_bytes(dep.model, 512, off.pool.tokens,
                                                             False, 4)
    on_dep = replace(dep, flash_attention=True)
    on = kv_pool(on_dep, EngineSettings(max_model_len=32000))
    assert on.activation_bytes == compute_buffer_bytes(dep.model, 512, on.tokens, True, 4)
    (lever,) = [lv for lv in off.levers if lv.name == "flash attention (-fa on)"]
    assert lever.conversations == held_conversations(on, on_dep, 32000) > off.conversations


def test_flash_attn_is_refused_for_engines_without_the_switch(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8k",
                 "--flash-attn", "off"]) == 2
    assert "llama.cpp's switch" in capsys.readouterr().err


def test_sliding_window_layers_hold_their_window_per_slot_not_the_context() -> None:
    """Gemma-3-27B, 16 slots (llama.cpp #13703, build b5452): the SWA cache logs 7,488 MiB for
    52 layers × 18,432 cells = 1,024 × 16 + 2,048 (that build padded by n_batch; later ones by
    n_ubatch); the 10 full layers, 3,840 MiB for 49,152 cells."""
    from ridgeline.llamacpp_memory import slot_cache_bytes

    model = resolve_model("gemma-3-27b")
    assert slot_cache_bytes(model, 2, 16, 2048) / MIB == pytest.approx(7488.0)
    assert kv_footprint(model, 1, 2).bytes_per_token_growing * 49152 / MIB == pytest.approx(3840.0)


def test_gemma_cells_count_only_the_full_layers_and_more_slots_cost_window_cache() -> None:
    dep = _dep("gemma-3-27b", "rtx-4090", "q4_k_m")
    four, eight = (kv_pool(dep, EngineSettings(max_model_len=32000, max_num_seqs=n)) for n in (4, 8))
    # four more slots: 52 window layers × 4 × 1,024 cells × 8 KiB
    assert eight.slot_cache_bytes - four.slot_cache_bytes == pytest.approx(52 * 4 * 1024 * 8192)
    assert eight.tokens < four.tokens
    full = kv_footprint(dep.model, 1, 2).bytes_per_token_growing
    assert four.tokens == int((four.pool_bytes - four.slot_cache_bytes) // full)


def test_where_window_caches_for_four_slots_leave_no_room_fewer_slots_are_a_lever(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma-2-9B bf16 at 8,192 tokens on an M1 Pro (21.33 GiB to Metal): llama-server's 4
    slots' window caches (2.71 GiB) leave the pool short of one conversation, while one slot
    holds one, as decode answers it (a slot per sequence); fit names -np 1, and -np 2 where
    4 slots hold only one (an M3 Pro's 36 GiB)."""
    code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "apple-m1-pro-14c",
                           "--max-model-len", "8192", "--json")
    report = json.loads(out)
    assert code == 0 and report["conversations"] == 0
    assert {"name": "1 slot (-np 1)", "conversations": 1, "engine_max_batch": 1,
            "max_model_len": 8192, "max_num_seqs": 1} in report["levers"]
    code, out, _ = run_cli(capsys, "decode", "gemma-2-9b", "--gpu", "apple-m1-pro-14c",
                           "--batch", "1", "--context", "8192", "--json")
    assert code == 0 and json.loads(out)["engine_max_batch"][0]["engine_max_batch"] == 1
    code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "apple-m3-pro-14c",
                           "--max-model-len", "8192", "--json")
    report = json.loads(out)
    assert report["engine_max_batch"] == 1
    assert {"name": "2 slots (-np 2)", "conversations": 2, "engine_max_batch": 2,
            "max_model_len": 8192, "max_num_seqs": 2} in report["levers"]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(sorted(all_model_ids())),
       gpu=st.sampled_from(sorted(a.id for a in catalog().values()
                                  if a.family not in NO_VULKAN_FAMILIES)),
       flash=st.booleans(), slots=st.integers(1, 16), context=st.integers(256, 262144))
def test_what_llamacpp_allocates_never_exceeds_the_device(
        model: str, gpu: str, flash: bool, slots: int, context: int) -> None:
    """Weights, context, compute buffer, slot caches and the -c cells always fit the device's
    memory when any cell fits at all, and the conversations never need more cells than exist."""
    acc = resolve_accelerator(gpu)
    backend = {"nvidia": "cuda", "apple": "metal"}.get(acc.vendor, "vulkan")
    spec, engine = resolve_model(model), f"llama.cpp-{backend}"
    try:
        dep = Deployment.build(spec, acc, engine=engine)
    except InputError as refused:  # an fp8 checkpoint: llama.cpp runs a GGUF made from it
        assert re.search(r"not (a )?GGUF tensor types?", str(refused))
        dep = Deployment.build(spec, acc, "q8_0", engine=engine)
    dep = replace(dep, flash_attention=flash)
    pool = kv_pool(dep, EngineSettings(max_model_len=context, max_num_seqs=slots))
    report = fit_report(dep, context, EngineSettings(max_num_seqs=slots))
    if pool.tokens:
        used = (pool.weight_bytes + pool.non_torch_bytes + pool.activation_bytes
                + pool.slot_cache_bytes + pool.tokens * pool.kv_bytes_per_token)
        assert used <= pool.total_bytes * (1 + 1e-9)
    if pool.kv_bytes_per_token:
        assert report.conversations * context <= pool.tokens


# after PR #23861: logits for the slots only, one layer's peak, the f16 mask
# (model, n_ubatch, n_ctx, outputs, logged compute buffer MiB, where); flash attention on
LOGGED_SINCE_OUTPUT_CAP = [
    (lambda: resolve_model("qwen3-8b"), 2048, 8192, 1, 384.04,
     "HilbertRaum arch sweep, build 9849"),
    (lambda: resolve_model("qwen3-30b-a3b"), 2048, 8192, 1, 368.04,
     "HilbertRaum arch sweep, build 9849, MoE"),
    (lambda: resolve_model("llama-3.1-8b"), 512, 32768, 1, 140.00,
     "Ollama llama-server 2026-06, Hermes-3-Llama-3.1-8B, full offload"),
    (lambda: _spec("qwen3-4b", 151936, 2560, 36, 32, 8, 9728), 512, 8192, 4, 85.01,
     "llama-server 2026-10, 4 slots"),
]


@pytest.mark.parametrize(("make", "n_ubatch", "cells", "outputs", "logged_mib", "where"),
                         LOGGED_SINCE_OUTPUT_CAP, ids=[row[-1] for row in LOGGED_SINCE_OUTPUT_CAP])
def test_since_the_output_cap_the_buffer_is_one_layers_peak_within_ten_percent(
        make: object, n_ubatch: int, cells: int, outputs: int, logged_mib: float,
        where: str) -> None:
    model = make()  # type: ignore[operator]
    predicted = compute_buffer_bytes(model, n_ubatch, cells, True, outputs) / MIB
    assert predicted == pytest.approx(logged_mib, rel=0.10), where
    # the older rule, all n_ubatch tokens' logits, would have been far larger
    assert compute_buffer_bytes(model, n_ubatch, cells, True) / MIB > 1.3 * logged_mib


def test_the_build_decides_which_rule_sizes_the_buffer(capsys: pytest.CaptureFixture[str]) -> None:
    """Newest by default (one logits row per slot); --engine-version b9400 the older rule,
    which leaves fewer cells; a build is refused for vLLM and a version for llama.cpp."""
    dep = _dep("qwen3-8b", "rtx-4090", "q4_k_m")
    new = kv_pool(dep, EngineSettings(max_model_len=8192))
    old = kv_pool(dep, EngineSettings(max_model_len=8192, engine_version="b9400"))
    assert new.activation_bytes == compute_buffer_bytes(dep.model, 512, new.tokens, True, 4)
    assert old.activation_bytes == compute_buffer_bytes(dep.model, 512, old.tokens, True)
    assert old.tokens < new.tokens
    for argv, message in (
            (["--engine", "vllm", "--engine-version", "b9400"], "a llama.cpp build"),
            (["--engine", "llama.cpp-cuda", "--engine-version", "0.11"], "a build, as b9400")):
        assert main(["fit", "qwen3-8b", "--gpu", "rtx-4090", "--max-model-len", "8192",
                     *argv]) == 2
        assert message in capsys.readouterr().err


def test_explain_shows_the_rule_the_build_follows(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", "qwen3-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--max-model-len", "8192", "--explain"]
    assert main(argv) == 0
    newest = capsys.readouterr().out
    assert "FFN products" in newest and "mask" in newest and "before #23861" not in newest
    assert main([*argv, "--engine-version", "b9400"]) == 0
    older = capsys.readouterr().out
    assert "builds before #23861" in older and "build b9400" in older
    assert "FFN products" not in older


def test_a_window_model_holds_no_more_conversations_than_slots_with_their_windows() -> None:
    """Every conversation needs a slot, and every slot its window cache: Gemma-2-9B at 4,096
    tokens (its window) costs 0.66 GiB of full-layer cache and 0.66 GiB of window cache a
    conversation, so an H100 holds 46, not the 88 the full layers alone would allow; -np 46
    runs them all."""
    dep = Deployment.build(resolve_model("gemma-2-9b"), resolve_accelerator("h100"), None, None,
                           1, engine="llama.cpp-cuda")
    four = kv_pool(dep, EngineSettings(max_model_len=4096))
    assert four.tokens // 4096 == 89  # the growing cache alone, beside 4 slots' windows
    assert conversations(four, dep, 4096) == 46
    at_46 = kv_pool(dep, EngineSettings(max_model_len=4096, max_num_seqs=46))
    assert conversations(at_46, dep, 4096) == 46 <= at_46.tokens // 4096


def test_decode_runs_llama_cpp_only_where_its_cache_holds_the_batch() -> None:
    """decode and fit agree: Llama-3.1-70B in bf16 on an H200 leaves 28,838 cells, short of
    one 32,768-token conversation, so decode prints no expected step; at 16K it runs."""
    from ridgeline.engines import profile_for
    from ridgeline.reports.decode import decode_report

    dep = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h200"), None,
                           None, 1, engine="llama.cpp-cuda")
    report = decode_report(dep, [1], [16_384, 32_768], profile_for("llama.cpp-cuda"))
    assert dict(report.pool_batch) == {16_384: 1, 32_768: 0}
    lines = "\n".join(report.text_lines())
    assert "cannot hold one sequence of 32,768 tokens" in lines
    points = report.to_dict()["points"]
    assert isinstance(points, list)
    assert points[0]["expected"] is not None and points[1]["expected"] is None


def test_apple_silicon_is_sized_at_metals_working_set_everywhere() -> None:
    """A Mac's GPU wires at most Metal's working set (3/4 of 64 GiB on an M4 Pro), in decode's
    raw check as in fit: Qwen3-32B's 65 GB of bf16 weights do not fit."""
    mac = resolve_accelerator("apple-m4-pro-20c")
    dep = Deployment.build(resolve_model("qwen3-32b"), mac, None, None, 1,
                           engine="llama.cpp-metal")
    assert dep.memory_bytes == mac.visible_memory_bytes < mac.memory_bytes
    from ridgeline.floors import decode_floor

    assert not decode_floor(dep, 1, 4096).fit.fits


def test_fit_names_a_conversations_slot_cost_and_a_search_past_the_configs_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "fit", "gemma-2-9b", "--gpu", "h100", "--engine",
                           "llama.cpp-cuda", "--max-model-len", "4096")
    assert code == 0 and "plus 0.656 GiB for its slot's window and state cache" in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--target-concurrency",
                           "1")
    assert "(the model's limit)" in out.splitlines()[0]


def test_a_search_past_a_config_without_a_context_length_says_where_it_stopped(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import json

    from tests.conftest import ROOT, run_cli

    config = json.loads((ROOT / "src/ridgeline/data/models/meta-llama--Llama-3.2-1B.json")
                        .read_text("utf-8"))
    config.pop("max_position_embeddings")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, _ = run_cli(capsys, "fit", str(path), "--gpu", "h200", "--target-concurrency",
                           "1")
    assert code == 0
    assert "1,048,576 tokens (as far as the search goes: the config states no context length)" \
        in out.splitlines()[0]


def test_decode_and_fit_count_a_slot_at_what_one_more_slot_adds() -> None:
    """A slot costs its window (or its context, if shorter) and its state; the n_ubatch cells
    every window layer keeps once are not a slot's. Gemma-3-4B on two L40S at 8,000 tokens:
    decode had charged each sequence those cells too and held 226 against fit's 261 (then of
    an even split, one mask a GPU; the first GPU holds layers 0-17, 3 of the 5 global layers,
    and binds; 203 with the pipelined split's four copies of the mask). Decode's slot a
    sequence is fit's -np lever (capacity.llamacpp_slots): 220 slots, each with its logits
    row, hold 220, a little under the 224 that -np 4's pool would hold."""
    from ridgeline.capacity import engine_holds
    from ridgeline.reports.fit import fit_report

    dep = Deployment.build(resolve_model("gemma-3-4b"), resolve_accelerator("l40s"), None,
                           None, 2, engine="llama.cpp-cuda")
    held = engine_holds(dep, 8000)
    report = fit_report(dep, 8000, EngineSettings(), fit_host=None)  # -ngl all, as decode's
    lever = next(lv for lv in report.levers if "-np" in lv.name)
    assert held is not None and held >= 200 and lever.conversations == held
    assert lever.name.startswith(f"{held} slots (-np {held} ")
    assert 0 < report.conversations - held <= 0.02 * report.conversations


def test_a_ubatch_past_the_batch_is_clamped_to_it_as_llama_cpp_does() -> None:
    """llama_context takes n_ubatch = min(n_batch, n_ubatch): -ub 100000 with the default
    -b 2048 runs 2,048-token ubatches, and the compute buffer is sized for them."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.memory import EngineSettings, kv_pool

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                           engine="llama.cpp-cuda")
    huge = kv_pool(dep, EngineSettings(max_model_len=4096, max_num_batched_tokens=100_000))
    batch = kv_pool(dep, EngineSettings(max_model_len=4096, max_num_batched_tokens=2048))
    assert huge.profile_tokens == batch.profile_tokens == 2048
    assert huge.activation_bytes == batch.activation_bytes


def test_prefill_clamps_a_ubatch_past_the_batch_as_fit_and_simulate_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    """prefill -ub 4096 with the default -b 2048: llama.cpp runs 2,048-token ubatches, as fit
    sizes its compute buffer and simulate runs them; it had priced 4,096-token ones."""
    argv = ["prefill", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
            "--weights", "q4_k_m", "--prompt-len", "8192", "--json"]
    assert main([*argv, "-ub", "4096"]) == 0
    past = json.loads(capsys.readouterr().out)
    assert main([*argv, "-ub", "2048"]) == 0
    assert past == json.loads(capsys.readouterr().out)
    assert main([*argv[:-1], "-ub", "4096"]) == 0
    assert "ubatches of at most 2,048 tokens" in capsys.readouterr().out


def test_recurrent_state_is_f32_in_llama_cpp() -> None:
    """llama.cpp creates its recurrent memory with GGML_TYPE_F32 for both states, whatever
    the model's dtype: Nemotron-H-56B's Mamba-2 layers hold (conv + SSM) elements × 4 B a
    slot, twice what the bf16 reading had charged."""
    from ridgeline.catalog import resolve_model
    from ridgeline.kvcache import state_bytes_per_sequence
    from ridgeline.layouts import MAMBA
    from ridgeline.llamacpp_memory import slot_cache_bytes

    model = resolve_model("nemotron-h-56b")
    m = model.mamba
    assert m is not None and m.version == 2
    elements = (m.d_inner + 2 * m.n_groups * m.d_state) * (m.conv_kernel - 1) \
        + m.num_heads * m.head_dim * m.d_state
    layers = sum(1 for layer in model.layers if layer.mixer == MAMBA)
    assert slot_cache_bytes(model, 2.0, 1, 512) == elements * 4 * layers
    assert state_bytes_per_sequence(model, next(
        layer for layer in model.layers if layer.mixer == MAMBA)) < elements * 4


def test_a_q5_1_cache_holds_more_conversations_than_q8_0_and_fewer_than_q4_0() -> None:
    """24 bytes per 32 elements sits between q8_0's 34 and q4_0's 18; iq4_nl's 18 holds what
    q4_0 holds."""
    spec, card = resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090")

    def held(kv: str) -> int:
        dep = Deployment.build(spec, card, "q4_k_m", kv, engine="llama.cpp-vulkan")
        return fit_report(dep, 32000, EngineSettings()).conversations

    assert held("q8_0") < held("q5_1") < held("q5_0") < held("q4_1") < held("q4_0") \
        == held("iq4_nl")


def test_another_engine_refuses_a_q5_1_cache_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                 "--max-model-len", "8k", "--kv-dtype", "q5_1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vllm has no q5_1 KV cache" in err


@pytest.mark.parametrize("kv", ["q4_1", "q5_0", "q5_1", "iq4_nl"])
def test_a_new_quantized_v_cache_without_flash_attention_is_refused(
        capsys: pytest.CaptureFixture[str], kv: str) -> None:
    """llama.cpp checks ggml_is_quantized(type_v), so -ctv q5_1 with -fa off stops as q8_0
    does; Vulkan's flash attention reads all four, so -fa auto starts."""
    base = ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-vulkan",
            "--weights", "q4_k_m", "--max-model-len", "32000", "--kv-dtype", kv]
    assert main([*base, "--flash-attn", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "requires flash_attn to be enabled" in err
    assert main(base) == 0
    assert f"-ctk {kv} -ctv {kv}" in capsys.readouterr().out


# The quantized -ctk/-ctv types each backend's FLASH_ATTN_EXT takes in the newest build, read
# upstream (ggml-org/llama.cpp): ggml-cuda/fattn.cu ggml_cuda_fattn_kv_type_supported (00a2d60)
# takes q4_1, q5_0 and q5_1 only when built with GGML_CUDA_FA_ALL_QUANTS (off by default) and
# iq4_nl never, and HIP builds that file for ROCm; ggml-metal.metal instantiates
# kernel_flash_attn_ext_{q4_0,q4_1,q5_0,q5_1,q8_0}_* and no iq4_nl; ggml-vulkan.cpp's fa_kv_ok
# (000651c) lists the five and takes IQ4_NL again from b10165 (PR #24585, 2026-07-28).
FLASH_ATTENTION_QUANTS = {
    "llama.cpp-cuda": ("rtx-4090", {"q8_0", "q4_0"}),
    "llama.cpp-rocm": ("mi300x", {"q8_0", "q4_0"}),
    "llama.cpp-metal": ("apple-m2-ultra-76c", {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}),
    "llama.cpp-vulkan": ("rtx-4090", {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}),
}


@pytest.mark.parametrize("engine", FLASH_ATTENTION_QUANTS)
def test_each_backend_takes_the_quantized_caches_its_flash_attention_reads(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """A quantized V cache needs flash attention; where the backend's supports_op refuses the
    type, -fa auto turns it off and llama.cpp stops at start-up, so fit refuses in one line.
    Every quantized type formats.json gives llama.cpp is checked; f16 starts everywhere."""
    gpu, reads = FLASH_ATTENTION_QUANTS[engine]
    quantized = [row["id"] for row in load_data("formats.json")["kv"]
                 if row.get("engines") == ["llama.cpp"]]
    assert reads <= set(quantized)
    base = ["fit", "llama-3.1-8b", "--gpu", gpu, "--engine", engine, "--weights", "q4_k_m",
            "--max-model-len", "32000", "--kv-dtype"]
    assert main([*base, "f16"]) == 0  # llama.cpp's default cache, which needs no flash attention
    capsys.readouterr()
    for kv in quantized:
        code = main([*base, kv])
        out, err = capsys.readouterr()
        if kv in reads:
            assert code == 0 and f"-ctk {kv} -ctv {kv}" in out, (engine, kv, err)
        else:
            assert code == 2 and err.count("\n") == 1, (engine, kv, err)
            assert f"{engine} has no flash-attention kernel for {kv} caches" in err


def test_vulkan_builds_without_the_iq4_nl_kernel_refuse_its_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    """formats.json's iq4_nl row names the Vulkan builds whose fa_kv_ok leaves IQ4_NL out
    (flash_attention_missing_builds): --engine-version inside the span stops at start-up as
    CUDA does (-fa auto off, quantized V cache), in one line naming the build that puts it
    back; the builds on either side, and the newest by default, start; q8_0 starts inside."""
    row = next(r for r in load_data("formats.json")["kv"] if r["id"] == "iq4_nl")
    first, last = row["flash_attention_missing_builds"]["llama.cpp-vulkan"]
    base = ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-vulkan",
            "--weights", "q4_k_m", "--max-model-len", "32000"]
    for build in (first, (first + last) // 2, last):
        for fa in ([], ["--flash-attn", "on"]):
            assert main([*base, "--kv-dtype", "iq4_nl", "--engine-version", f"b{build}",
                         *fa]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"b{last + 1} puts it back" in err, err
        assert main([*base, "--kv-dtype", "q8_0", "--engine-version", f"b{build}"]) == 0
        capsys.readouterr()
    for version in ([], ["--engine-version", f"b{first - 1}"],
                    ["--engine-version", f"b{last + 1}"]):
        assert main([*base, "--kv-dtype", "iq4_nl", *version]) == 0
        assert "-ctk iq4_nl -ctv iq4_nl" in capsys.readouterr().out
    # the span is Vulkan's: CUDA's flash attention reads no iq4_nl cache in any build
    cache = kv_dtype("iq4_nl")
    assert not cache.read_by_flash_attention_of("llama.cpp-cuda", first - 1)
    assert cache.read_by_flash_attention_of("llama.cpp-vulkan", first - 1)
    assert not cache.read_by_flash_attention_of("llama.cpp-vulkan", last)


def test_one_logits_row_a_slot_from_the_build_that_merged_pr_23861() -> None:
    """engines.json llama.cpp.outputs_per_slot_since_build is b9460, the release of PR
    #23861's commit: from it the server reserves one logits row per slot, before it every
    ubatch token's (None)."""
    since = int(load_data("engines.json")["llama.cpp"]["outputs_per_slot_since_build"])
    assert llamacpp_outputs(4, f"b{since}") == 4
    assert llamacpp_outputs(4, f"b{since - 1}") is None
    assert llamacpp_outputs(4, None) == 4  # the newest build, by default

"""llama.cpp's layer split runs one -c on every GPU: the GPU whose cache-growing layers allow
the fewest cells binds, and every GPU's compute buffer is sized at that count. Each GPU whose
layers read the -c mask holds four copies of it when the split is pipelined (ggml's
GGML_SCHED_MAX_COPIES); a GPU holding none of those layers holds none."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.gguf_blocks import gguf_block_count
from ridgeline.llamacpp_memory import (
    compute_buffer_bytes,
    incoming_hidden_bytes,
    window_cache_cells,
    window_mask_bytes,
)
from ridgeline.llamacpp_pool import llamacpp_outputs, window_mask_cells
from ridgeline.llamacpp_split import (
    SCHED_MAX_COPIES,
    pipelines,
    split_devices,
    split_input_copies,
)
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.offload import HostOffload
from ridgeline.reports.fit import fit_report
from ridgeline.units import GIB, MIB
from tests.conftest import run_cli


def split(model: str, gpu: str, gpus: int, weights: str | None = None,
          offload: HostOffload | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, gpus,
                            engine="llama.cpp-cuda", offload=offload)


def held(model: str, gpus: int, context: int = 8000) -> int:
    return fit_report(split(model, "h100", gpus), context, EngineSettings()).conversations


def test_a_gpu_without_a_full_attention_layer_no_longer_sizes_minus_c() -> None:
    """Gemma-3-4B on 8 H100s: GPUs 8 of 8 holds layers 31-33 and none of the five global ones.
    Sized alone, only its mask grew with -c: 80 M cells, a 76.95 GiB compute buffer and 0
    conversations where 4 GPUs held 775. At the cells the global layers' GPUs allow it keeps
    a buffer of about 110 MiB: one layer's FFN products and the four copies of the hidden
    state it receives and of the window cache's mask."""
    dep = split("gemma-3-4b", "h100", 8)
    settings = EngineSettings(max_model_len=8000)
    pools = stage_pools(dep, settings)
    bare = [p for p in pools if p.split_device is not None and not p.split_device.growing_share]
    assert bare and all(p.split_device.mask_copies == 0 for p in bare)  # type: ignore[union-attr]
    assert max(p.activation_bytes for p in bare) < 0.2 * GIB
    binding = kv_pool(dep, settings)
    assert binding.split_device is not None and binding.split_device.growing_share > 0
    assert held("gemma-3-4b", 8) >= held("gemma-3-4b", 4) > 0


@pytest.mark.parametrize(("model", "counts"), [("gemma-3-4b", (1, 2, 4, 8)),
                                               ("jamba-1.5-mini", (2, 4, 5, 8))])
def test_more_gpus_of_the_split_never_hold_fewer_conversations(
        model: str, counts: tuple[int, ...]) -> None:
    """Each GPU holds fewer layers as GPUs are added; Jamba on 5 or more GPUs has GPUs with
    Mamba layers only, which had failed the fit outright (8 GPUs: a 66.86 GiB buffer)."""
    conversations = [held(model, n) for n in counts]
    assert conversations == sorted(conversations) and conversations[0] > 0


def test_every_gpu_is_sized_at_the_binding_gpus_cells() -> None:
    """One -c for all: each GPU's compute buffer is the one at the binding GPU's cells, and the
    binding GPU could not hold one cell more."""
    dep = split("jamba-1.5-mini", "h100", 8)
    settings = EngineSettings(max_model_len=8000)
    pools = stage_pools(dep, settings)
    cells = {p.context_cells for p in pools}
    assert len(cells) == 1
    n = cells.pop()
    outputs = llamacpp_outputs(pools[0].max_num_seqs, None)
    for p in pools:
        d = p.split_device
        assert d is not None
        assert p.activation_bytes == compute_buffer_bytes(
            dep.model, p.profile_tokens, n, True, outputs, d.output, d.mask_copies,
            input_copies=d.input_copies)
    b = kv_pool(dep, settings)
    assert b.tokens >= n
    d = b.split_device
    assert d is not None
    one_more = compute_buffer_bytes(dep.model, b.profile_tokens, n + 1, True, outputs, d.output,
                                    d.mask_copies, input_copies=d.input_copies)
    assert (b.weight_bytes + b.non_torch_bytes + one_more + b.slot_cache_bytes
            + (n + 1) * b.kv_bytes_per_token) > b.total_bytes


def test_a_pipelined_split_keeps_four_copies_of_the_mask_on_each_gpu_reading_it() -> None:
    """unsloth PR #7637 measured it: Kimi-K3 at 1,048,576 cells on 4 GPUs, 4.0 GiB of compute
    buffer a GPU for the mask (n_ubatch 512, f16): four copies of 1 GiB."""
    model = resolve_model("llama-3.1-70b")
    mask = (compute_buffer_bytes(model, 512, 1 << 20, True, 4, False, SCHED_MAX_COPIES)
            - compute_buffer_bytes(model, 512, 1 << 20, True, 4, False, 0))
    assert mask == pytest.approx(4.0 * GIB)
    assert split_input_copies(split("llama-3.1-70b", "rtx-3090", 2, "q4_k_m")) == 4
    assert split_input_copies(split("llama-3.1-70b", "rtx-3090", 1, "q4_k_m")) == 1
    # Jamba over 8 GPUs: the four with an attention layer hold the copies, the others none
    devices = split_devices(split("jamba-1.5-mini", "h100", 8))
    assert {d.mask_copies for d in devices if d.growing_share} == {4}
    assert {d.mask_copies for d in devices if not d.growing_share} == {0}


def test_a_split_with_weights_on_the_host_is_not_pipelined() -> None:
    """llama.cpp pipelines only with -ngl past the layer count and no tensor override:
    -ngl 60 or --cpu-moe leaves one copy of each input (and of the mask) a GPU."""
    host = HostOffload(60, 0, 60e9)
    assert split_input_copies(split("llama-3.1-70b", "rtx-3090", 2, "q4_k_m", host)) == 1
    experts = HostOffload(49, 48, 60e9)  # every layer on the GPUs, every expert on the host
    dep = split("qwen3-30b-a3b", "rtx-3090", 2, "q4_k_m", experts)
    assert split_input_copies(dep) == 1
    assert {d.mask_copies for d in split_devices(dep)} == {1}
    everything = HostOffload(99, 0, 60e9)
    assert split_input_copies(split("llama-3.1-70b", "rtx-3090", 2, "q4_k_m", everything)) == 4


def test_a_pipelined_split_keeps_four_copies_of_the_hidden_state_each_gpu_receives() -> None:
    """Llama-3.1-70B on two H100s: each GPU keeps 4 × 512 × 8,192 × 4 B = 64 MiB of the
    activations crossing into it (the host's embeddings, the first GPU's last layer), on top
    of the rest of its buffer; -ngl 60 does not pipeline, and its one copy is freed once
    read."""
    dep = split("llama-3.1-70b", "h100", 2)
    model = dep.model
    assert incoming_hidden_bytes(model, 512, SCHED_MAX_COPIES) == \
        SCHED_MAX_COPIES * 512 * model.hidden_size * 4 == 64 * MIB
    assert incoming_hidden_bytes(model, 512, 1) == 0
    settings = EngineSettings(max_model_len=32000)
    outputs = llamacpp_outputs(4, None)
    for p in stage_pools(dep, settings):
        d = p.split_device
        assert d is not None and d.input_copies == SCHED_MAX_COPIES
        rest = compute_buffer_bytes(model, 512, p.context_cells, True, outputs, d.output,
                                    d.mask_copies)
        assert p.activation_bytes - rest == 64 * MIB
    partial = split("llama-3.1-70b", "h100", 2, None, HostOffload(60, 0, 60e9))
    assert {d.input_copies for d in split_devices(partial)} == {1}
    # builds before PR #23861 pipelined too (PR #6017): the same copies beside their logits
    older = (compute_buffer_bytes(model, 512, 8192, True, None, input_copies=SCHED_MAX_COPIES)
             - compute_buffer_bytes(model, 512, 8192, True, None))
    assert older == 64 * MIB


def test_each_gpu_holding_a_window_layer_keeps_four_copies_of_the_window_mask() -> None:
    """gpt-oss-120b on two H100s alternates window and full layers, so both GPUs read the
    window cache's mask beside the -c one: 4 copies × (128 × 4 slots + 512 cells) × 512 × 2 B
    = 4 MiB a GPU. Gemma-3's 1,024-token window at 4 slots: 4 × 4,608 × 512 × 2 B = 18 MiB.
    A model without windows reads none."""
    assert window_cache_cells(128, 4, 512) == 1024
    assert window_mask_bytes(512, True, window_cache_cells(1024, 4, 512), 4) == 18 * MIB
    assert window_mask_bytes(512, False, 1024, 1) == 2 * MIB  # f32 without flash attention
    dep = split("gpt-oss-120b", "h100", 2)
    devices = split_devices(dep)
    assert all(d.window_mask for d in devices)
    cells = window_mask_cells(dep, devices[0], 4, 512, 32000)
    assert cells == 1024
    pools = stage_pools(dep, EngineSettings(max_model_len=32000))
    outputs = llamacpp_outputs(pools[0].max_num_seqs, None)
    for p in pools:
        d = p.split_device
        assert d is not None
        without = compute_buffer_bytes(dep.model, 512, p.context_cells, True, outputs, d.output,
                                       d.mask_copies, input_copies=d.input_copies)
        assert p.activation_bytes - without == window_mask_bytes(512, True, cells, 4) == 4 * MIB
    plain = split("llama-3.1-70b", "h100", 2)
    assert window_mask_cells(plain, split_devices(plain)[0], 4, 512, 32000) == 0


def test_the_mtp_blocks_of_the_gguf_count_among_the_layers_ngl_must_pass_to_pipeline() -> None:
    """llama.cpp pipelines when -ngl exceeds n_layer_all, the GGUF's block count: GLM-4.5's
    converter keeps its nextn layer (92 + 1 = 93 blocks), so -ngl 93 holds every layer and the
    output yet does not pipeline, and -ngl 94 does; DeepSeek-V3's drops its MTP layer."""
    glm = resolve_model("glm-4.5")
    assert gguf_block_count(glm) == glm.num_layers + glm.mtp_layers == 93
    deepseek = resolve_model("deepseek-v3")
    assert deepseek.mtp_layers == 1 and gguf_block_count(deepseek) == deepseek.num_layers
    assert gguf_block_count(resolve_model("qwen3.5-35b-a3b")) == 41
    assert gguf_block_count(resolve_model("llama-3.1-70b")) == 80

    def placed(ngl: int | None) -> Deployment:
        return split("glm-4.5", "h100", 8, "q4_k_m",
                     None if ngl is None else HostOffload(ngl, 0, 60e9))

    assert pipelines(placed(None)) and split_input_copies(placed(None)) == SCHED_MAX_COPIES
    assert not pipelines(placed(93)) and split_input_copies(placed(93)) == 1
    assert pipelines(placed(94))
    assert {d.input_copies for d in split_devices(placed(93))} == {1}


def _gib(text: str, name: str) -> float:
    match = re.search(rf"^\s+(?:=> )?{re.escape(name)} = ([\d.,]+) GiB", text, re.MULTILINE)
    assert match, name
    return float(match.group(1).replace(",", ""))


@pytest.mark.parametrize("gpus", ["8", "2"])
def test_fit_explain_adds_up_on_the_binding_gpu(capsys: pytest.CaptureFixture[str],
                                               gpus: str) -> None:
    """--explain had printed a 76.95 GiB buffer whose parts summed to 0.07 GiB."""
    code, out, _ = run_cli(capsys, "fit", "gemma-3-4b", "--gpu", "h100", "--num-gpus", gpus,
                           "--max-model-len", "8k", "--engine", "llama.cpp-cuda", "--explain")
    assert code == 0 and "DOES NOT FIT" not in out
    parts = _gib(out, "slots' logits and hidden") + max(
        _gib(out, "FFN products"), _gib(out, "scores")) + _gib(out, "mask")
    assert parts == pytest.approx(_gib(out, "compute buffer"), abs=0.01)
    assert "4 copies ×" in out  # the pipelined split's mask
    kv = _gib(out, "total") - _gib(out, "weights per GPU") - _gib(out, "runtime context") \
        - _gib(out, "compute buffer") - _gib(out, "left free by --fit")
    assert kv == pytest.approx(_gib(out, "KV cache"), abs=0.01)


def test_decode_and_simulate_run_what_fit_holds(capsys: pytest.CaptureFixture[str]) -> None:
    """Both had inherited the refusal: 'would refuse to start', 'leaves no KV pool'."""
    base = ("gemma-3-4b", "--gpu", "h100", "--num-gpus", "8", "--engine", "llama.cpp-cuda")
    code, out, _ = run_cli(capsys, "decode", *base, "--batch", "1,4", "--context", "8000")
    assert code == 0 and "refuse" not in out
    code, out, err = run_cli(capsys, "simulate", *base, "--max-model-len", "8k",
                             "--concurrency", "4", "--num-requests", "20")
    assert code == 0, err


@pytest.mark.parametrize("kv", ["fp16", "q8_0"])
def test_a_hybrids_conversations_are_what_that_many_slots_run(
        capsys: pytest.CaptureFixture[str], kv: str) -> None:
    """A cell given up frees its KV and its row of the mask, 4 copies × n_ubatch × 2 B on a
    pipelined split, more than Qwen3-Next's KV cell: leaving the mask out had read q8_0 as
    holding fewer conversations than fp16 (27 < 36). The count the default 4 slots report is
    the most slots a run keeps whole: -np that many runs with every weight on the GPUs, and
    one more slot shares the cells beside its recurrent state (-c the conversations that
    still fit: at fp16 26, one fewer, since the GGUF's F32 router took the margin) rather
    than make --fit move weights for it (cli_offload.launch_fitted)."""
    base = ("fit", "qwen3-next-80b-a3b", "--gpu", "rtx-4090", "--num-gpus", "8", "--engine",
            "llama.cpp", "--max-model-len", "2048", "--json")

    def run(*flags: str) -> dict:
        code, out, err = run_cli(capsys, *base, "--kv-dtype", kv, *flags)
        assert code == 0, err
        return dict(json.loads(out))

    held = run()["conversations"]
    assert run("-np", str(held))["offload"] is None
    more = run("-np", str(held + 1))
    assert more["offload"] is None and more["conversations"] <= held
    assert more["llama_server_c"] == more["conversations"] * 2048 <= more["tokens"]
    if kv == "q8_0":
        assert held >= run_fp16(capsys, base)


def run_fp16(capsys: pytest.CaptureFixture[str], base: tuple[str, ...]) -> int:
    code, out, err = run_cli(capsys, *base, "--kv-dtype", "fp16")
    assert code == 0, err
    return int(json.loads(out)["conversations"])

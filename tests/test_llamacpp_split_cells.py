"""llama.cpp's layer split runs one -c on every GPU: the GPU whose cache-growing layers allow
the fewest cells binds, and every GPU's compute buffer is sized at that count. Each GPU whose
layers read the -c mask holds four copies of it when the split is pipelined (ggml's
GGML_SCHED_MAX_COPIES); a GPU holding none of those layers holds none."""

from __future__ import annotations

import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.llamacpp_memory import (
    SCHED_MAX_COPIES,
    compute_buffer_bytes,
    split_devices,
    split_input_copies,
)
from ridgeline.llamacpp_pool import llamacpp_outputs
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.offload import HostOffload
from ridgeline.reports.fit import fit_report
from ridgeline.units import GIB
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
    a buffer of a few tens of MiB."""
    dep = split("gemma-3-4b", "h100", 8)
    settings = EngineSettings(max_model_len=8000)
    pools = stage_pools(dep, settings)
    bare = [p for p in pools if p.split_device is not None and not p.split_device.growing_share]
    assert bare and all(p.split_device.mask_copies == 0 for p in bare)  # type: ignore[union-attr]
    assert max(p.activation_bytes for p in bare) < 0.1 * GIB
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
            dep.model, p.profile_tokens, n, True, outputs, d.output, d.mask_copies)
    b = kv_pool(dep, settings)
    assert b.tokens >= n
    d = b.split_device
    assert d is not None
    one_more = compute_buffer_bytes(dep.model, b.profile_tokens, n + 1, True, outputs, d.output,
                                    d.mask_copies)
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
        - _gib(out, "compute buffer")
    assert kv == pytest.approx(_gib(out, "KV cache"), abs=0.01)


def test_decode_and_simulate_run_what_fit_holds(capsys: pytest.CaptureFixture[str]) -> None:
    """Both had inherited the refusal: 'would refuse to start', 'leaves no KV pool'."""
    base = ("gemma-3-4b", "--gpu", "h100", "--num-gpus", "8", "--engine", "llama.cpp-cuda")
    code, out, _ = run_cli(capsys, "decode", *base, "--batch", "1,4", "--context", "8000")
    assert code == 0 and "refuse" not in out
    code, out, err = run_cli(capsys, "simulate", *base, "--max-model-len", "8k",
                             "--concurrency", "4", "--num-requests", "20")
    assert code == 0, err

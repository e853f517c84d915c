"""Pipeline stages: vLLM's layer split, each stage's weights, and the stage whose pool binds."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import conversations
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.quantization import EMBEDDING, LM_HEAD
from ridgeline.stages import pipeline_stages, stage_layers, stage_weight_bytes
from tests.conftest import run_cli

LONG = EngineSettings(max_model_len=32768)


def dep(model: str, tp: int, pp: int, engine: str = "vllm", gpu: str = "h100") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, tp * pp,
                            pp, engine=engine)


@pytest.mark.parametrize(("layers", "stages", "split"), [
    (80, 2, (40, 40)),
    (61, 2, (31, 30)),            # DeepSeek-R1: the one left over goes before the last stage
    (126, 4, (31, 32, 32, 31)),   # Llama-3.1-405B: the middle stages, first and last spared
    (7, 4, (2, 2, 2, 1)),         # a remainder of pp − 1 reaches the first stage too
])
def test_layers_split_as_vllm_splits_them(layers: int, stages: int,
                                          split: tuple[int, ...]) -> None:
    assert stage_layers(layers, stages) == split
    assert sum(split) == layers


@pytest.mark.parametrize(("layers", "stages", "split"), [
    (61, 2, (31, 30)),
    (126, 4, (32, 32, 31, 31)),  # Llama-3.1-405B: the first two stages take the extra layers
    (7, 4, (2, 2, 2, 1)),
])
def test_tensorrt_llm_gives_the_remainder_to_the_first_stages(
        layers: int, stages: int, split: tuple[int, ...]) -> None:
    assert stage_layers(layers, stages, "trtllm") == split


def test_a_tensorrt_llm_pipeline_binds_on_its_first_stage() -> None:
    """405B over TRT-LLM's PP4: the first stage holds 32 layers and the embedding, where
    vLLM's first holds 31: its pool, per block of its own layers, is smaller."""
    trt, vllm = dep("llama-3.1-405b", 8, 4, "trtllm"), dep("llama-3.1-405b", 8, 4)
    assert [s.layers for s in pipeline_stages(trt)] == [32, 32, 31, 31]
    assert [s.layers for s in pipeline_stages(vllm)] == [31, 32, 32, 31]
    first_trt, first_vllm = pipeline_stages(trt)[0], pipeline_stages(vllm)[0]
    assert stage_weight_bytes(trt, first_trt, 0.0) > stage_weight_bytes(vllm, first_vllm, 0.0)


def test_stage_weights_sum_to_the_model_and_the_embedding_sits_first() -> None:
    d = dep("llama-3.1-405b", 8, 2)
    by = d.bytes_by_category
    first, last = (stage_weight_bytes(d, s, 0.0) for s in pipeline_stages(d))
    assert (first + last) * 8 == pytest.approx(d.weight_bytes)  # untied: nothing held twice
    layers = d.weight_bytes - by[EMBEDDING] - by[LM_HEAD]
    assert first * 8 == pytest.approx(layers / 2 + by[EMBEDDING])
    assert last * 8 == pytest.approx(layers / 2 + by[LM_HEAD])
    tied = dep("llama-3.2-1b", 1, 2)  # a tied embedding: the last stage keeps its own copy
    assert tied.model.tie_word_embeddings
    held = sum(stage_weight_bytes(tied, s, 0.0) for s in pipeline_stages(tied))
    assert held == pytest.approx(tied.weight_bytes + tied.bytes_by_category[EMBEDDING])


def test_the_pool_is_the_stage_with_fewest_blocks() -> None:
    """DeepSeek-R1's 61 layers split 31 + 30: the first stage holds one layer more, but three
    of its layers are the dense ones, lighter than a MoE layer, so the second stage's 30 MoE
    layers and its lm_head weigh more, and its pool, with the sampler's peak beside it, holds
    fewer blocks."""
    d = dep("deepseek-r1", 8, 2)
    pools = stage_pools(d, LONG)
    assert [p.stage.layers for p in pools if p.stage] == [31, 30]
    assert pools[1].weight_bytes > pools[0].weight_bytes
    pool = kv_pool(d, LONG)
    assert pool.blocks == min(p.blocks for p in pools) < max(p.blocks for p in pools)
    assert pool.stage is not None and pool.stage.last
    assert pools[-1].sampler_bytes > 0 and pools[0].sampler_bytes == 0  # the last one samples
    # a block of the 31-layer stage holds 31 layers' KV, the other's 30
    assert pools[0].page_bytes / pools[1].page_bytes == pytest.approx(31 / 30)


def test_pipeline_beats_tensor_parallel_past_the_node_for_llama_405b() -> None:
    """16 H100s: TP16 replicates Llama-3.1-405B's 8 KV heads (each rank keeps one), where
    TP8 × PP2 splits them, and TP16 also holds more of the sampler and activations per GPU."""
    model = resolve_model("llama-3.1-405b")
    tp16 = Deployment.build(model, resolve_accelerator("h100"), None, None, 16)
    pp2 = dep("llama-3.1-405b", 8, 2)
    held_tp16 = conversations(kv_pool(tp16, LONG), tp16, 32768)
    held_pp2 = conversations(kv_pool(pp2, LONG), pp2, 32768)
    assert held_pp2 > 2 * held_tp16 > 0


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_other_engines_size_each_stage_too(engine: str) -> None:
    d = dep("llama-3.1-405b", 8, 2, engine)
    pool = kv_pool(d, LONG)
    assert pool.stage is not None
    assert pool.weight_bytes == max(p.weight_bytes for p in stage_pools(d, LONG))
    assert conversations(pool, d, 32768) > 0


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(InputError, match="more stages than layers"):
        dep("llama-3.2-1b", 1, 32)


def test_fit_with_pipeline_stages(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "deepseek-r1", "--gpu", "h100", "--num-gpus", "8",
                           "--pipeline-parallel-size", "2", "--max-model-len", "32768")
    assert code == 0
    assert "16 x h100-sxm (TP8 × PP2)" in out
    assert "layers per stage 31, 30" in out and "stage 2 of 2 (30 layers and the lm_head)" in out
    code, out, _ = run_cli(capsys, "fit", "deepseek-r1", "--gpu", "h100", "--num-gpus", "8",
                           "-pp", "2", "--max-model-len", "32768", "--json")
    report = json.loads(out)
    assert (report["num_gpus"], report["tensor_parallel_size"],
            report["pipeline_parallel_size"]) == (16, 8, 2)
    assert report["binding_stage"]["layers"] == 30
    code, out, _ = run_cli(capsys, "fit", "deepseek-r1", "--gpu", "h100", "--num-gpus", "8",
                           "-pp", "2", "--max-model-len", "32768", "--explain")
    assert "binding pipeline stage" in out and "blocks by stage" in out
    # Gemma-3's first stage holds the embedding and the vision tower and runs the tower's
    # profile; with 8 seats the last stage's sampler is small, so the first binds
    code, out, _ = run_cli(capsys, "fit", "gemma-3-27b", "--gpu", "h100", "-pp", "2",
                           "--max-model-len", "32768", "--max-num-seqs", "8", "--explain")
    assert code == 0 and "binds = stage 1 of 2 (31 layers and the embedding)" in out
    assert "none: only the last pipeline stage samples" in out


def test_fit_lever_past_a_node_adds_pipeline_stages(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-405b", "--gpu", "h100", "--num-gpus", "8",
                           "--max-model-len", "32768", "--json")
    assert code == 0
    names = [lever["name"] for lever in json.loads(out)["levers"]]
    assert "16 GPUs (TP8 × PP2)" in names
    assert not any("tensor parallel" in name for name in names)  # TP16 would leave the node


def test_pipeline_flag_is_refused_where_it_does_not_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-pp", "2",
                           "--engine", "llama.cpp", "--max-model-len", "8192")
    assert code == 2 and "splits the layers over --num-gpus" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-405b", "--gpu", "h100", "--num-gpus",
                           "8", "-pp", "2", "--batch", "1", "--context", "8000")
    assert code == 0 and "16 x h100-sxm (TP8 × PP2)" in out


def test_a_prompt_passes_the_stages_one_after_another() -> None:
    """vLLM's TTFT floor at TP8 × PP2 is one prompt's trip through both stages: no faster
    than TP8 over the whole model (the other requests' batches in flight raise throughput)."""
    from ridgeline.floors import prefill_floor

    model, h100 = resolve_model("llama-3.1-405b"), resolve_accelerator("h100")
    pp2 = Deployment.build(model, h100, None, None, 16, 2, engine="vllm")
    tp8 = Deployment.build(model, h100, None, None, 8, engine="vllm")
    assert prefill_floor(pp2, 8192).time_s == pytest.approx(prefill_floor(tp8, 8192).time_s,
                                                            rel=0.05)


def test_the_tensor_parallel_lever_of_a_pipeline_names_both(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2",
                           "-pp", "2", "--max-model-len", "32768", "--json")
    names = [lever["name"] for lever in json.loads(out)["levers"]]
    assert code == 0 and "8 GPUs (TP4 × PP2)" in names


def test_observe_and_utilization_size_a_pipelines_pool(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from pathlib import Path

    metrics = Path(__file__).parent / "fixtures" / "vllm_metrics.txt"
    base = ["observe", str(metrics), "--model", "llama-3.1-70b", "--gpu",
            "h100", "--num-gpus", "4", "--json"]
    _, flat, _ = run_cli(capsys, *base)
    code, staged, _ = run_cli(capsys, *base, "-pp", "2")
    assert code == 0 and json.loads(staged)["engine_max_batch"] > json.loads(flat)["engine_max_batch"]
    code, _, err = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "8", "-pp", "2")
    assert code == 2 and "splits the running batch over a model's layer stages" in err
    code, _, err = run_cli(capsys, "utilization", "--gpu", "h100", "--running", "8", "--context",
                           "2000")
    assert code == 2 and "--context size a model's KV pool: give --model" in err


def test_tensor_parallelism_past_a_node_is_said_and_its_lever_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TP16 on H100s crosses the network between two nodes on every all-reduce: decode,
    prefill and fit say so, and name TP8 × PP2; TP8 says nothing."""
    from tests.conftest import run_cli

    for command in (["decode", "llama-3.1-70b", "--gpu", "h100", "--batch", "32"],
                    ["prefill", "llama-3.1-70b", "--gpu", "h100", "--prompt-len", "2000"],
                    ["fit", "llama-3.1-70b", "--gpu", "h100", "--max-model-len", "8k"]):
        _, out, _ = run_cli(capsys, *command, "--num-gpus", "16")
        assert "TP16 spans 2 nodes of 8 h100-sxm" in out and "TP8 × PP2 (-tp 8 -pp 2)" in out
        _, out, _ = run_cli(capsys, *command, "--num-gpus", "8")
        assert "spans" not in out


@pytest.mark.parametrize("model,gpu,tp,pp", [("deepseek-v3", "h100", 16, 4),
                                             ("llama-3.1-405b", "h100", 16, 2),
                                             ("kimi-k2", "h100", 32, 2),
                                             ("llama-3.1-405b", "mi250", 8, 2)])
def test_under_pipeline_stages_the_cross_node_caution_keeps_the_gpus_as_fits_lever_does(
        capsys: pytest.CaptureFixture[str], model: str, gpu: str, tp: int, pp: int) -> None:
    """TP past a node with pipeline stages already on: fit, decode and simulate advise the
    same GPUs with TP a node's (TP16 × PP4 of H100s, 64 GPUs: TP8 × PP8, not TP8 × PP2's
    16), the layout fit's 'the same N GPUs as' lever names, in the ranks the engine launches
    (vLLM on MI250s: each card's 2 dies)."""
    layout = ["--gpu", gpu, "--num-gpus", str(tp), "-pp", str(pp)]
    code, out, err = run_cli(capsys, "fit", model, *layout, "--max-model-len", "8k", "--json")
    assert code == 0, err
    fit = json.loads(out)
    dies = fit["runtime_devices_per_gpu"]
    lever = next(lv["name"] for lv in fit["levers"] if lv["name"].startswith("the same "))
    split = lever.split(" as ", 1)[1].split(" over ")[0]  # 'TP8 × PP8'
    node_tp, stages = (int(part.strip()[2:]) for part in split.split("×"))
    assert node_tp * stages == tp * dies * pp == fit["num_gpus"] * dies and stages > pp
    said = f"{split} (-tp {node_tp} -pp {stages}) keeps them inside a node"
    assert any(c.startswith(f"TP{tp * dies} spans") and said in c for c in fit["cautions"])
    for command in (["decode", model, "--batch", "8", "--context", "4096"],
                    ["simulate", model, "--rate", "1", "--num-requests", "10"]):
        code, out, err = run_cli(capsys, *command, *layout)
        assert code == 0, err
        assert f"TP{tp * dies} spans" in out and said in out


def test_a_tp_no_node_divides_gets_no_layout_of_other_gpus() -> None:
    """TP12 on 8-GPU nodes has no same-GPU layout with TP a node's: the caution names the
    remedy, not a layout of another GPU count; stages past the layers likewise."""
    from ridgeline.parallel import cross_node_caution, tp_within_node

    h100 = resolve_accelerator("h100")
    assert tp_within_node(12, 1, 8) is None and tp_within_node(8, 2, 8) is None
    assert tp_within_node(16, 4, 8) == (8, 8)
    odd = cross_node_caution(12, 1, h100, "vllm")
    assert "spans 2 nodes" in odd and "× PP" not in odd and "-pp" not in odd
    few = cross_node_caution(16, 4, h100, "vllm", num_layers=7)  # TP8 × PP8: 8 stages
    assert "× PP" not in few and cross_node_caution(16, 4, h100, "vllm", num_layers=8) \
        .endswith("TP8 × PP8 (-tp 8 -pp 8) keeps them inside a node")


def test_llamacpps_tensor_split_is_in_its_start_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server splits by layer unless told: the command fit prints for -sm tensor says
    so, and the header names the split either way."""
    from tests.conftest import run_cli

    argv = ["fit", "llama-3.1-70b", "--gpu", "l40s", "--num-gpus", "2", "--engine",
            "llama.cpp-cuda", "--weights", "q4_k_m", "--max-model-len", "16k"]
    _, out, _ = run_cli(capsys, *argv, "--split-mode", "tensor")
    assert "llama.cpp-cuda -sm tensor," in out and "--kv-unified -sm tensor" in out
    _, out, _ = run_cli(capsys, *argv)
    assert "llama.cpp-cuda -sm layer," in out and "-sm tensor" not in out


def test_a_hybrids_page_on_a_stage_is_its_largest_group_there() -> None:
    """vLLM groups gpt-oss-120b's layers over the whole model (18 full, 18 windowed) and
    sizes each PP4 stage's block by its largest group there: nine layers alternate, five of
    one kind, so five layers a page, not the even 4.5; a uniform model's stage holds its
    own layers either way."""
    from ridgeline.kvgroups import stage_group_layers

    dep = Deployment.build(resolve_model("gpt-oss-120b"), resolve_accelerator("h100"), None,
                           None, 8, 4, "vllm")
    assert [stage_group_layers(dep, 18, 9 * i, 9) for i in range(4)] == [5, 5, 5, 5]
    llama = Deployment.build(resolve_model("llama-3.1-70b"), resolve_accelerator("h100"),
                             None, None, 4, 2, "vllm")
    assert stage_group_layers(llama, 80, 0, 40) == 40
    pools = stage_pools(dep, EngineSettings(max_model_len=131072))
    assert all(p.groups is not None and p.groups.page_bytes == pytest.approx(
        p.block_size * 5 * 1024) for p in pools)  # a block's tokens × 5 layers × 1 KiB

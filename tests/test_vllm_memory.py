"""vLLM's memory accounting by version, pinned to the start-up logs it is built from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.parallel import LOW_LATENCY_FABRICS
from ridgeline.units import GIB, MIB
from ridgeline.vllm_graphs import capture_sizes
from ridgeline.vllm_memory import parse_version, vllm_accounting, vllm_data


def dep(model: str, gpu: str = "h100", n: int = 1, weights: str | None = None,
        pp: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, n,
                            pipeline_parallel_size=pp)


def test_versions_parse_and_pick_their_era() -> None:
    assert parse_version("v0.6.4.post1") == (0, 6, 4)
    assert parse_version("0.10") == (0, 10, 0)  # the part left out read as 0
    assert parse_version("0.12") >= parse_version("0.12.0")  # '0.12' has reached 0.12.0
    assert parse_version("v0.10.1.1") == (0, 10, 1, 1)  # a real release
    assert vllm_accounting("0.2.4").non_torch_gib == 0  # before PR #2031: torch only
    assert vllm_accounting("0.2.5").non_torch_gib > 0
    assert vllm_accounting("0.7.3").engine == "V0"
    assert vllm_accounting("0.8.0").engine == "V1"
    assert vllm_accounting("0.8.5 V0").engine == "V0"  # VLLM_USE_V1=0
    assert vllm_accounting("0.16").sampler_logit_copies > 3 * vllm_accounting("0.17").sampler_logit_copies
    assert not vllm_accounting("0.20.2").graphs_in_budget
    assert vllm_accounting("0.21").graphs_in_budget
    assert vllm_accounting().version == vllm_data()["default_version"]  # the default
    assert (vllm_accounting("0.33").block_size, vllm_accounting("0.34").block_size) == (16, 64)
    assert not vllm_accounting("0.33").extensible_kv_cache
    assert vllm_accounting("0.34").extensible_kv_cache
    assert not vllm_accounting("0.23").tokens_from_concurrency
    assert vllm_accounting("0.24").tokens_from_concurrency
    assert (vllm_accounting("0.25.1").in_flight_batches, vllm_accounting("0.26").in_flight_batches) \
        == (1, 2)
    for bad in ("banana", "0.0.9"):
        with pytest.raises(InputError):
            vllm_accounting(bad)
    with pytest.raises(InputError):
        EngineSettings(engine_version="next")


def test_sampler_peak_is_what_v0_10_logged_for_llama_and_gpt_oss_on_h100() -> None:
    # llm-d-benchmark's table of vLLM logs (H100, 79.18 GiB, 1,024 requests by default on
    # H100): peak activation 4.76 GiB for Llama-3.1-8B and 7.38 GiB for gpt-oss-20b — the
    # sampler's fp32 logits × 9.7, bigger than the 8,192-token forward pass.
    for model, logged in (("llama-3.1-8b-instruct", 4.76), ("gpt-oss-20b", 7.38)):
        pool = kv_pool(dep(model), EngineSettings(engine_version="0.10.1"), 79.18 * GIB)
        assert pool.max_num_seqs == 1024
        assert pool.sampler_bytes > pool.forward_bytes
        assert pool.activation_bytes / GIB == pytest.approx(logged, rel=0.05)


def test_v0_10_pool_matches_the_logged_llama_pool() -> None:
    # Same table: 0.9 x 79.18 - 14.99 weights - 4.76 activations - 0.13 non-torch = 51.38 GiB.
    pool = kv_pool(dep("llama-3.1-8b-instruct"), EngineSettings(engine_version="0.10.1"),
                   79.18 * GIB)
    assert pool.pool_bytes / GIB == pytest.approx(51.38, rel=0.01)
    assert pool.cuda_graph_bytes == 0  # captured after the pool was sized


def test_a_lighter_sampler_from_v0_17_and_graphs_in_the_budget_from_v0_21() -> None:
    d = dep("llama-3.1-8b-instruct")
    v16, v17, v20, v21 = (kv_pool(d, EngineSettings(engine_version=v))
                          for v in ("0.16", "0.17", "0.20", "0.21"))
    assert v17.sampler_bytes == pytest.approx(v16.sampler_bytes * 3.0 / 9.7)
    assert v17.pool_bytes > v16.pool_bytes
    # v0.20's default memory share: 0.92 of the card, not 0.9
    assert (v17.reserved_fraction, v20.reserved_fraction) == (0.9, 0.92)
    assert v20.pool_bytes - v17.pool_bytes == pytest.approx(0.02 * v17.total_bytes)
    # 32 layers x 51 captured sizes (1, 2, 4, every 8 below 256, then 16s to 512) x 0.45 MiB
    assert (capture_sizes(1024), capture_sizes(128), capture_sizes(2)) == (51, 35, 3)
    assert v21.cuda_graph_bytes == pytest.approx(32 * 51 * 0.45 * MIB)
    assert v21.pool_bytes == pytest.approx(v20.pool_bytes - v21.cuda_graph_bytes)
    eager = kv_pool(d, EngineSettings(engine_version="0.21", enforce_eager=True))
    assert eager.cuda_graph_bytes == 0


def test_v0_profiles_the_whole_context_until_chunked_prefill_takes_over_past_32k() -> None:
    d = dep("llama-3.1-8b-instruct", "rtx-3090")
    at_20k = kv_pool(d, EngineSettings(max_model_len=20_000, engine_version="0.6.4"))
    at_29k = kv_pool(d, EngineSettings(max_model_len=29_000, engine_version="0.6.4"))
    at_64k = kv_pool(d, EngineSettings(max_model_len=65_536, engine_version="0.6.4"))
    # past 32K 0.6.4 chunks by 512 tokens (its SchedulerConfig; 2,048 from 0.6.5)
    assert (at_20k.profile_tokens, at_29k.profile_tokens, at_64k.profile_tokens) == (20_000, 29_000, 512)
    # vLLM #10517: the torch peak grew 0.92 GiB from 20k to 29k profiled tokens
    assert (at_29k.activation_bytes - at_20k.activation_bytes) / GIB == pytest.approx(0.92, rel=0.05)


def test_l40s_pool_counts_the_memory_ecc_keeps() -> None:
    l40s = resolve_accelerator("l40s")
    assert l40s.visible_memory_bytes == 46_068 * MIB < l40s.memory_bytes
    # torch reports 44.42 GiB on an L40S (v0.10.2 log); 0.985 of what ECC leaves is within 0.5 %
    assert kv_pool(dep("llama-3.1-8b", "l40s")).total_bytes / GIB == pytest.approx(44.42, rel=0.005)


def test_qwen3_235b_on_eight_l40s_matches_the_logged_v0_10_2_budget() -> None:
    # Logged: weights 27.72, peak activation 1.4, non-torch 0.17-0.21 GiB; KV 10.64 GiB
    pool = kv_pool(dep("Qwen/Qwen3-235B-A22B-FP8", "l40s", n=8),
                   EngineSettings(engine_version="0.10.2"), 44.42 * GIB)
    assert pool.activation_bytes / GIB == pytest.approx(1.4, rel=0.05)
    assert pool.pool_bytes / GIB == pytest.approx(10.64, rel=0.04)


def test_nvlink_tensor_parallel_adds_custom_all_reduce_memory() -> None:
    one = kv_pool(dep("llama-3.1-70b", n=1), EngineSettings(engine_version="0.10"))
    two = kv_pool(dep("llama-3.1-70b", n=2), EngineSettings(engine_version="0.10"))
    pcie = kv_pool(dep("llama-3.1-70b", "l40s", n=2), EngineSettings(engine_version="0.10"))
    assert one.non_torch_bytes / GIB == pytest.approx(0.15)
    assert two.non_torch_bytes / GIB == pytest.approx(0.55)  # logged 0.55 at TP2 on H100
    assert pcie.non_torch_bytes == one.non_torch_bytes


def test_the_engine_log_rows_validate() -> None:
    # validation/kvlogs.csv: capacity figures from start-up logs, each row's settings and
    # version read from its notes. The vLLM rows are the accounting's evidence.
    from statistics import median

    from ridgeline.measurements import read_measurements
    from ridgeline.predict import predict

    path = Path(__file__).resolve().parent.parent / "validation" / "kvlogs.csv"
    result = read_measurements(path)
    assert not result.errors
    errors = {p.id: p.error for p in map(predict, result.rows)}
    assert all(e is not None for e in errors.values())
    vllm = [abs(e) for i, e in errors.items() if e is not None and i.startswith("KV-vllm")]
    assert len(vllm) >= 30
    assert median(vllm) <= 0.03
    # what tensor parallelism over PCIe holds outside PyTorch (NCCL's buffers) is not
    # modelled: the rest, one GPU or an NVLink group, is within 3 % three times in four
    pcie = {r.id for r in result.rows if r.tp > 1 and not (
        resolve_accelerator(r.gpu).link_kind or "").lower().startswith(LOW_LATENCY_FABRICS)}
    held = [abs(e) for i, e in errors.items()
            if e is not None and i.startswith("KV-vllm") and i not in pcie]
    assert len(held) >= 15 and sum(e <= 0.03 for e in held) >= 0.75 * len(held)
    # the Model Runner V2 logs, cold and warm compile caches alike, within 1 %
    mrv2 = [abs(e) for i, e in errors.items() if e is not None
            and ("coldstart-rtx4090" in i or "a100-llama31-8b" in i)]
    assert len(mrv2) == 9 and max(mrv2) < 0.01


def test_fit_warns_where_an_old_version_counted_more_than_the_model() -> None:
    from ridgeline.reports.fit import fit_report

    old = EngineSettings(engine_version="0.2.5")
    seventy = dep("llama-2-70b", "a100-80gb", n=4)
    lines = fit_report(seventy, 4096, old).text_lines()
    assert any(line.startswith("caution: vLLM 0.2.5") and "record_stream" in line for line in lines)
    # fixed in v0.2.7, and never a problem on one GPU
    assert not any("record_stream" in line
                   for line in fit_report(seventy, 4096, EngineSettings(engine_version="0.2.7")).text_lines())
    assert not any("record_stream" in line
                   for line in fit_report(dep("llama-2-7b", "a100-80gb"), 4096, old).text_lines())
    # the V0 era has no custom all-reduce buffers; V1 over NVLink does
    assert kv_pool(seventy, old).non_torch_bytes / GIB == pytest.approx(0.35)
    assert kv_pool(seventy, EngineSettings(engine_version="0.10")).non_torch_bytes / GIB == \
        pytest.approx(0.55)


def test_mxfp4_experts_are_padded_to_the_kernel_a_card_gets() -> None:
    from ridgeline.vllm_mxfp4 import mxfp4_padding_bytes

    a100 = dep("gpt-oss-20b", "a100-80gb")
    # Marlin: hidden 2,880 -> 3,072, intermediate 2,880 -> 2,944
    growth = 3072 * 2944 / 2880**2 - 1
    assert mxfp4_padding_bytes(a100) == pytest.approx(a100.bytes_by_category["experts"] * growth)
    # vLLM v0.19 logged 13.72 GiB of weights on an A100 (myoceane.fr blog)
    assert (a100.weight_bytes + mxfp4_padding_bytes(a100)) / GIB == pytest.approx(13.72, rel=0.01)
    assert mxfp4_padding_bytes(dep("gpt-oss-20b", "b200")) > mxfp4_padding_bytes(a100)  # both x 256
    # the SM12x Blackwells take Marlin from v0.13 (their Triton path needs capability < 11)
    pro = dep("gpt-oss-20b", "rtx-pro-6000-blackwell-server")
    assert mxfp4_padding_bytes(pro, None, "0.13") == pytest.approx(mxfp4_padding_bytes(a100))
    assert mxfp4_padding_bytes(pro, None, "0.12") == 0  # not known before
    assert mxfp4_padding_bytes(dep("gpt-oss-20b", "a100-80gb", weights="bf16")) == 0
    # the pool gives up exactly the padding
    plain = kv_pool(a100, EngineSettings(engine_version="0.19"))
    assert plain.weight_bytes == pytest.approx(a100.weight_bytes + mxfp4_padding_bytes(a100))


def test_rocm_pads_mxfp4_experts_to_256_from_v0_29() -> None:
    """vLLM's MoE oracle rounds MXFP4 experts on ROCm, hidden and intermediate per rank, to
    256 (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size): gpt-oss
    at TP1, 2,880 x 2,880 -> 3,072 x 3,072 (+13.8 %); at TP8, 2,880 x 360 -> 3,072 x 512
    (+51.7 %, 3.67 GiB a GPU). Before v0.29 the rule moved between releases: not known."""
    from ridgeline.vllm_mxfp4 import mxfp4_kernel, mxfp4_padding_bytes

    for card in ("mi300x", "mi325x", "mi355x"):
        assert mxfp4_kernel(resolve_accelerator(card), (0, 29)) == "rocm"
        assert mxfp4_kernel(resolve_accelerator(card), (0, 28)) is None
    one = dep("gpt-oss-120b", "mi300x")
    experts = one.bytes_by_category["experts"]
    assert mxfp4_padding_bytes(one, None, "0.29") == pytest.approx(
        experts * (3072 * 3072 / 2880**2 - 1))
    assert mxfp4_padding_bytes(one, None, "0.28") == 0
    eight = dep("gpt-oss-120b", "mi300x", 8)
    padded = mxfp4_padding_bytes(eight, None, "0.32")
    assert padded == pytest.approx(experts * (3072 * 512 / (2880 * 360) - 1) / 8)
    assert padded / GIB == pytest.approx(3.67, abs=0.01)
    # the same multiples as FlashInfer's on a B200, so the same bytes
    assert padded == pytest.approx(mxfp4_padding_bytes(dep("gpt-oss-120b", "b200", 8)))
    # and the pool counts them among the weights
    pool = kv_pool(eight, EngineSettings(engine_version="0.32"))
    older = kv_pool(eight, EngineSettings(engine_version="0.28"))
    assert pool.weight_bytes - older.weight_bytes == pytest.approx(padded)


def test_hopper_kept_the_mxfp4_scales_twice_until_v0_25() -> None:
    """vLLM's Triton path on Hopper swizzles the e8m0 scales into a copy padded to 256 rows
    and, before v0.25, keeps the loaded ones too; biases become fp32. llm-d logged 13.47 and
    64.38 GiB of weights for gpt-oss-20b and -120b on one H100 (checkpoints 12.8 and 60.8)."""
    from ridgeline.vllm_mxfp4 import mxfp4_padding_bytes

    for model, logged in (("gpt-oss-20b", 13.47), ("gpt-oss-120b", 64.38)):
        h100 = dep(model, "h100")
        held = (h100.weight_bytes + mxfp4_padding_bytes(h100, None, "0.24")) / GIB
        assert held == pytest.approx(logged, abs=0.1)
        # v0.25 frees the loaded scales: what is left is the copy's padding and the biases
        assert 0 < mxfp4_padding_bytes(h100, None, "0.25") \
            < mxfp4_padding_bytes(h100, None, "0.24") / 10
        # v0.17-v0.21's kernels padded the values' stored dims to 64 as well
        assert mxfp4_padding_bytes(h100, None, "0.17") > mxfp4_padding_bytes(h100, None, "0.16")
    # one expert at TP1, by hand: values, the swizzled scales padded to 256 rows, the loaded
    # scales, fp32 biases
    h100 = dep("gpt-oss-20b", "h100")
    expert = 3 * 2880 * 2880 // 2 + 5888 * 90 + 3072 * 90 + 3 * 2880 * 90 + (5760 + 2880) * 4
    stored = 3 * 2880 * 2880 * (0.5 + 1 / 32) + (5760 + 2880) * 2
    assert mxfp4_padding_bytes(h100, None, "0.24") == pytest.approx(
        h100.bytes_by_category["experts"] * (expert / stored - 1))


def test_a_row_with_unreadable_settings_gets_a_reason_not_an_abort(tmp_path: Path) -> None:
    from ridgeline.measurements import read_measurements
    from ridgeline.predict import predict

    header = ("id,model,weights_dtype,kv_dtype,gpu,num_gpus,tp,batch,input_len,output_len,"
              "context_len,metric,value,unit,engine,source,notes\n")
    row = ("{id},meta-llama/Llama-3.1-8B,bf16,bf16,h100-sxm,1,1,,,,8192,kv_cache_gib,50,GiB,vllm,"
           "S6 x,\"engine_settings: gpu_memory_utilization {u}; engine: vLLM v0.10\"\n")
    path = tmp_path / "rows.csv"
    path.write_text(header + row.format(id="KV-a", u="0.9.1") + row.format(id="KV-b", u="1.5")
                    + row.format(id="KV-c", u="0.9"))
    preds = {p.id: p for p in map(predict, read_measurements(path).rows)}
    assert preds["KV-a"].predicted is None and "not a number" in preds["KV-a"].reason
    assert preds["KV-b"].predicted is None and "(0, 1]" in preds["KV-b"].reason
    assert preds["KV-c"].predicted is not None


def test_explain_names_custom_all_reduce_only_where_it_was_counted() -> None:
    """Before v0.11 the start-up snapshot came before NCCL and the custom all-reduce were
    set up, so their buffers came out of the budget (0.4 GiB at TP over NVLink); from
    v0.11 (PR #25359) the snapshot follows them and they sit outside it."""
    from ridgeline.reports.fit import fit_report

    def note(gpu: str, version: str) -> str:
        report = fit_report(dep("llama-3.1-70b", gpu, n=4), 8192,
                            EngineSettings(engine_version=version))
        return next(q.source for s in report.steps for q in s.inputs
                    if q.name == "non-torch")

    assert "all-reduce" in note("h100", "0.10.2")  # NVLink: 0.15 + 0.4 GiB
    assert "all-reduce" not in note("l40s", "0.10.2")  # PCIe: no custom all-reduce buffers
    assert "all-reduce" not in note("h100", "0.11.0")
    nvlink = dep("llama-3.1-70b", "h100", n=4)
    before = kv_pool(nvlink, EngineSettings(max_model_len=8192, engine_version="0.10.2"))
    after = kv_pool(nvlink, EngineSettings(max_model_len=8192, engine_version="0.11.0"))
    assert (after.pool_bytes - before.pool_bytes) / GIB == pytest.approx(0.4)


def test_validate_marks_a_row_whose_engine_version_misbehaves_at_tp(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The #2031 TP4 row is still scored, but flagged with what vLLM 0.2.5 did that the
    model leaves out; its TP1 sibling carries no such flag."""
    from ridgeline.cli import main
    from tests.conftest import MEASUREMENTS

    assert main(["validate", str(MEASUREMENTS), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    tp4 = rows["KV-vllm2031-A100x4-L2-70B-tp4-blocks"]
    tp1 = rows["KV-vllm2031-A100-L2-7B-tp1-blocks"]
    assert tp4["error"] is not None and "record_stream" in tp4["caveat"]
    assert tp1["caveat"] is None


def test_hybrid_logs_of_the_versions_the_group_rule_was_read_from_reproduce() -> None:
    """validation/hybrid.csv: vLLM v0.10.2 Qwen3-Next-80B on 2 x H200 (544-token blocks, four
    groups) and v0.11 Gemma-3-27B on an MI300X (seven groups) within 2.5 % on every figure;
    the later logs are scored and documented, not fitted."""
    from ridgeline.measurements import read_measurements
    from ridgeline.predict import predict

    path = Path(__file__).resolve().parent.parent / "validation" / "hybrid.csv"
    result = read_measurements(path)
    assert not result.errors and len(result.rows) == 21
    errors = {p.id: p.error for p in map(predict, result.rows)}
    assert all(e is not None for e in errors.values())
    complete = {i: e for i, e in errors.items() if "h200-qwen3next" in i or "mi300x-gemma3" in i}
    assert len(complete) == 8 and all(abs(e) <= 0.025 for e in complete.values() if e is not None)
    # the v0.24 and v0.26 logs: blocks per request reproduce, so each concurrency misses by
    # its pool's GiB error and no more (two state blocks; two batches in flight)
    for log in ("rtx5090-qwen3.6", "l40s-gemma3-27b-fp8"):
        conc, gib = (next(e for i, e in errors.items() if log in i and i.endswith(end))
                     for end in ("-conc", "-gib"))
        assert conc is not None and gib is not None and abs(conc - gib) < 0.01


def test_a_release_past_the_newest_modelled_is_cautioned() -> None:
    from ridgeline.vllm_memory import past_modelled

    newest = vllm_data()["newest_checked"]
    assert past_modelled(vllm_accounting("0.35")).startswith(f"vLLM 0.35 is newer than {newest}")
    assert past_modelled(vllm_accounting("0.34")) == ""  # read, its extensible cache sized
    assert past_modelled(vllm_accounting("0.33")) == ""  # read, its sampler pass sized
    assert past_modelled(vllm_accounting("0.32.1")) == ""
    assert past_modelled(vllm_accounting()) == ""


def test_the_fused_moe_workspace_is_held_through_the_sampler_from_the_modular_kernel_on() -> None:
    """vLLM's modular fused-MoE kernel keeps its two workspaces (WorkspaceManager) from the
    first MoE layer on: Qwen3-235B-A22B-FP8 at TP4 and 8,192 tokens holds 2 × 8,192 × 8 ×
    4,096 × 2 B = 1 GiB (hidden outgrows 2 × 1,536 ÷ 4); Qwen3-30B-A3B in bf16, 512 MiB.
    Kernels that free theirs per layer hold none: block-FP8 before v0.17, bf16 before v0.14,
    MXFP4 (gpt-oss) in every release."""
    from ridgeline.vllm_memory import moe_workspace_bytes

    big = Deployment.build(resolve_model("qwen3-235b-a22b"), resolve_accelerator("h100"), "fp8",
                           num_gpus=4)
    assert moe_workspace_bytes(big, 8192, "0.27.1") == GIB
    assert moe_workspace_bytes(big, 8192, "0.16.0") == 0
    small = dep("qwen3-30b-a3b", "h100")
    assert moe_workspace_bytes(small, 8192, "0.14.0") == 512 * MIB
    assert moe_workspace_bytes(small, 8192, "0.13.0") == 0
    # before v0.18 the chunk caps M at 16,384 and the step's output is kept apart
    assert moe_workspace_bytes(small, 32768, "0.17.0") == 1024 * MIB + 32768 * 2048 * 2
    assert moe_workspace_bytes(small, 32768, "0.18.0") == 2048 * MIB
    assert moe_workspace_bytes(dep("gpt-oss-120b", "h100"), 8192, "0.27.1") == 0
    assert moe_workspace_bytes(dep("llama-3.1-8b", "h100"), 8192, "0.27.1") == 0
    # it stays held while the sampler runs: the peak is the larger of the two passes
    pool = kv_pool(big, EngineSettings(max_model_len=8192, engine_version="0.27.1",
                                       max_num_seqs=64))
    assert pool.activation_bytes == max(pool.forward_bytes,
                                        pool.moe_workspace_bytes + pool.sampler_bytes)
    assert pool.activation_bytes > pool.forward_bytes


# --kv-cache-memory-bytes (vLLM PR #21489): the pool set, not profiled


def test_a_set_pool_holds_its_bytes_in_blocks_whatever_the_fraction() -> None:
    # Llama-3.1-8B in bf16 caches 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 128 KiB a
    # token: 20 GiB hold 163,840 tokens, 2,560 blocks of 64 (v0.34's default block)
    d = dep("llama-3.1-8b")
    for fraction in (None, 0.5, 0.95):
        pool = kv_pool(d, EngineSettings(kv_cache_memory_bytes=20 * 2**30,
                                         gpu_memory_utilization=fraction))
        assert (pool.pool_bytes, pool.tokens) == (20 * GIB, 163_840)
        assert pool.blocks == 163_840 // pool.block_size
        assert pool.reserved_fraction == 1.0 and pool.overflow_bytes == 0
        assert pool.kept_free_bytes == 0  # a set pool turns the extensible cache off
    profiled = kv_pool(d, EngineSettings(extensible_kv_cache=False))
    room = kv_pool(d, EngineSettings(kv_cache_memory_bytes=1)).rest_bytes
    # the room the card leaves is more than the profiled pool by the fraction held back
    assert room > profiled.pool_bytes + 0.05 * profiled.total_bytes
    # sized after warm-up (v0.34's default), by what that measurement keeps free
    measured = kv_pool(d, EngineSettings())
    assert room == pytest.approx(measured.pool_bytes + measured.kept_free_bytes, rel=1e-12)


def test_a_set_pool_past_the_room_holds_nothing() -> None:
    d = dep("llama-3.1-8b")
    room = kv_pool(d, EngineSettings(kv_cache_memory_bytes=1)).rest_bytes
    pool = kv_pool(d, EngineSettings(kv_cache_memory_bytes=int(room) + 2**30))
    assert pool.pool_bytes == 0 and pool.blocks == 0
    assert pool.overflow_bytes == pytest.approx(2**30, abs=1)


def test_only_v1_vllm_from_v0_10_2_sets_a_pool() -> None:
    # PR #21489 first shipped in v0.10.2 (the 0.10.1.1 source tarball has no such field)
    for version in ("0.10.1", "0.10.1.1"):
        with pytest.raises(InputError, match=r"came in vLLM v0\.10\.2"):
            kv_pool(dep("llama-3.1-8b"), EngineSettings(kv_cache_memory_bytes=2**30,
                                                        engine_version=version))
    assert kv_pool(dep("llama-3.1-8b"), EngineSettings(
        kv_cache_memory_bytes=2**30, engine_version="0.10.2")).pool_bytes == 2**30


def test_only_v1_vllm_sets_a_pool() -> None:
    with pytest.raises(InputError, match="sizes its pool only from the profile"):
        kv_pool(dep("llama-3.1-8b"), EngineSettings(kv_cache_memory_bytes=2**30,
                                                    engine_version="0.8.5 V0"))
    sglang = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                              engine="sglang")
    with pytest.raises(InputError, match="vLLM's; sglang"):
        kv_pool(sglang, EngineSettings(kv_cache_memory_bytes=2**30))


def test_vllm_start_up_advice_is_its_logged_arithmetic() -> None:
    # vLLM's worker log on an 80 GiB card (a 27B model): "Desired GPU memory utilization is
    # (0.92, 73.6 GiB). Actual usage is 51.66 GiB for consumed memory (weights + non-torch),
    # 2.4 GiB for peak activation, and 0.71 GiB for CUDAGraph memory. Replace
    # gpu_memory_utilization config with --kv-cache-memory=20064085607 (18.69 GiB) to fit
    # into requested memory, or --kv-cache-memory=26927570944 (25.08 GiB) to fully utilize"
    from dataclasses import replace

    from ridgeline.vllm_pool import vllm_pool_advice

    d = dep("llama-3.1-8b")
    pool = replace(kv_pool(d, EngineSettings()), total_bytes=80.0 * GIB, reserved_fraction=0.92,
                   weight_bytes=51.66 * GIB, non_torch_bytes=0.0, activation_bytes=2.4 * GIB,
                   cuda_graph_bytes=0.71 * GIB, seat_buffer_bytes=0.0)
    advice = vllm_pool_advice(d, pool, EngineSettings())
    assert advice is not None
    requested, card = advice
    assert requested / GIB == pytest.approx(18.69, abs=0.02)  # the log's inputs are rounded
    assert card / GIB == pytest.approx(25.08, abs=0.02)
    # where the budget counts the graphs (v0.29+ MRV2, v0.21+ V1), the advice to fit the
    # requested memory is the profiled pool less vLLM's 150 MiB margin
    profiled = EngineSettings(extensible_kv_cache=False)  # sized from the profile, at 0.92
    default = kv_pool(d, profiled)
    advice = vllm_pool_advice(d, default, profiled)
    assert advice is not None
    assert advice[0] == pytest.approx(default.pool_bytes - 150 * MIB)
    assert advice[1] - advice[0] == pytest.approx(default.total_bytes
                                                  * (1 - default.reserved_fraction))
    # v0.34's extensible cache still logs it, its budget the whole card: the two agree, and
    # what the measurement keeps free is not in them
    measured = kv_pool(d, EngineSettings())
    advice = vllm_pool_advice(d, measured, EngineSettings())
    assert advice is not None and advice[0] == advice[1]
    assert advice[0] == pytest.approx(measured.pool_bytes + measured.kept_free_bytes - 150 * MIB)
    assert vllm_pool_advice(d, kv_pool(d, EngineSettings(kv_cache_memory_bytes=GIB)),
                            EngineSettings()) is None


def test_fit_with_a_set_pool(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "32k", "--kv-cache-memory-bytes", "20G", "--json")
    report = json.loads(out)
    assert code == 0 and report["pool_bytes_per_gpu"] == 20 * GIB
    assert report["blocks_per_gpu"] == 163_840 // report["block_size"]  # 128 KiB a token
    assert report["conversations"] == 5  # 3.9 GiB each
    assert report["kv_cache_memory_bytes"]["overflow_bytes_per_gpu"] == 0
    assert report["vllm_advice"] is None
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "32k", "--kv-cache-memory-bytes", "70G")
    assert code == 0 and out.startswith("DOES NOT FIT: the 70.00 GiB pool")
    assert "would run out of memory" in out.splitlines()[0]
    code, _, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "32k", "--kv-cache-memory-bytes", "20G", "--engine", "sglang")
    assert code == 2 and "--kv-cache-memory-bytes is vLLM's" in err
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                           "32k")
    assert "vLLM's start-up advice: --kv-cache-memory-bytes" in out


def test_a_16_bit_weights_flag_is_the_dtype_the_cache_follows() -> None:
    fp16 = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "fp16")
    assert (fp16.kv.id, fp16.attention_compute_dtype) == ("fp16", "fp16")  # vLLM --dtype half
    assert dep("llama-3.1-8b").kv.id == "bf16"  # as stored
    assert Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            "fp8").kv.id == "bf16"  # quantized weights: the activations' dtype


def test_a_negative_pool_reads_as_vllm_logs_it(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM #23278 (v0.10.1, one H100 PCIe): "Available KV cache memory: -2.14 GiB", then it
    # stops; ridgeline's budget prints the signed figure the same way (its own, -0.62 GiB),
    # and --json gives it as over_budget_bytes_per_gpu beside an available pool of 0
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "h100-pcie",
                           "--engine-version", "0.10.1", "--max-model-len", "131072", "--json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "does not fit" and report["pool_bytes_per_gpu"] == 0
    assert report["available_kv_bytes_per_gpu"] == 0 and report["over_budget_bytes_per_gpu"] > 0
    code, out, _ = run_cli(capsys, "fit", "gpt-oss-120b", "--gpu", "h100-pcie",
                           "--engine-version", "0.10.1", "--max-model-len", "131072")
    line = next(x for x in out.splitlines() if x.startswith("= KV pool"))
    assert "negative: the engine stops at start-up" in line
    assert f"-{report['over_budget_bytes_per_gpu'] / GIB:,.2f} GiB" in line


def test_gpt_oss_on_hopper_takes_marlin_until_v0_12_as_the_logs_show() -> None:
    # vLLM #23278, v0.10.1 on one H100 PCIe, the Marlin kernel: "Model loading took 65.9651
    # GiB", then "Available KV cache memory: -2.14 GiB"; #33155, v0.14.1 on one H100 with the
    # Triton backend: 64.38 GiB; #27508 (2025-10-31, v0.10.2 or v0.11.0: the same rule; the H100
    # variant not stated, SXM taken) at --gpu-memory-utilization 0.95 --max-num-batched-tokens
    # 1024: "Available KV cache memory: 1.71 GiB"
    from ridgeline.vllm_mxfp4 import mxfp4_kernel

    h100 = resolve_accelerator("h100")
    assert mxfp4_kernel(h100, (0, 11, 2)) == "marlin" and mxfp4_kernel(h100, (0, 12)) \
        == "triton-hopper"
    pcie = kv_pool(dep("gpt-oss-120b", "h100-pcie"), EngineSettings(
        engine_version="0.10.1", max_model_len=131072))
    assert pcie.weight_bytes / GIB == pytest.approx(65.9651, rel=0.002)
    assert pcie.rest_bytes / GIB == pytest.approx(-2.14, abs=0.1)
    triton = kv_pool(dep("gpt-oss-120b"), EngineSettings(engine_version="0.14.1",
                                                         max_model_len=5120))
    assert triton.weight_bytes / GIB == pytest.approx(64.38, rel=0.002)
    tight = kv_pool(dep("gpt-oss-120b"), EngineSettings(
        engine_version="0.11.0", gpu_memory_utilization=0.95, max_num_batched_tokens=1024,
        max_model_len=131072))
    assert tight.pool_bytes / GIB == pytest.approx(1.71, abs=0.05)


@pytest.mark.parametrize(("gpu", "version", "asked", "block"), [
    ("h200", "0.7.3", None, 16),    # V0's Triton MLA: the default kept
    ("h200", "0.8.0", None, 64),    # FlashMLA on Hopper: the block forced to 64 ...
    ("h200", "0.11.0", 128, 64),    # ... even over a --block-size of 128 before v0.11.1
    ("h200", "0.12", 128, 128),     # from v0.11.1 a multiple of 64 is kept
    ("h200", "0.12", 16, 64),       # another is not
    ("h200", "0.18", None, 16),     # v0.18: the backend first (FlashAttention MLA), its 16
    ("b200", "0.10.0", None, 16),   # CUTLASS MLA opt-in only: Triton MLA
    ("b200", "0.11.0", None, 128),  # CUTLASS MLA forces 128
    ("b300", "0.12", None, 16),     # not 10.0 exactly: not forced before v0.13
    ("b300", "0.13", None, 128),    # the capability family from v0.13
    ("b200", "0.15", 32, 32),       # FlashInfer MLA (DeepSeek's 128-wide nope heads) takes 32
    ("b200", "0.15", None, 64),     # ... or forces 64
    ("b200", "0.33", None, 32),     # v0.18+: FlashInfer MLA's smallest block
    ("b200", "0.33", 16, 16),       # v0.18+: a --block-size given is never overwritten
    ("a100", "0.12", None, 16),     # Triton MLA on Ampere takes any block
])
def test_an_mla_cache_is_paged_in_the_block_its_kernel_takes(
        gpu: str, version: str, asked: int | None, block: int) -> None:
    """DeepSeek-V3 on 8 GPUs: the block vLLM runs the MLA cache in, by GPU and release
    (read from each release's platforms/cuda.py), and the pool counted in it."""
    d = dep("deepseek-v3", gpu, 8, "fp8")
    settings = EngineSettings(max_model_len=32_000, engine_version=version, block_size=asked)
    pool = kv_pool(d, settings)
    assert pool.block_size == block
    assert pool.tokens == pool.blocks * block


def test_fit_says_when_the_mla_kernel_overwrote_the_block_asked(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main
    args = ["fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--max-model-len", "32k",
            "--weights", "fp8", "--engine-version", "0.11"]
    assert main([*args, "--block-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "blocks of 64" in out and "FlashMLA and sets its blocks to 64 tokens, not the 16" in out
    assert main([*args, "--block-size", "64"]) == 0
    assert "not the" not in capsys.readouterr().out  # kept: nothing to say
    # an fp8 cache on Hopper runs on FlashMLA from v0.18 too
    assert main([*args[:-2], "--kv-dtype", "fp8"]) == 0
    assert "blocks of 64" in capsys.readouterr().out


def test_kimi_k2_thinking_on_eight_h200_is_near_the_recipe_pool() -> None:
    """vLLM's recipe for Kimi-K2-Thinking (vllm-project/recipes moonshotai/Kimi-K2-Think.md,
    PR #115; a nightly of 2025-11-06, the 0.11.1 line), 8 x H200 at TP8 with defaults, logged
    'Available KV cache memory: 46.80 GiB' and 'GPU KV cache size: 715,072 tokens'. Its
    experts are int4 in symmetric groups of 32, 4.5 bits; read as GPTQ's 4.16 the pool came
    out 14.8 % too large. The log gives no weights line to split the rest by, so the claim is
    5 %: what the engine-log rows hold three times in four is 3 %, and this one is 4 % over."""
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.datafiles import load_data
    from ridgeline.precision import weight_format
    from ridgeline.quantization import int_bits_per_weight

    config = dict(load_data("models/moonshotai--Kimi-K2-Instruct.json"))  # its architecture
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
            "symmetric": True, "dynamic": False}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
    spec = spec_from_hf_config(config, "Kimi-K2-Thinking")
    eight = Deployment.build(spec, resolve_accelerator("h200"), None, None, 8)
    assert eight.weights.format_of("experts").bits_per_weight == int_bits_per_weight(4, 32, True)
    assert eight.weights.format_of("attention") == weight_format("bf16")  # ignored: re:.*self_attn.*
    pool = kv_pool(eight, EngineSettings(engine_version="0.11.1"))
    assert pool.pool_bytes / GIB == pytest.approx(46.80, rel=0.05)
    assert pool.tokens == pytest.approx(715_072, rel=0.05)


def test_compressed_tensors_mxfp4_experts_keep_the_checkpoints_shapes() -> None:
    """The padding is vLLM's Mxfp4MoEMethod's (quant_method mxfp4, gpt-oss); a compressed-tensors
    MXFP4 MoE (CompressedTensorsW4A4Mxfp4MoEMethod) allocates the checkpoint's shapes."""
    import dataclasses

    from ridgeline.vllm_mxfp4 import mxfp4_padding_bytes

    native = dep("gpt-oss-20b", "a100-80gb")
    assert mxfp4_padding_bytes(native) > 0
    ct_model = dataclasses.replace(resolve_model("gpt-oss-20b"), quant_method="compressed-tensors")
    ct = Deployment.build(ct_model, resolve_accelerator("a100-80gb"), None, None, 1)
    assert ct.weights.format_of("experts").id == "mxfp4"
    assert mxfp4_padding_bytes(ct) == 0

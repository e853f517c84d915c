"""The accelerator catalog: coverage, consistency, forgiving names, user records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.hardware import (
    Accelerator,
    catalog,
    custom_accelerator,
    load_accelerator_file,
    resolve_accelerator,
)
from ridgeline.units import GB, GIB

PLANNED = [
    "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "h20", "gh200", "b200", "b300", "gb200",
    "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "a10g", "l4", "l40s",
    "mi250x", "mi300x", "mi325x", "mi355x", "gaudi3", "tpu-v5e", "tpu-v5p", "tpu-v6e",
]


def test_every_gpu_in_the_measurements_resolves(measurement_rows: list[dict[str, str]]) -> None:
    for gpu in {row["gpu"] for row in measurement_rows}:
        assert resolve_accelerator(gpu).id  # h100 / a100-80gb resolve to their SXM parts


@pytest.mark.parametrize("gpu", PLANNED)
def test_planning_parts_are_in_the_catalog(gpu: str) -> None:
    assert gpu in catalog()


@pytest.mark.parametrize("name", ["H100", "h100-sxm5", "NVIDIA H100 80GB HBM3", "h100 sxm"])
def test_h100_answers_to_its_common_names(name: str) -> None:
    assert resolve_accelerator(name).id == "h100-sxm"


def test_an_unknown_name_lists_the_closest_ids() -> None:
    with pytest.raises(InputError, match=r"closest: .*h100"):
        resolve_accelerator("h1000")


def test_an_ambiguous_name_lists_the_candidates() -> None:
    with pytest.raises(InputError, match="ambiguous"):
        resolve_accelerator("rtx")


def test_every_record_is_consistent_and_sourced() -> None:
    for acc in catalog().values():
        unit = GIB if acc.memory_unit == "GiB" else GB
        assert acc.memory_bytes == pytest.approx(acc.memory_size * unit), acc.id
        assert acc.sources, acc.id
        bf16 = acc.peak_flops.get("bf16") or acc.peak_flops.get("fp16")
        if bf16 and "fp32" in acc.peak_flops:
            assert acc.peak_flops["fp32"] <= bf16 * 1.01, acc.id
        # dense, never the sparsity-doubled figure: fp8 is at most 2x bf16 on every chip
        if bf16 and "fp8" in acc.peak_flops:
            assert acc.peak_flops["fp8"] <= 2.05 * bf16, acc.id  # L40S: 733 vs 362


def test_h100_memory_is_80_gib_not_80_gb() -> None:
    acc = resolve_accelerator("h100")
    assert acc.memory_unit == "GiB"
    assert acc.memory_bytes == 80 * GIB


def test_bf16_on_a_chip_without_it_runs_as_fp16() -> None:
    v100 = resolve_accelerator("v100-sxm-32gb")
    assert "bf16" not in v100.peak_flops
    assert v100.resolve_dtype("bf16") == "fp16"


def test_fp8_on_an_a100_is_refused() -> None:
    with pytest.raises(InputError, match="no fp8"):
        resolve_accelerator("a100").peak("fp8")


def test_a_user_adds_an_accelerator_from_a_file(tmp_path: Path) -> None:
    record = {"id": "my-card", "memory_bytes": 48 * GIB, "memory_bandwidth_bytes_per_s": 1e12,
              "peak_flops": {"bf16": 200e12}, "sources": ["our lab"]}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(record))
    acc = load_accelerator_file(str(path))
    assert acc.peak("bf16") / acc.memory_bandwidth_bytes_per_s == pytest.approx(200)


def test_a_file_that_is_not_an_accelerator_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "card.json"
    path.write_text('{"id": "x"}')
    with pytest.raises(InputError, match="lacks"):
        load_accelerator_file(str(path))
    path.write_text("not json")
    with pytest.raises(InputError, match="not an accelerator"):
        load_accelerator_file(str(path))


def test_a_negative_bandwidth_is_refused() -> None:
    with pytest.raises(InputError, match="positive"):
        Accelerator("x", "x", 1e9, -1.0, {"bf16": 1e12})
    with pytest.raises(InputError, match="positive"):
        custom_accelerator("x", 100, 0, 80)


@pytest.mark.parametrize(("ram_gib", "logged_mb", "where"), [
    (16, 10922.67, "llama-cpp-python #687, M1 Pro 16 GB"),
    (32, 21845.34, "llama.cpp PR #2011, M1 Max 32 GB"),
    (96, 73728.00, "llama.cpp #3213, M2 Max 96 GB"),
])
def test_metal_working_set_matches_what_ggml_metal_init_logs(
        ram_gib: int, logged_mb: float, where: str) -> None:
    """ggml prints recommendedMaxWorkingSetSize in MiB though it labels them MB."""
    from ridgeline.hardware import metal_working_set_bytes

    assert metal_working_set_bytes(ram_gib * 2**30) / 2**20 == pytest.approx(logged_mb, abs=0.01), where


def test_apple_parts_expose_the_working_set_and_other_parts_their_memory() -> None:
    mac, h100 = resolve_accelerator("apple-m2-ultra-76c"), resolve_accelerator("h100")
    assert mac.visible_memory_bytes == 0.75 * mac.memory_bytes
    assert h100.visible_memory_bytes == h100.memory_bytes


@pytest.mark.parametrize("change, message", [
    ({"memory_bytes": 10}, "is not 80 GiB"),
    ({"memory_unit": "TB"}, "GB or GiB"),
    ({"memory_bandwidth_bytes_per_s": 1e-9}, "not a plausible figure"),
    ({"peak_flops": {"bf16": 989.4}}, "not a plausible figure"),  # TFLOP/s where FLOP/s go
    ({"memory_bandwidth_bytes_per_s": float("inf")}, "a finite number above 0, got inf"),
])
def test_an_accelerator_file_must_agree_with_itself(tmp_path: Path, change: dict[str, object],
                                                    message: str) -> None:
    record = {"id": "mine", "memory_size": 80, "memory_unit": "GiB", "memory_bytes": 80 * 2**30,
              "memory_bandwidth_bytes_per_s": 3.35e12, "peak_flops": {"bf16": 9.894e14}}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({**record, **change}))
    with pytest.raises(InputError, match=message):
        load_accelerator_file(str(path))


def test_b300_engines_find_what_its_driver_exposes_not_the_physical_288_gib() -> None:
    """nvidia-smi shows 275,040 MiB of the B300's 288 GiB; the runtime's total, what vLLM
    multiplies gpu_memory_utilization by, is 267.69 GiB in the logs."""
    from ridgeline.hardware import VISIBLE_MEMORY_FRACTION, device_memory_bytes

    b300 = resolve_accelerator("b300")
    assert b300.memory_gib == 288
    assert b300.visible_memory_bytes == 275_040 * 2**20  # nvidia-smi on HGX B300
    assert device_memory_bytes(b300) / 2**30 == pytest.approx(267.69, abs=0.005)
    # without a logged total, the catalog's usual discount of the driver's figure
    from dataclasses import replace
    assert device_memory_bytes(replace(b300, runtime_total_bytes=None)) == pytest.approx(
        275_040 * 2**20 * VISIBLE_MEMORY_FRACTION)


def test_a_dgx_spark_engine_finds_the_121_69_gib_cuda_reports_not_128() -> None:
    """GB10's 128 GiB is shared with the OS: vLLM multiplies gpu_memory_utilization by the
    device total CUDA reports ('Free memory on device (114.54/121.69 GiB)'), not by the RAM."""
    from ridgeline import Deployment, resolve_model
    from ridgeline.hardware import device_memory_bytes
    from ridgeline.memory import EngineSettings, kv_pool

    spark = resolve_accelerator("dgx spark")
    assert spark.memory_gib == 128
    assert device_memory_bytes(spark) / 2**30 == pytest.approx(121.69, abs=0.005)
    assert spark.visible_memory_bytes == device_memory_bytes(spark)  # no second discount
    model = resolve_model("qwen3-8b")
    pool = kv_pool(Deployment.build(model, spark, engine="vllm"),
                   EngineSettings(max_model_len=8192, gpu_memory_utilization=0.5))
    assert pool.total_bytes == device_memory_bytes(spark)


@pytest.mark.parametrize("runtime_total, message", [
    (-1, "runtime_total_bytes"),
    (81 * 2**30, "runtime total memory exceeds"),
])
def test_a_runtime_total_must_be_inside_the_memory(tmp_path: Path, runtime_total: float,
                                                    message: str) -> None:
    record = {"id": "mine", "memory_size": 80, "memory_unit": "GiB", "memory_bytes": 80 * 2**30,
              "memory_bandwidth_bytes_per_s": 3.35e12, "peak_flops": {"bf16": 9.894e14},
              "runtime_total_bytes": runtime_total}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(record))
    with pytest.raises(InputError, match=message):
        load_accelerator_file(str(path))


def test_fit_on_a_dgx_spark_warns_that_free_memory_is_what_the_os_leaves(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM checks at start-up that util × the device total is free ('Free memory on device
    (56.65/119.7 GiB) on startup is less than desired GPU memory utilization (0.92,
    110.12 GiB)'): on unified memory the OS's share counts against it, so fit says so there
    and not on a discrete card. From v0.34 the extensible cache skips that check and sizes
    the pool from the memory free after warm-up: the OS's share comes out of the pool."""
    from ridgeline.cli import main

    assert main(["fit", "qwen3-30b-a3b", "--gpu", "gb10", "--max-model-len", "32k",
                 "--engine-version", "0.33"]) == 0
    out = capsys.readouterr().out
    assert "vLLM refuses to start unless 0.92 × 121.69 GiB = 112.0 GiB is free" in out
    assert main(["fit", "qwen3-30b-a3b", "--gpu", "gb10", "--max-model-len", "32k"]) == 0
    out = capsys.readouterr().out
    assert "shares its memory with the OS: vLLM 0.34 sizes its pool from the memory free" in out
    assert "refuses to start unless" not in out
    assert main(["fit", "qwen3-30b-a3b", "--gpu", "h100", "--max-model-len", "32k"]) == 0
    assert "shares its memory with the OS" not in capsys.readouterr().out


def test_geforce_cards_record_their_fp16_accumulate_rate_at_twice_the_fp32_one() -> None:
    """GeForce tensor cores run FP32 accumulate at half rate; the catalog's fp16 is that rate,
    and fp16_accumulate_flops the full one. Other cards accumulate in fp32 at full rate."""
    for acc in catalog().values():
        if acc.vendor == "nvidia" and acc.form == "consumer":
            assert acc.fp16_accumulate_flops == pytest.approx(2 * acc.peak("fp16"), rel=0.01)
        else:
            assert acc.fp16_accumulate_flops is None, acc.id


@pytest.mark.parametrize("rate", [1e12, 1e16])
def test_an_fp16_accumulate_rate_that_is_not_a_faster_fp16_is_refused(rate: float) -> None:
    record = {"id": "odd", "memory_bytes": 24e9, "memory_bandwidth_bytes_per_s": 1e12,
              "peak_flops": {"fp16": 100e12}, "fp16_accumulate_flops": rate}
    with pytest.raises(InputError, match="fp16_accumulate_flops"):
        Accelerator.from_record(record)


def test_llama_cpp_cuda_multiplies_fp16_at_the_fp16_accumulate_rate_on_geforce_only() -> None:
    """ggml-cuda's cuBLAS path asks for CUBLAS_COMPUTE_16F: twice the catalog's rate on an RTX
    4090, the catalog's own on an H100 (full rate either way) and for vLLM on the 4090. The
    ridge divides the peak the step is priced at."""
    from ridgeline.catalog import resolve_model
    from ridgeline.deployment import Deployment

    model = resolve_model("llama-3.1-8b")
    rtx, h100 = resolve_accelerator("rtx-4090"), resolve_accelerator("h100-pcie")
    llama = Deployment.build(model, rtx, "q4_k_m", engine="llama.cpp-cuda")
    assert llama.peak_flops_per_s == pytest.approx(2 * rtx.peak("fp16"))
    assert "fp16 accumulate" in llama.peak_note
    assert llama.dense_ridge_flop_per_byte == pytest.approx(
        llama.peak_flops_per_s / rtx.memory_bandwidth_bytes_per_s)
    datacenter = Deployment.build(model, h100, "q4_k_m", engine="llama.cpp-cuda")
    assert datacenter.peak_flops_per_s == h100.peak("fp16") and not datacenter.peak_note
    vllm = Deployment.build(model, rtx, engine="vllm")
    assert vllm.peak_flops_per_s == rtx.peak(vllm.compute_dtype) and not vllm.peak_note


def test_roofline_names_llama_cpp_cudas_own_ridge_on_a_geforce_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Asked of the card alone, the ridge is the spec sheet's, but on a GeForce card roofline
    also says where llama.cpp's fp16-accumulate matmuls meet it: twice as far out. Not on an
    H100, and not for an fp8 step (llama.cpp has none)."""
    from ridgeline.cli import main

    rtx = resolve_accelerator("rtx-4090")
    assert main(["roofline", "--gpu", "rtx-4090", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    catalog_ridge = rtx.peak("fp16") / rtx.memory_bandwidth_bytes_per_s
    assert data["ridge_flop_per_byte"] == pytest.approx(catalog_ridge)
    assert data["llama_cpp_cuda_ridge_flop_per_byte"] == pytest.approx(2 * catalog_ridge,
                                                                        rel=0.01)
    assert main(["roofline", "--gpu", "rtx-4090"]) == 0
    assert f"its ridge is at {2 * catalog_ridge:,.0f} FLOP/byte" in capsys.readouterr().out
    for argv in (["--gpu", "h100"], ["--gpu", "rtx-4090", "--compute-dtype", "fp8"]):
        assert main(["roofline", *argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["llama_cpp_cuda_ridge_flop_per_byte"] is None


def test_a_record_giving_memory_in_bytes_alone_states_it_in_gb() -> None:
    """A --gpu-file record with memory_bytes and no memory_size showed '0 GB = 10,000,000,000
    bytes'."""
    from ridgeline.hardware import Accelerator

    acc = Accelerator.from_record({"id": "x", "name": "X", "memory_bytes": 1e10,
                                   "memory_bandwidth_bytes_per_s": 1e12,
                                   "peak_flops": {"bf16": 1e14}})
    assert (acc.memory_size, acc.memory_unit) == (10.0, "GB")


def test_a_name_without_its_separators_finds_the_one_id_it_spells() -> None:
    assert resolve_accelerator("rtx4090").id == "rtx-4090"
    assert resolve_accelerator("H100SXM").id == "h100-sxm"


def test_an_implausible_flag_is_said_in_the_flags_units() -> None:
    """--bandwidth-gbs 1e12 was refused as 'memory bandwidth 1e+21 ... in base units'."""
    from ridgeline.hardware import custom_accelerator

    with pytest.raises(InputError, match=r"--bandwidth-gbs 1e\+12 is not a plausible figure "
                                         r"\(an H100 SXM: 3350"):
        custom_accelerator("c", 989.4, 1e12, 80)
    with pytest.raises(InputError, match=r"--peak-tflops 1e\+09"):
        custom_accelerator("c", 1e9, 3350, 80)
    assert custom_accelerator("c", 989.4, 3350, 80).memory_bandwidth_bytes_per_s == 3.35e12


def test_a_figure_with_its_own_source_is_cited_from_it(tmp_path: Path) -> None:
    """figure_sources gives one figure its own source: the ridge's --explain cites it for the
    peak and keeps the record's first source for the bandwidth; an unknown field is refused."""
    from ridgeline.roofline import ridge_step

    record = {"id": "my-card", "memory_bytes": 48 * GIB, "memory_bandwidth_bytes_per_s": 1e12,
              "peak_flops": {"bf16": 200e12}, "sources": ["our product page"],
              "figure_sources": {"peak_flops": "our whitepaper: its dense figures"}}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(record))
    acc = load_accelerator_file(str(path))
    cited = {i.name: i.source for i in ridge_step(acc, "bf16").inputs}
    assert cited == {"peak bf16 (dense)": "our whitepaper: its dense figures",
                     "memory bandwidth": "our product page"}
    path.write_text(json.dumps({**record, "figure_sources": {"peak_flop": "x"}}))
    with pytest.raises(InputError, match="figure_sources must be keyed by"):
        load_accelerator_file(str(path))


def _halved_sparse(notes: str) -> bool:
    """The notes call the tensor peaks a vendor's sparse figures halved, with no dense figure
    quoted beside them ('TF32 62.5 | 125*' quotes both)."""
    import re

    halved = re.compile(r"sparse[^.]*halved|halved[^.]*sparse|half (of |the )[^.]*sparse"
                        r"|sparse[^.]*dense = half", re.IGNORECASE)
    return any(halved.search(s) and " | " not in s for s in re.split(r"(?<=\.) ", notes))


def test_peaks_halved_from_sparse_figures_cite_how_they_were_had() -> None:
    """Where a record's notes say its peaks are a vendor's sparse figures halved, the peaks
    carry their own source saying so (÷ 2) or naming the document that prints them dense,
    not the first source alone (a product page that prints 1,979 beside an H100's 989.4)."""
    halved = [a for a in catalog().values() if _halved_sparse(a.notes)]
    assert len(halved) >= 10  # the H100s and H200s, Blackwell, L4, the professional cards
    for acc in halved:
        source = acc.source_of("peak_flops")
        assert source != acc.source, acc.id
        assert "÷ 2" in source or "dense" in source, acc.id


def test_the_catalog_shows_a_price_as_plan_bills_it(capsys: pytest.CaptureFixture[str]) -> None:
    """plan bills 4 L4s at 4 x $0.8048 = $3.22/h; a catalog showing $0.80 made that $3.20."""
    from ridgeline.cli import main

    assert main(["hardware", "l40s"]) == 0
    assert "price        $1.861 per device-hour" in capsys.readouterr().out
    assert main(["hardware"]) == 0
    l4_row = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("l4 "))
    assert l4_row.rstrip().endswith("$0.8048")


@pytest.mark.parametrize(("name", "card"), [
    ("A100-40G", "a100-sxm-40gb"), ("a100-80g", "a100-sxm-80gb"), ("H100 80G", "h100-sxm"),
    ("L40S-48G", "l40s"), ("rtx4090-24g", "rtx-4090"), ("MI300X 192GB", "mi300x"),
    ("a100-pcie-40g", "a100-pcie-40gb")])
def test_a_name_with_its_memory_size_finds_the_card_of_that_size(name: str, card: str) -> None:
    """'A100-40G' (G for GB) and a card named with the one size it comes in were unknown."""
    assert resolve_accelerator(name).id == card


def test_a_size_the_card_does_not_come_in_names_the_flag_for_a_smaller_one() -> None:
    with pytest.raises(InputError, match=r"v100-sxm-32gb comes with 32 GiB: `--gpu "
                                         r"v100-sxm-32gb --gpu-memory-gib 16`"):
        resolve_accelerator("v100-16g")
    with pytest.raises(InputError, match=r"^unknown accelerator 'h100-96g'; closest: [^;]*$"):
        resolve_accelerator("h100-96g")  # more than the card carries: no such H100

"""The China export parts (H800, A800) and the MI210 in the catalog, and card names that write
their memory size before the form ('A100-80GB-PCIe')."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline.cli import main
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from ridgeline.hardware import catalog, resolve_accelerator
from ridgeline.roofline import ridge_point
from ridgeline.units import GIB

NEW_PARTS = ("h800-sxm", "h800-pcie", "a800-sxm-80gb", "a800-pcie-80gb", "a800-pcie-40gb",
             "mi210")


def _raw_record(ident: str) -> dict[str, object]:
    """The record as the data file writes it, before the catalog reads it."""
    return next(r for r in load_data("accelerators/datacenter.json") if r["id"] == ident)


@pytest.mark.parametrize("ident", NEW_PARTS)
def test_each_new_part_loads_with_its_figures_sourced(ident: str) -> None:
    acc = catalog()[ident]
    assert acc.sources and acc.memory_unit == "GiB"
    # dense peaks, never the sparse: fp8 at most twice bf16, fp32 under bf16
    assert acc.peak("fp32") <= acc.peak("bf16")
    if acc.has("fp8"):
        assert acc.peak_flops["fp8"] <= 2.05 * acc.peak("bf16")
    # every peak has a source of its own, saying how the dense figure was had
    assert acc.source_of("peak_flops") != acc.source
    if acc.id.startswith("h800"):  # the H800 table prints sparse figures only
        assert "÷ 2" in acc.source_of("peak_flops")


@pytest.mark.parametrize("ident", NEW_PARTS)
def test_the_ridge_of_each_new_part_is_its_recorded_peak_over_its_bandwidth(
        ident: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The ridge `hardware --json` prints is the data file's bf16 peak ÷ its bandwidth."""
    record = _raw_record(ident)
    peaks = record["peak_flops"]
    assert isinstance(peaks, dict)
    bandwidth = record["memory_bandwidth_bytes_per_s"]
    assert isinstance(bandwidth, float)
    assert main(["hardware", ident, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ridge_flop_per_byte"]["bf16"] == pytest.approx(peaks["bf16"] / bandwidth)
    assert shown["ridge_flop_per_byte"]["bf16"] == pytest.approx(
        ridge_point(catalog()[ident].peak("bf16"), catalog()[ident].memory_bandwidth_bytes_per_s))


def test_the_h800_is_an_h100_sxm_with_less_than_half_its_nvlink() -> None:
    """Same memory, bandwidth and tensor rates (to the datasheets' rounding); NVLink 400 GB/s
    both ways against 900."""
    h800, h100 = resolve_accelerator("h800"), resolve_accelerator("h100")
    assert h800.memory_bytes == h100.memory_bytes == 80 * GIB
    assert h800.smi_total_bytes == h100.smi_total_bytes
    assert h800.memory_bandwidth_bytes_per_s == h100.memory_bandwidth_bytes_per_s
    for dtype in ("tf32", "bf16", "fp16", "fp8", "int8"):
        assert h800.peak(dtype) == pytest.approx(h100.peak(dtype), rel=1e-3), dtype
    assert h800.link_bytes_per_s is not None and h100.link_bytes_per_s is not None
    assert 2 * h800.link_bytes_per_s == pytest.approx(400e9)
    assert h800.link_bytes_per_s < h100.link_bytes_per_s / 2


@pytest.mark.parametrize(("a800", "a100"), [
    ("a800-sxm-80gb", "a100-sxm-80gb"), ("a800-pcie-80gb", "a100-pcie-80gb"),
    ("a800-pcie-40gb", "a100-pcie-40gb")])
def test_each_a800_computes_and_reads_memory_as_its_a100(a800: str, a100: str) -> None:
    new, old = catalog()[a800], catalog()[a100]
    assert dict(new.peak_flops) == dict(old.peak_flops)
    assert new.memory_bytes == old.memory_bytes
    assert new.memory_bandwidth_bytes_per_s == old.memory_bandwidth_bytes_per_s


def test_the_a800_sxm_nvlink_is_two_thirds_of_the_a100s() -> None:
    a800, a100 = catalog()["a800-sxm-80gb"], catalog()["a100-sxm-80gb"]
    assert a800.link_kind == a100.link_kind == "nvlink3"
    assert a800.link_bytes_per_s is not None and a100.link_bytes_per_s is not None
    assert a800.link_bytes_per_s == pytest.approx(a100.link_bytes_per_s * 400 / 600)


def test_the_mi210_is_one_mi250_die_on_a_card() -> None:
    """104 CUs, half an MI250's 208: half its peaks and bandwidth, one device to ROCm."""
    mi210, mi250 = resolve_accelerator("mi210"), resolve_accelerator("mi250")
    assert mi210.runtime_devices == 1 and mi250.runtime_devices == 2
    assert mi210.memory_bytes == mi250.memory_bytes / 2 == 64 * GIB
    assert mi210.memory_bandwidth_bytes_per_s == pytest.approx(
        mi250.memory_bandwidth_bytes_per_s / 2)
    for dtype in ("bf16", "fp16", "int8", "fp32"):
        assert mi210.peak(dtype) == pytest.approx(mi250.peak(dtype) / 2, rel=0.01), dtype


@pytest.mark.parametrize(("name", "ident"), [
    ("H800", "h800-sxm"), ("h800-sxm5", "h800-sxm"), ("NVIDIA H800", "h800-sxm"),
    ("NVIDIA H800 80GB HBM3", "h800-sxm"), ("h800-80gb", "h800-sxm"),
    ("NVIDIA H800 PCIe", "h800-pcie"), ("h800 pcie", "h800-pcie"),
    ("a800", "a800-sxm-80gb"), ("A800-80GB", "a800-sxm-80gb"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb"), ("NVIDIA A800 80GB PCIe", "a800-pcie-80gb"),
    ("a800-40gb", "a800-pcie-40gb"), ("a800 pcie 40gb", "a800-pcie-40gb"),
    ("mi210", "mi210"), ("AMD Instinct MI210", "mi210"), ("MI210-64G", "mi210")])
def test_the_new_parts_answer_to_the_names_users_and_their_tools_write(
        name: str, ident: str) -> None:
    assert resolve_accelerator(name).id == ident


def test_a800_pcie_without_a_size_is_ambiguous_as_a100_pcie_is() -> None:
    for name in ("a800-pcie", "a100-pcie"):
        with pytest.raises(InputError, match="ambiguous"):
            resolve_accelerator(name)


@pytest.mark.parametrize(("name", "ident"), [
    ("a100-80gb-pcie", "a100-pcie-80gb"), ("A100 80GB PCIe", "a100-pcie-80gb"),
    ("a100-40gb-pcie", "a100-pcie-40gb"), ("a100-80gb-sxm", "a100-sxm-80gb"),
    ("a100-40gb-sxm4", "a100-sxm-40gb"), ("h100-80gb-pcie", "h100-pcie"),
    ("h100-80gb-sxm", "h100-sxm"), ("a100-80g-pcie", "a100-pcie-80gb"),
    ("a800-80gb-pcie", "a800-pcie-80gb"), ("h800-80gb-pcie", "h800-pcie"),
    ("mi300x-192gb-oam", "mi300x")])
def test_a_size_written_before_the_form_reads_as_the_catalog_writes_it_last(
        name: str, ident: str) -> None:
    """'a100-80gb-pcie' was unknown, its closest list naming a100-pcie-80gb third."""
    assert resolve_accelerator(name).id == ident


@pytest.mark.parametrize(("name", "ident"), [
    ("a100-80gb", "a100-sxm-80gb"), ("a100-40gb", "a100-sxm-40gb"), ("h100-80gb", "h100-sxm"),
    ("a100", "a100-sxm-80gb"), ("A100-80G", "a100-sxm-80gb")])
def test_a_name_ending_in_its_size_keeps_the_card_it_named(name: str, ident: str) -> None:
    assert resolve_accelerator(name).id == ident


def test_every_size_last_alias_written_size_first_finds_its_own_card() -> None:
    """Every id and alias that ends in its size ('a100-sxm4-80gb'), written card, size, rest
    ('a100-80gb-sxm4'), resolves to the same card."""
    size_last = re.compile(r"(?P<card>[a-z0-9]+)[ -](?P<rest>.+?)[ -](?P<size>\d+gb)")
    checked = 0
    for acc in catalog().values():
        for alias in (acc.id, *acc.aliases):
            m = size_last.fullmatch(alias)
            if m:
                assert resolve_accelerator(f"{m['card']}-{m['size']}-{m['rest']}").id == acc.id
                checked += 1
    assert checked >= 20


def test_a_size_first_name_the_card_does_not_come_in_names_the_flag_as_size_last_does() -> None:
    with pytest.raises(InputError, match=r"^unknown accelerator 'v100-16gb-sxm2'; .*"
                                         r"`--gpu v100-sxm-32gb --gpu-memory-gib 16`"):
        resolve_accelerator("v100-16gb-sxm2")
    with pytest.raises(InputError, match=r"^unknown accelerator 'h100-96gb-sxm'; closest: [^;]*$"):
        resolve_accelerator("h100-96gb-sxm")

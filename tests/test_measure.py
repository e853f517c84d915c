"""`ridgeline measure` on the CPU with tiny shapes (skipped, saying why, without PyTorch);
its outputs, their names and the next step it prints, without PyTorch."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ridgeline.cli import main
from ridgeline.cli_measure import FP8_GPUS
from ridgeline.config_reader import spec_from_hf_config
from ridgeline.errors import InputError

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None,
                                 reason="PyTorch is an optional extra (ridgeline[measure])")

TINY: dict[str, Any] = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
}


def refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad input: one line on stderr naming ``message``, exit 2, no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def tiny_config(tmp_path: Path) -> str:
    """TINY written as ``config.json`` in ``tmp_path``: the path to give ``--model``."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    return str(config)


def build(config: dict[str, Any]) -> Any:
    from ridgeline.torch_model import RandomModel

    return RandomModel.build(spec_from_hf_config(config, "tiny"))


@needs_torch
def test_a_gqa_model_decodes_against_its_cache() -> None:
    model = build(TINY)
    cache = model.kv_cache(batch=3, context=10)
    assert cache[0][0].shape == (3, 2, 11, 16)  # [batch, kv heads, tokens + 1 free, head_dim]
    logits = model.step(torch.zeros(3, 1, dtype=torch.long), cache)
    assert logits.shape == (3, 256)
    prefill = model.step(torch.zeros(1, 12, dtype=torch.long), None)
    assert prefill.shape == (1, 256)


@needs_torch
def test_moe_runs_only_the_experts_a_batch_picks() -> None:
    config = {**TINY, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    model = build(config)
    assert model.layers[0]["up"].shape == (8, 2 * 128, 64)  # gate and value, per expert
    assert model.layers[0]["down"].shape == (8, 64, 128)
    model.grouped = False  # the loop: one matmul per picked expert
    assert model.step(torch.zeros(2, 1, dtype=torch.long), model.kv_cache(2, 5)).shape == (2, 256)


@needs_torch
def test_sliding_window_layers_keep_only_their_window() -> None:
    config = {**TINY, "model_type": "mistral", "sliding_window": 8}
    model = build(config)
    assert model.kv_cache(1, 100)[0][0].shape[2] == 8  # window − 1 cached + the new token


@needs_torch
def test_mla_and_ssm_models_are_refused_clearly() -> None:
    from ridgeline.catalog import resolve_model
    from ridgeline.torch_model import check_buildable

    for name in ("deepseek-v3", "jamba-1.5-mini"):
        with pytest.raises(InputError, match="not built"):
            check_buildable(resolve_model(name))


@needs_torch
def test_probes_measure_something_real() -> None:
    from ridgeline.device_probes import bandwidth_probes, matmul_probes

    dev = torch.device("cpu")
    bw = bandwidth_probes(torch, dev, 8 * 2**20)
    assert all(p.value > 1e8 for p in bw)  # more than 0.1 GB/s
    mm = matmul_probes(torch, dev, ["float32"], 128, (1, 4))
    assert len(mm) == 3 and all(p.value > 1e6 for p in mm)


@needs_torch
def test_the_fp8_probe_runs_scaled_matmuls_or_says_why_not() -> None:
    from ridgeline.device_probes import fp8_matmul_probes

    probes = fp8_matmul_probes(torch, torch.device("cpu"), 64, (16,))
    if probes[0].value == 0:  # a torch without fp8 kernels on this device
        assert "unsupported" in probes[0].detail
    else:
        assert [p.name for p in probes] == ["float8_e4m3fn matmul 64³", "float8_e4m3fn matmul M=16"]
        assert all(p.value > 0 for p in probes)


@needs_torch
def test_the_grid_skips_what_the_device_cannot_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A cache larger than the device's free memory is skipped with its size, not allocated."""
    from ridgeline import measure as m
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.torch_model import RandomModel

    spec = spec_from_hf_config(TINY, "tiny")
    one = RandomModel.cache_bytes(spec, 1, 128, 4)
    assert one == 2 * 2 * 16 * (128 + 1) * 2 * 4  # K and V, 2 heads × 16 dims, 2 layers, fp32
    # room for batch 1 at 128 tokens only
    monkeypatch.setattr(m, "device_memory_bytes", lambda torch, device: 2.0 * one)
    config = tiny_config(tmp_path)
    result = m.measure("cpu", True, config)
    decode = [r for r in result.rows if r["metric"] != "prefill_tok_s"]
    assert [(r["batch"], r["context_len"]) for r in decode] == [("1", "129")]
    assert sum("the cache needs" in s for s in result.skipped) == 3


@needs_torch
def test_measure_writes_rows_that_validate(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tiny_config(tmp_path)
    rows = tmp_path / "rows.csv"
    assert main(["measure", "--device", "cpu", "--quick", "--model", config, "-o",
                 str(rows)]) == 0
    table = list(csv.DictReader(rows.open()))
    assert {r["metric"] for r in table} == {"decode_tok_s_per_user", "output_throughput_tok_s",
                                            "prefill_tok_s"}
    assert all(r["engine"] == "torch-eager" and float(r["value"]) > 0 for r in table)
    out = capsys.readouterr().out
    # a CPU's square matmul at two sizes: its peak is reached at neither size alone
    assert "float32 matmul 1024³" in out and "float32 matmul 2048³" in out
    record = str(rows).replace(".csv", ".accelerator.json")
    assert main(["validate", str(rows), "--gpu-file", record, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(r["predicted"] for r in data["rows"])


@needs_torch
def test_a_graph_replayed_step_gets_its_own_row_or_says_why_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA graphs need a GPU; here the capture is stood in for, once working and once
    failing, to pin what each outcome leaves in the result."""
    from functools import partial

    from ridgeline import measure as m

    model = build(TINY)
    step = partial(model.step, torch.zeros(2, 1, dtype=torch.long), model.kv_cache(2, 16))
    row = partial(m._decode_row, "tiny", "f32", "cpu-test", 2, 16, notes="n",
                  engine="torch-cudagraph")
    result = m.MeasureResult("cpu", "test")
    monkeypatch.setattr(m, "graph_replay", lambda torch, fn: fn)
    assert m._graph_row(torch, torch.device("cpu"), step, result, row)
    (added,) = result.rows
    assert added["engine"] == "torch-cudagraph" and added["id"].endswith("-graph")
    assert added["metric"] == "output_throughput_tok_s" and float(added["value"]) > 0

    def fails(torch: Any, fn: Any) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing\ndetail")

    monkeypatch.setattr(m, "graph_replay", fails)
    assert not m._graph_row(torch, torch.device("cpu"), step, result, row)
    assert len(result.rows) == 1
    assert result.skipped == ["CUDA-graph decode: capture failed (operation not permitted when "
                              "stream is capturing)"]


@needs_torch
def test_the_grid_and_the_probes_can_be_chosen(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = tiny_config(tmp_path)
    rows = tmp_path / "rows.csv"
    assert main(["measure", "--model", config, "--batches", "1,3", "--contexts", "40",
                 "--skip-probes", "-o", str(rows)]) == 0
    out = capsys.readouterr().out
    assert "bandwidth" not in out and "no device record" in out
    assert not (tmp_path / "rows.accelerator.json").exists()
    table = list(csv.DictReader(rows.open()))
    assert [(r["metric"], r["batch"], r["context_len"]) for r in table] == [
        ("decode_tok_s_per_user", "1", "41"), ("output_throughput_tok_s", "3", "41"),
        ("prefill_tok_s", "1", "40")]
    for bad, message in ((["--batches", "0"], "batch must be positive"),
                         (["--contexts", "1,,2"], "empty entry"),
                         (["--batches", "2000000"], "batch")):
        refused(["measure", "--model", config, *bad, "-o", str(rows)], message, capsys)


@needs_torch
def test_a_windowed_layer_prefills_as_a_band_of_the_full_causal_attention() -> None:
    """The chunked windowed prefill equals full attention under a band mask (each position
    sees itself and the window − 1 before it), and differs from plain causal attention."""
    model = build({**TINY, "model_type": "mistral", "sliding_window": 8})
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 29, 16), torch.randn(2, 2, 29, 16), torch.randn(2, 2, 29, 16)
    pos = torch.arange(29)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 8)
    full = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), attn_mask=band)
    windowed = model._attend_windowed(q, k, v, 8)
    assert torch.allclose(windowed, full, atol=1e-5)
    assert not torch.allclose(windowed, model._attend(q, k, v, causal=True), atol=1e-3)
    assert model.step(torch.zeros(1, 29, dtype=torch.long), None).shape == (1, 256)


@needs_torch
def test_grouped_experts_compute_what_one_matmul_per_expert_does() -> None:
    """The grouped path (torch._grouped_mm, capturable in a CUDA graph) against the loop,
    and an expert nobody picked is never read: changing its weights changes nothing."""
    from ridgeline.torch_model import grouped_mm_runs

    if not grouped_mm_runs(torch, torch.device("cpu"), torch.float32):
        pytest.skip("this torch has no CPU torch._grouped_mm")
    config = {**TINY, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    model = build(config)
    assert model.grouped
    p = model.layers[0]
    p["up"].normal_(), p["down"].normal_()  # magnitudes well above rounding
    torch.manual_seed(5)
    x = torch.randn(6, 64)
    weights, chosen = (x @ p["router"].T).topk(2, dim=-1)
    weights = weights.softmax(dim=-1)
    grouped = model._experts_grouped(p, x, weights, chosen)
    looped = model._experts_looped(p, x, weights, chosen)
    assert torch.allclose(grouped, looped, rtol=1e-4, atol=1e-3)
    unpicked = sorted(set(range(8)) - set(chosen.unique().tolist()))
    if unpicked:
        p["up"][unpicked[0]] += 100.0
        assert torch.equal(model._experts_grouped(p, x, weights, chosen), grouped)
    assert model.step(torch.zeros(3, 1, dtype=torch.long), model.kv_cache(3, 4)).shape == (3, 256)


@needs_torch
def test_fp8_weights_run_through_scaled_matmuls_and_say_so_in_the_rows(tmp_path: Path) -> None:
    """--fp8: the linear weights in e4m3 (a quarter of f32's bytes), products within e4m3's
    rounding of the full-precision ones; rows name fp8 weights and the cache's own dtype."""
    from ridgeline.torch_model import RandomModel

    spec = spec_from_hf_config(TINY, "tiny")
    full, fp8 = RandomModel.build(spec), RandomModel.build(spec, fp8=True)
    weight = fp8.layers[0]["qkv"]
    assert weight.dtype == torch.float8_e4m3fn and weight.element_size() == 1
    assert full.layers[0]["qkv"].element_size() == 4
    assert fp8.lm_head.dtype == torch.float32  # the LM head stays in the model's dtype
    x = torch.randn(5, 64)
    exact = x @ weight.float().T
    error = (fp8._mm(x, weight) - exact).norm() / exact.norm()
    assert 0 < error < 0.1  # e4m3 inputs: a few per cent, never exact
    # the command takes --fp8 on an sm_89+ GPU only; the harness itself runs tiny shapes here
    from ridgeline import measure as m

    table = m.measure("cpu", True, tiny_config(tmp_path), batches=(2,), contexts=(16,),
                      probes=False, fp8=True).rows
    assert {(r["weights_dtype"], r["kv_dtype"]) for r in table} == {("fp8", "f32")}
    assert all(r["id"].endswith("-wfp8") and "fp8 e4m3" in r["notes"] for r in table)


def test_fp8_is_refused_off_a_gpu_before_anything_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU's torch._scaled_mm is a reference loop (a 1B model's decode step took over a
    minute) and only an fp8 GPU gets an fp8 probe: --fp8 elsewhere is one line, exit 2,
    before PyTorch is imported (so without it too); an MoE model is refused as not built."""
    config, rows = tiny_config(tmp_path), tmp_path / "rows.csv"
    for device in ("cpu", "mps"):
        refused(["measure", "--model", config, "--fp8", "--device", device, "-o", str(rows)],
                f"--fp8 needs an fp8 GPU (--device cuda: {FP8_GPUS}): on {device} ", capsys)
    moe = tmp_path / "moe.json"
    moe.write_text(json.dumps({**TINY, "model_type": "mixtral", "num_local_experts": 4,
                               "num_experts_per_tok": 2}))
    refused(["measure", "--model", str(moe), "--fp8", "--device", "cuda", "-o", str(rows)],
            "dense models only", capsys)
    assert not rows.exists()


@pytest.mark.parametrize("card", ["a100", "v100", "t4", "mi250x"])
def test_fp8_with_a_card_that_has_no_fp8_matmuls_is_refused_dry_run_included(
        card: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An A100, V100, T4 or MI250X has no fp8 peak in the catalog: the dry run had promised
    ten fp8 rows for it (an audit found), which the run could never write. One line, exit 2,
    the help naming the same GPUs as the refusal; a card with fp8 (an MI300X) is planned."""
    from ridgeline.hardware import resolve_accelerator

    rows = tmp_path / "rows.csv"
    acc = resolve_accelerator(card)
    assert not acc.has("fp8")
    for dry in (["--dry-run"], []):
        refused(["measure", *dry, "--device", "cuda", "--card", card, "--fp8", "--quick",
                 "-o", str(rows)], f"--fp8: {acc.id} has no fp8 matmuls", capsys)
    assert not rows.exists()
    assert main(["measure", "--dry-run", "--device", "cuda", "--card", "mi300x", "--fp8",
                 "--quick", "-o", str(rows)]) == 0
    assert "fp8 linear weights" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    assert " ".join(FP8_GPUS.split()) in " ".join(capsys.readouterr().out.split())


@needs_torch
def test_a_grid_the_device_cannot_hold_is_refused_before_it_allocates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt too long for memory is skipped like a cache too large; a grid with nothing
    left is a one-line error, exit 2; a device torch cannot name is refused at once."""
    config = tiny_config(tmp_path)
    rows = tmp_path / "rows.csv"
    for argv, message in (
            (["--contexts", "1000000000000", "--skip-probes"], "nothing in the grid fits"),
            (["--device", "gpu0"], "unknown device 'gpu0'"),
            (["--gpu-id", ""], "--gpu-id is empty"),
            (["--gpu-id", "H200"], "--gpu-id 'H200' is the catalog's h200-sxm"),
            (["--rated-gpu", "h2000"], "unknown accelerator")):
        refused(["measure", "--model", config, *argv, "-o", str(rows)], message, capsys)
    from ridgeline.config_reader import spec_from_hf_config
    from ridgeline.torch_model import RandomModel

    spec = spec_from_hf_config(TINY, "tiny")
    # the hidden state, Q/K/V, attention output and gated MLP of 1,000 tokens, fp32, × 1.5
    per_token = 3 * 64 + (4 + 2 * 2) * 16 + 4 * 16 + 4 * 128
    assert RandomModel.prefill_bytes(spec, 1000, 4) == int(1.5 * 4 * 1000 * per_token)


@needs_torch
def test_the_device_record_holds_the_memory_the_runtime_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not a default of 80 GiB whatever the card: the runtime's figure (a CPU's RAM here),
    or --memory-gib where given."""
    import os

    config = tiny_config(tmp_path)
    rows = tmp_path / "rows.csv"
    record = tmp_path / "rows.accelerator.json"
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert main(["measure", "--model", config, "--quick", "--batches", "1", "--contexts",
                 "8", "-o", str(rows)]) == 0
    assert json.loads(record.read_text())["memory_bytes"] == ram
    assert "as the runtime reports it" in capsys.readouterr().out
    assert main(["measure", "--model", config, "--quick", "--batches", "1", "--contexts",
                 "8", "--memory-gib", "24", "-o", str(rows)]) == 0
    assert json.loads(record.read_text())["memory_bytes"] == 24 * 2**30


def test_a_probe_below_one_unit_keeps_three_figures() -> None:
    """A CPU's skinny matmul at 0.00421 TFLOP/s printed as 0.00: three significant figures
    below 1, two decimals from 1 up."""
    from ridgeline.reports.measure import probe_figure

    assert [probe_figure(v) for v in (0.00421, 0.0672, 0.904, 8.363, 4324.0)] == [
        "0.00421", "0.0672", "0.904", "8.36", "4,324.00"]


def stand_in_measure(device: str, quick: bool, model: str, dtype: str | None,
                     gpu_id: str | None, batches: Any, contexts: Any, probes: bool,
                     fp8: bool, sink: Any = None) -> Any:
    """The minutes of measuring stood in for (no PyTorch): the probes ``probe_device`` runs
    for the device and dtype, named as it names them, and rows from measure's own builders."""
    from functools import partial

    from ridgeline import measure as m
    from ridgeline.device_probes import Probe, matmul_dtypes

    kind = device.split(":")[0]
    dt = dtype or ("float32" if kind == "cpu" else "bfloat16")
    gid = gpu_id or f"measured-{kind}"
    result = m.MeasureResult(device, "stand-in", memory_bytes=16 * 2**30, gpu_id=gid)
    if probes:
        result.probes = [Probe("copy bandwidth", 2e10, "256 MiB copied"),
                         *(Probe(f"{d} matmul 1024³", 1e11, "square")
                           for d in matmul_dtypes(kind, dt))]
    w = m._WEIGHTS[dt]
    decode = partial(m._decode_row, model, w, gid, notes="random weights",
                     engine="torch-eager", kv=w)
    for context, prefill_tok_s in ((128, 4e4), (512, 1.2e5)):  # the quick grid's
        result.rows += [decode(1, context, 2.5e-3), decode(4, context, 2.7e-3),
                        m._row(model, w, gid, 1, context, 0, context, "prefill_tok_s",
                               prefill_tok_s, "tok/s", "random weights", kv=w)]
    return result


def stand_in_for_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure`` stood in for by ``stand_in_measure``."""
    from ridgeline import measure as m

    monkeypatch.setattr(m, "measure", stand_in_measure)


def next_step(out: str) -> list[str]:
    """The command measure's last line says to run next, as argv for ``main``."""
    import shlex

    argv = shlex.split(out.strip().splitlines()[-1].split("next: ", 1)[1])
    assert argv[:2] == ["ridgeline", "validate"]
    return argv[1:]


@pytest.mark.parametrize(("device", "dtype", "peaks"), [
    ("cpu", None, {"fp32"}),  # a CPU's f32 cache: attention priced at fp32 too
    ("cpu", "bfloat16", {"bf16"}),
    ("cpu", "float16", {"fp16"}),
    ("cuda:1", None, {"bf16", "fp16"}),
    ("cuda", "float32", {"fp32", "bf16", "fp16"}),
])
def test_the_next_step_measure_prints_validates_and_calibrates(
        device: str, dtype: str | None, peaks: set[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The record holds a peak for every matmul the rows are priced at (the weights' and
    the cache's attention), so the printed `validate` predicts every row and `calibrate`
    fits them: a CPU-only machine completes measure → validate → calibrate."""
    stand_in_for_measuring(monkeypatch)
    rows = tmp_path / "rows.csv"
    argv = ["measure", "--device", device, "--model", tiny_config(tmp_path), "-o", str(rows)]
    assert main([*argv, *(["--dtype", dtype] if dtype else [])]) == 0
    validate = next_step(capsys.readouterr().out)
    record = tmp_path / "rows.accelerator.json"
    assert validate == ["validate", str(rows), "--gpu-file", str(record)]
    assert set(json.loads(record.read_text())["peak_flops"]) == peaks
    assert main([*validate, "--json"]) == 0
    assert all(r["predicted"] for r in json.loads(capsys.readouterr().out)["rows"])
    assert main(["calibrate", str(rows), "--gpu-file", str(record), "-o",
                 str(tmp_path / "profile.json")]) == 0
    assert "torch-eager" in json.loads((tmp_path / "profile.json").read_text())["engines"]


def test_the_device_record_lands_beside_the_rows_whatever_their_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rows.csv → rows.accelerator.json; a name without .csv keeps all of itself, and a dot
    in a folder's name never moves the record out of the folder."""
    from ridgeline.measure import record_path

    for rows, record in (("rows.csv", "rows.accelerator.json"),
                         ("RUN.CSV", "RUN.accelerator.json"),
                         ("./rows", "rows.accelerator.json"),
                         ("x.v2/rows", "x.v2/rows.accelerator.json"),
                         ("run.2024", "run.2024.accelerator.json")):
        assert record_path(Path(rows)) == Path(record)
    stand_in_for_measuring(monkeypatch)
    (tmp_path / "x.v2").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["measure", "--model", tiny_config(tmp_path), "-o", "x.v2/rows"]) == 0
    assert main(["measure", "--model", tiny_config(tmp_path), "-o", "./rows"]) == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "config.json", "rows", "rows.accelerator.json", "x.v2", "x.v2/rows",
        "x.v2/rows.accelerator.json"]
    assert main(next_step(capsys.readouterr().out)) == 0


@pytest.mark.parametrize("name", ["x.json", "rows.txt", "rows.html"])
def test_an_output_named_for_another_format_is_refused_dry_run_included(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o x.json had been given CSV rows (a dry run promised them; an audit found), where
    page's -o and validate's --plot refuse a suffix not theirs. One line, exit 2, nothing
    written; the names the test above keeps (no suffix, run.2024, RUN.CSV) still plan."""
    for dry in (["--dry-run"], []):
        refused(["measure", *dry, "--device", "cpu", "-o", str(tmp_path / name)],
                f"-o takes a .csv file (the rows are CSV), got {str(tmp_path / name)!r}",
                capsys)
    assert list(tmp_path.iterdir()) == []
    for kept in ("RUN.CSV", "rows", "run.2024"):
        assert main(["measure", "--dry-run", "--device", "cpu", "-o",
                     str(tmp_path / kept)]) == 0
        capsys.readouterr()


def test_measure_overwrites_only_what_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An existing CSV that is not measure's rows, or a record beside it that is not
    measure's, is refused before measuring (one line, exit 2) and left as it was; measure's
    own rows and record are measured over again."""
    stand_in_for_measuring(monkeypatch)
    config = tiny_config(tmp_path)
    precious = tmp_path / "precious.csv"
    precious.write_text("id,model,metric,value\nmine,llama-3.1-8b,ttft_ms,12\n")
    refused(["measure", "--model", config, "-o", str(precious)],
            "exists and is not rows `ridgeline measure` wrote: not overwriting", capsys)
    refused(["measure", "--model", config, "-o", config], "not overwriting", capsys)
    assert precious.read_text().startswith("id,model,metric")
    rows, record = tmp_path / "rows.csv", tmp_path / "rows.accelerator.json"
    card = json.dumps({"id": "lab-card", "vendor": "nvidia", "peak_flops": {"bf16": 1e15}})
    record.write_text(card)
    refused(["measure", "--model", config, "-o", str(rows)],
            "(the device record beside -o", capsys)
    assert not rows.exists() and record.read_text() == card
    # --skip-probes writes no record, so another file there is not in the way
    assert main(["measure", "--model", config, "--skip-probes", "-o", str(rows)]) == 0
    assert "give --gpu-file a record of measured-cpu" in capsys.readouterr().out
    assert record.read_text() == card
    record.unlink()
    for _ in range(2):  # its own rows and record, written again
        assert main(["measure", "--model", config, "-o", str(rows)]) == 0
    capsys.readouterr()
    # rows without probes, beside the record an earlier run wrote: that record is the next step
    assert main(["measure", "--model", config, "--skip-probes", "-o", str(rows)]) == 0
    assert main(next_step(capsys.readouterr().out)) == 0


def test_a_device_that_is_not_there_is_named_as_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--device cuda:1 is refused as cuda:1, not as 'cuda'; an index past the visible GPUs
    says which are visible. torch stood in for: the refusal comes before any device work."""
    from types import SimpleNamespace

    from ridgeline import measure as m

    def fake_torch(count: int) -> Any:
        def device(text: str) -> Any:
            kind, _, index = text.partition(":")
            return SimpleNamespace(type=kind, index=int(index) if index else None)

        return SimpleNamespace(device=device, cuda=SimpleNamespace(
            is_available=lambda: count > 0, device_count=lambda: count))

    config, rows = tiny_config(tmp_path), str(tmp_path / "rows.csv")
    for count, device, message in ((0, "cuda:1", "--device cuda:1: no CUDA device is visible"),
                                   (1, "cuda:1", "--device cuda:1: only cuda:0 is visible"),
                                   (2, "cuda:3", "--device cuda:3: only cuda:0 to cuda:1 are")):
        monkeypatch.setattr(m, "import_torch", lambda count=count: fake_torch(count))
        refused(["measure", "--device", device, "--model", config, "-o", rows], message, capsys)
    assert not Path(rows).exists()


def test_the_weights_measure_refuses_are_the_one_formula_of_params_times_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The "does not fit" check weighs the weights with precision.weight_bytes_at, as the model
    table does, not a product of its own: the figure it states is that function's, and moves
    with it. torch stood in for: the refusal comes before any device work."""
    from types import SimpleNamespace

    from ridgeline import measure as m
    from ridgeline.catalog import resolve_model
    from ridgeline.params import count_params
    from ridgeline.precision import weight_bytes_at

    cpu = SimpleNamespace(device=lambda text: SimpleNamespace(type=text, index=None))
    monkeypatch.setattr(m, "import_torch", lambda: cpu)
    monkeypatch.setattr(m, "device_total_bytes", lambda torch, device: 1e9)
    params = count_params(resolve_model("llama-3.2-1b")).total
    rows = str(tmp_path / "rows.csv")
    for scale in (1, 3):
        monkeypatch.setattr(m, "weight_bytes_at", lambda p, b, s=scale: s * weight_bytes_at(p, b))
        weights = scale * weight_bytes_at(params, m.DTYPE_BYTES["float32"])
        refused(["measure", "--model", "llama-3.2-1b", "--skip-probes", "-o", rows],
                f"{weights / 1e9:,.1f} GB of float32 weights exceed", capsys)

"""How a measurements row's cells and notes are read: one spelling per engine, the
parallelism stated, engine settings in the forms engines print them, and the rows a CSV
holds, whatever characters its notes carry."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.measurements import COLUMNS, Measurement, parse_row, read_measurements
from ridgeline.predict import predict

ROW = {"id": "r1", "model": "llama-3.1-8b", "weights_dtype": "bf16", "kv_dtype": "bf16",
       "gpu": "h100", "num_gpus": "1", "tp": "1", "batch": "8", "input_len": "1000",
       "output_len": "128", "context_len": "1128", "metric": "decode_tok_s_per_user",
       "value": "50", "unit": "tok/s", "engine": "vllm", "source": "x", "notes": ""}
KV = {**ROW, "metric": "kv_cache_tokens", "unit": "tokens", "value": "300000", "batch": "",
      "input_len": "", "output_len": "", "context_len": "8192"}


def row(**changes: str) -> Measurement:
    return parse_row({**ROW, **changes})


@pytest.mark.parametrize("spelled", ["vLLM", "VLLM", " vllm "])
def test_an_engine_reads_the_same_however_it_is_capitalised(spelled: str) -> None:
    """A KV row's version, prefix caching and backend rules key on the engine's name: 'vLLM'
    had lost its stated version and moved a prediction by 40 %."""
    notes = "engine: vLLM v0.6.3 V0; gpu_memory_utilization 0.9"
    lower = predict(parse_row({**KV, "notes": notes}))
    cased = parse_row({**KV, "engine": spelled, "notes": notes})
    assert cased.engine == "vllm"
    assert predict(cased).predicted == lower.predicted is not None
    assert parse_row({**ROW, "engine": "TensorRT-LLM"}).engine == "trtllm"


def test_the_tensor_parallel_degree_of_several_gpus_must_be_stated() -> None:
    """Eight GPUs with no tp had been priced as TP1 over eight pipeline stages, 4.7× slower
    than the TP8 the row most likely ran; eight GPUs of tp 8 with num_gpus left out are 8."""
    with pytest.raises(ValueError, match="tp is empty but num_gpus is 8"):
        row(num_gpus="8", tp="")
    assert (row(num_gpus="", tp="8").num_gpus, row(num_gpus="", tp="8").tp) == (8, 8)
    assert row(num_gpus="", tp="").num_gpus == 1


def test_a_ttft_under_load_is_not_priced_as_one_prompt_alone() -> None:
    with pytest.raises(ValueError, match="ttft_ms is one prompt's prefill alone"):
        row(metric="ttft_ms", unit="ms", batch="32", output_len="1", context_len="1000")
    assert row(metric="ttft_ms", unit="ms", batch="1", output_len="1",
               context_len="1000").batch == 1


@pytest.mark.parametrize("notes", [
    "gpu_memory_utilization 0.7", "vllm serve --gpu-memory-utilization 0.70",
    "non-default args: {'gpu_memory_utilization': 0.7}", "GPU memory utilization 0.7.",
    "gpu_memory_utilization=7e-1"])
def test_settings_are_read_as_engines_print_them(notes: str) -> None:
    """The flag, vLLM's start-up log and prose had fallen back to the default 0.9 unread."""
    assert row(notes=notes).setting_number("gpu_memory_utilization") == pytest.approx(0.7)


def test_memory_in_mib_is_converted_and_an_implausible_total_refused() -> None:
    """nvidia-smi prints MiB: '81559MiB' had been read as 81,559 GiB (601 million tokens)."""
    assert row(notes="total_gpu_memory 81559MiB").setting_number("total_gpu_memory") == \
        pytest.approx(81559 / 1024)
    assert row(notes="total_gpu_memory=80GB").setting_number("total_gpu_memory") == 80
    tiny = predict(parse_row({**KV, "engine": "sglang", "notes": "total_gpu_memory 0.001 GiB"}))
    assert tiny.predicted is None and "a device's memory is 0.5" in tiny.reason


@pytest.mark.parametrize("notes, name", [("n_ubatch 1.5", "n_ubatch"),
                                         ("block_size 0", "block_size"),
                                         ("max_num_seqs 2.5", "max_num_seqs")])
def test_a_count_in_the_notes_must_be_whole(notes: str, name: str) -> None:
    with pytest.raises(InputError, match=f"{name} in the notes must be a whole number"):
        row(notes=notes).setting_count(name)
    assert row(notes="max_num_seqs 256").setting_count("max_num_seqs") == 256


def test_a_malformed_number_in_the_notes_is_refused() -> None:
    with pytest.raises(InputError, match="not a number"):
        row(notes="gpu_memory_utilization 0.9.1").setting_number("gpu_memory_utilization")


@pytest.mark.parametrize("notes", ["mean TPOT 10.5 ms", "mean_tpot_ms 10.5", "mean ITL 10.5 ms",
                                   "median tpot"])
def test_a_serving_benchmarks_tpot_or_itl_counts_the_others_prompts(notes: str) -> None:
    """vLLM's result JSON names it mean_tpot_ms; the gaps between tokens (ITL) hold the steps
    that prefilled other requests as much as the TPOT does."""
    assert row(notes=notes).serving_tpot()
    assert not row(notes="llama-bench tg128").serving_tpot()
    assert not row(notes="mean TPOT 10.5 ms", batch="1").serving_tpot()


def test_a_decode_speed_at_no_stated_context_is_not_predicted() -> None:
    bare = predict(row(input_len="", output_len="", context_len=""))
    assert bare.predicted is None and bare.reason == "not enough conditions stated"
    assert predict(row()).predicted is not None


def test_line_breaks_other_than_newlines_stay_inside_the_notes(tmp_path: Path) -> None:
    """str.splitlines() had cut rows at U+2028, NEL and form feeds in the notes, and scored
    the halves as rows of their own."""
    lines = [",".join(COLUMNS)]
    for i, odd in enumerate(["\u2028", "\x85", "\x0c"]):
        lines.append(",".join({**ROW, "id": f"r{i}", "notes": f"a{odd}mean TPOT"}[c]
                              for c in COLUMNS))
    path = tmp_path / "rows.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_measurements(path)
    assert [r.id for r in result.rows] == ["r0", "r1", "r2"] and not result.errors
    assert all(r.serving_tpot() for r in result.rows)


def test_headers_and_dtypes_are_read_whatever_their_case(tmp_path: Path) -> None:
    """' Metric' and 'KV_DTYPE' name their columns; 'Unknown' is the unknown cache."""
    header = ",".join(c.upper() if i % 2 else f" {c}" for i, c in enumerate(COLUMNS))
    line = ",".join({**ROW, "kv_dtype": "Unknown"}[c] for c in COLUMNS)
    path = tmp_path / "rows.csv"
    path.write_text(f"{header}\n{line}\n", encoding="utf-8")
    (read,) = read_measurements(path).rows
    assert read.kv_dtype == "unknown" and predict(read).predicted is not None


def test_a_row_of_the_wrong_width_says_how_many_cells(tmp_path: Path) -> None:
    cells = [{**ROW, "notes": "a, b"}[c] for c in COLUMNS]  # the comma left unquoted
    short = [{**ROW, "id": "r2"}[c] for c in COLUMNS][:-3]
    path = tmp_path / "rows.csv"
    path.write_text(",".join(COLUMNS) + "\n" + ",".join(cells) + "\n" + ",".join(short)
                    + "\n", encoding="utf-8")
    errors = read_measurements(path).errors
    assert errors[0].endswith(f"wrong number of columns: {len(COLUMNS) + 1} where the header "
                              f"has {len(COLUMNS)} (a comma in a field that is not quoted?)")
    assert f"wrong number of columns: {len(COLUMNS) - 3} where" in errors[1]


def test_a_vanishing_value_is_refused_not_scored_as_infinitely_off() -> None:
    with pytest.raises(ValueError, match="from 1e-09"):
        row(value="1e-320")


@pytest.mark.parametrize("notes", ["env SGLANG_MAMBA_SSM_DTYPE=bfloat16, others",
                                   "launched with --mamba-ssm-dtype bfloat16",
                                   "{'mamba_ssm_dtype': 'bfloat16'}"])
def test_an_sglang_rows_ssm_state_is_priced_at_the_dtype_its_notes_name(notes: str) -> None:
    """A hybrid's SSM state is fp32 under SGLang unless the run says otherwise; a run that
    set it to bf16 (the flag or the environment variable it sets) read half those bytes a
    step, so it is priced faster than the same row at the default."""
    hybrid = {"model": "qwen3-next-80b-a3b", "engine": "sglang", "gpu": "h200",
              "num_gpus": "4", "tp": "4", "batch": "64", "context_len": "9000",
              "input_len": "8000", "output_len": "1000"}
    assert row(notes=notes).mamba_ssm_dtype() == "bfloat16"
    named, plain = (predict(row(**hybrid, notes=n)) for n in (notes, ""))
    assert named.predicted is not None and plain.predicted is not None
    assert named.predicted > plain.predicted  # tok/s: fewer state bytes, a shorter step
    vllm = predict(row(**{**hybrid, "engine": "vllm"}, notes=notes))
    assert vllm.predicted == predict(row(**{**hybrid, "engine": "vllm"})).predicted  # SGLang's

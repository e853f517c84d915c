"""Bad input (audit): the same deployment gets the same answer from every command, a record's
words are the schema's, a flag is spelled whole, a number is written as a user writes one, a
path that is no file says so, and the prefill floor says what it leaves to the expectation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
ACCELERATORS = ROOT / "src/ridgeline/data/accelerators/datacenter.json"
PROFILES = ROOT / "src/ridgeline/data/profiles.json"


def card_file(tmp_path: Path, **changes: object) -> str:
    """The catalog's H100 SXM as a --gpu-file record of its own id, with ``changes``."""
    record = next(r for r in json.loads(ACCELERATORS.read_text("utf-8")) if r["id"] == "h100-sxm")
    path = tmp_path / "card.json"
    path.write_text(json.dumps({**record, "id": "my-h100", "aliases": [], **changes}), "utf-8")
    return str(path)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, one line on stderr and no traceback; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- one deployment, one answer ------------------------------------------------------------
def test_fit_refuses_a_card_with_only_an_fp32_peak_as_decode_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fit said "clears the ridge (20)" on the fp32 ridge where decode, simulate and
    utilization refuse: a bf16 cache's attention has no rate on the card."""
    card = card_file(tmp_path, peak_flops={"fp32": 6.7e13})
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu-file", card)
    assert "my-h100 has no bf16 peak (it has fp32)" in said
    assert refused(capsys, "fit", "llama-3.1-8b", "--gpu-file", card, "--max-model-len",
                   "4k") == said
    # an fp32 cache's attention runs at fp32: both take the card, at its fp32 ridge
    for command in ("decode", "fit"):
        code, _, err = run_cli(capsys, command, "llama-3.1-8b", "--gpu-file", card,
                                 "--kv-dtype", "fp32")  # ridgeline's name: vLLM has none
        assert code == 0, err


def test_amdahl_on_apple_silicon_takes_decodes_engine(
        capsys: pytest.CaptureFixture[str]) -> None:
    """amdahl defaulted to vllm and refused the M2 Ultra where decode picks llama.cpp-metal."""
    code, out, err = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu",
                             "apple-m2-ultra-76c", "--speedup", "2")
    assert code == 0, err
    assert "with the llama.cpp-metal profile" in out
    code, out, err = run_cli(capsys, "amdahl", "--model", "llama-3.1-8b", "--gpu", "h100",
                             "--speedup", "2")
    assert code == 0 and "with the vllm profile" in out, err


# -- a record's words ------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "words"), [
    ("vendor", "nvidia, amd, intel, apple, google, measured"),
    ("form", "datacenter, workstation, consumer, soc, measured")])
def test_a_vendor_or_form_outside_the_schema_is_refused_with_its_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, words: str) -> None:
    """vendor "banana" ran, and decode then suggested llama.cpp-vulkan for it."""
    said = refused(capsys, "hardware", "--gpu-file", card_file(tmp_path, **{key: "banana"}))
    assert f"{key} must be one of {words}, got 'banana'" in said
    refused(capsys, "decode", "llama-3.1-8b", "--gpu-file", card_file(tmp_path, **{key: 3}))
    code, _, err = run_cli(capsys, "hardware", "--gpu-file", card_file(tmp_path, **{key: ""}))
    assert code == 0, err  # not said: taken at its word, as a record without the field


def test_a_config_json_or_a_record_without_peaks_given_as_a_card_says_which(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu-file config.json said "the record lacks 'peak_flops'", a field `hardware --json`
    spells peak_flops_per_s, and not that the file was a model's config."""
    config = tmp_path / "config.json"
    config.write_text((ROOT / "src/ridgeline/data/models/meta-llama--Llama-3.1-8B.json").read_text("utf-8"))
    said = refused(capsys, "roofline", "--gpu-file", str(config))
    assert "is a model's config.json, not an accelerator record" in said
    record = json.loads(Path(card_file(tmp_path)).read_text("utf-8"))
    del record["peak_flops"]
    (tmp_path / "card.json").write_text(json.dumps(record), "utf-8")
    said = refused(capsys, "hardware", "--gpu-file", str(tmp_path / "card.json"))
    assert "lacks 'peak_flops' (or 'peak_flops_per_s'" in said


def test_a_profiles_fitted_ids_not_a_list_of_strings_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fitted_ids 5 said "not an engine profile ('int' object is not iterable)"."""
    bundled = json.loads(PROFILES.read_text("utf-8"))["engines"]["vllm"]
    for bad, shown in ((5, "5"), ("r1", "'r1'"), ([{"id": 1}], "[{'id': 1}]")):
        path = tmp_path / "profile.json"
        path.write_text(json.dumps({"engines": {"vllm": {**bundled, "fitted_ids": bad}}}))
        said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(path))
        assert f"fitted_ids must be a list of strings, got {shown}" in said
        assert "iterable" not in said


def test_a_misspelt_profile_field_is_refused_not_run_at_its_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """"dequant_comput" (for dequant_compute) was read as absent: the profile ran at the
    field's default, 1.0, without a word."""
    bundled = json.loads(PROFILES.read_text("utf-8"))["engines"]["vllm"]
    mistyped = {k: v for k, v in bundled.items() if k != "dequant_compute"}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"engines": {"vllm": {**mistyped, "dequant_comput": 2.0}}}))
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(path))
    assert "'dequant_comput' is no field of an engine profile (did you mean " \
        "'dequant_compute'?)" in said
    path.write_text(json.dumps({"engines": {"vllm": bundled}}))  # every field it writes reads
    assert run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile",
                   str(path))[0] == 0


# -- a flag spelled whole, a number as a user writes it --------------------------------------
def test_a_long_option_is_spelled_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """'--bat 8' ran as --batch 8."""
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--bat", "8")
    assert "unrecognized arguments: --bat 8" in said
    code, _, err = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8")
    assert code == 0, err


@pytest.mark.parametrize(("argv", "said"), [
    (("roofline", "--gpu", "h100", "--batc", "32"),
     "unrecognized arguments: --batc 32; did you mean --batch?"),
    (("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-length", "4k"),
     "did you mean --max-model-len?"),
    (("evalstats", "--pct_a", "39", "--pct-b", "47", "--n", "164"), "did you mean --pct-a?"),
    (("kv", "llama-3.1-8b", "--contxt", "4k"),
     "arguments are required: --context; --contxt: did you mean --context?"),
    (("attention", "--modle", "llama-3.1-8b", "--context", "4k"),
     "arguments are required: --model; --modle: did you mean --model?"),
    (("rooflne", "--gpu", "h100"), "invalid choice: 'rooflne'"),
    (("fti", "llama-3.1-8b", "--gpu", "h100"), "invalid choice: 'fti'"),
    (("fit", "llama-3.1-8b", "--gpu", "h100", "--egnine", "sglang"), "did you mean --engine?"),
])
def test_a_flag_or_command_one_slip_off_is_given_the_nearest_spelling(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], said: str) -> None:
    """--batc, kv --contxt and rooflne were refused bare, while an unknown model or card is
    told its nearest name; a word like nothing the command takes is still refused alone."""
    err = refused(capsys, *argv)
    assert said in err
    if argv[0] == "rooflne":
        assert err.endswith("; did you mean roofline? (see `ridgeline --help`)\n"), err
    if argv[0] == "fti":  # two letters swapped: difflib's ratio alone (0.67) missed it
        assert err.endswith("; did you mean fit? (see `ridgeline --help`)\n"), err
    assert "did you mean" not in refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100",
                                         "--foo", "3")
    assert "did you mean" not in refused(capsys, "xyz")


LLAMA_FIT = ("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "--weights",
             "q4_k_m", "--max-model-len", "8192")


def test_a_single_dash_option_is_spelled_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's -t 8 (its threads) ran as -tp 8, eight GPUs, under Python 3.10-3.11; it is
    llama-server's threads, noted and dropped, and -cram 0 is not -c 'ram'."""
    code, out, err = run_cli(capsys, *LLAMA_FIT, "-t", "8", "-cram", "0")
    assert code == 0 and "on 1 x rtx-4090" in out and "-t 8, -cram 0" in err, err
    code, out, err = run_cli(capsys, *LLAMA_FIT, "-tp", "2")
    assert code == 0 and "on 2 x rtx-4090" in out, err


@pytest.mark.parametrize("flag", ["-ctk", "-ctv", "--cache-type-k", "--cache-type-v"])
def test_llama_cpps_cache_type_flags_name_kv_dtype(capsys: pytest.CaptureFixture[str],
                                                   flag: str) -> None:
    """-ctk q8_0 had been read as -c tk and refused as llama-server's -c; alone, it leaves the
    other cache at llama.cpp's f16, a mixed pair, refused naming it."""
    said = refused(capsys, *LLAMA_FIT, flag, "q8_0")
    assert f"{flag} q8_0:" in said and "f16" in said and "-c is" not in said


def test_llama_cpps_short_flash_attention_flag_is_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *LLAMA_FIT, "-fa", "off")
    assert code == 0 and "no flash attention" in out, err


@pytest.mark.parametrize("text", ["０.５", "0_5", "nan", "1.5"])
def test_amdahls_fraction_is_a_share_in_ascii_digits(
        capsys: pytest.CaptureFixture[str], text: str) -> None:
    said = refused(capsys, "amdahl", "--fraction", text, "--speedup", "2")
    assert "fraction must be" in said and "between 0 and 1" in said


def test_amdahls_fraction_of_minus_zero_reads_as_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "amdahl", "--fraction=-0", "--speedup", "2", "--json")
    assert code == 0, err
    assert "-0" not in out


@pytest.mark.parametrize(("text", "message"), [
    ("８", "percent must be a number such as 39.02, got '８'"),
    ("4_0", "percent must be a number such as 39.02"),
    ("1e-300", "percent 1e-300 has more than 10 decimals")])
def test_a_score_is_written_as_a_benchmark_prints_it(
        capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    """'８' read as 8 %, and 1e-300 printed a score of 300 zeros."""
    said = refused(capsys, "evalstats", "--pct-a", text, "--pct-b", "42", "--n", "1000")
    assert message in said and "--pct-a" in said
    code, out, err = run_cli(capsys, "evalstats", "--pct-a", "39.02%", "--pct-b", "42",
                             "--n", "1000")
    assert code == 0 and out.startswith("A: 39.02% of 1,000"), err


def test_roofline_intensity_past_any_step_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--intensity 1e308 printed a 400-digit row."""
    said = refused(capsys, "roofline", "--gpu", "h100", "--intensity", "1e308")
    assert "intensity must be between 0.001 and 1e+09, got 1e+308" in said
    code, out, err = run_cli(capsys, "roofline", "--gpu", "h100", "--intensity", "1e6")
    assert code == 0 and "1,000,000" in out, err
    assert max(len(line) for line in out.splitlines()) < 200


# -- a path that is no file ------------------------------------------------------------------
def test_a_device_given_as_a_model_is_named_as_a_device(
        capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null was "unknown model '/dev/null', and none of the 46 known is close"."""
    said = refused(capsys, "model", os.devnull)
    assert f"{os.devnull} is a device, not a file: give a model's config.json" in said


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_given_as_a_model_is_read_as_a_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe (as <(command) gives) is read like any input, not looked up as a model's name:
    one with no writer reads empty, and is refused as empty (FIFO.json had said "no such
    config file")."""
    for name in ("pipe", "pipe.json"):
        os.mkfifo(tmp_path / name)
        said = refused(capsys, "model", str(tmp_path / name))
        assert "is empty: a config.json is one JSON object" in said
        assert "unknown model" not in said
        assert "no such config file" not in said


# -- the prefill floor beside llama.cpp's ubatches -------------------------------------------
def test_the_prefill_floor_says_the_ubatches_read_the_weights_again(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-ub 1 left the floor "bound by compute, intensity 948" with no word that the
    expectation's 1,000 passes each read the weights."""
    argv = ("prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len", "1000",
            "--engine", "llama.cpp-cuda")
    code, out, err = run_cli(capsys, *argv, "-ub", "1")
    assert code == 0, err
    assert ("note: the floor reads the weights once (the ideal); llama.cpp-cuda runs 1,000 "
            "ubatches of at most 1 token (-ub), each reading them again, and the expectation "
            "counts them") in out
    code, out, _ = run_cli(capsys, *argv)  # -ub 512: two
    assert "runs 2 ubatches of at most 512 tokens (-ub)" in out
    code, out, _ = run_cli(capsys, *argv, "-ub", "1024")  # one pass: nothing to say
    assert code == 0 and "note:" not in out
    code, out, _ = run_cli(capsys, "prefill", "llama-3.1-8b", "--gpu", "h100", "--prompt-len",
                           "1000")  # vLLM runs a prompt in one pass
    assert code == 0 and "note:" not in out


MEASUREMENTS = ROOT / "validation/lowbatch.csv"


@pytest.mark.parametrize("command", [["validate"], ["calibrate", "-o", "fit.json"]])
def test_a_measurements_header_past_the_csv_field_limit_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """A header line of one 200,000-character field said "internal error (Error: field
    larger than field limit (131072))", exit 1: only the rows under it were guarded."""
    long_header = tmp_path / "long.csv"
    long_header.write_text("[" * 200_000 + "\n", "utf-8")
    argv = [command[0], str(long_header), *command[1:]]
    if command[0] == "calibrate":
        argv[-1] = str(tmp_path / "fit.json")
    said = refused(capsys, *argv)
    assert "long.csv, line 1: field larger than field limit" in said


def test_a_csv_field_past_the_limit_is_named_by_its_own_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The line given was the one before the field's (the header's for a trace: line 0)."""
    header = MEASUREMENTS.read_text("utf-8").splitlines()[0]
    rows = tmp_path / "rows.csv"
    rows.write_text(f"{header}\n" + "a" * 200_000 + "\n", "utf-8")
    assert "rows.csv, line 2: field larger" in refused(capsys, "validate", str(rows))
    trace = tmp_path / "trace.csv"
    trace.write_text("[" * 200_000 + "\n", "utf-8")
    assert "trace.csv, line 1: field larger" in refused(
        capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(trace))


@pytest.mark.parametrize(("argv", "said"), [
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--gpu-file="], "--gpu-file: accelerator file"),
    (["hardware", "--gpu-file="], "--gpu-file: accelerator file path is empty"),
    (["validate", str(MEASUREMENTS), "--gpu-file="], "--gpu-file: accelerator file path"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--plot="], "--plot: plot path is empty"),
    (["kv", "llama-3.1-8b", "--context", "4096", "--plot= "], "--plot: plot path is empty"),
    (["decode", "llama-3.1-8b", "--gpu", "h100", "--profile="], "--profile: profile path"),
    (["validate", str(MEASUREMENTS), "--profile="], "--profile: profile path is empty"),
    (["amdahl", "--fraction", "0.5", "--speedup", "2", "--profile="], "--profile: profile"),
    (["page", "--profile="], "--profile: profile path is empty"),
    (["plan", "llama-3.1-8b", "--rate", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50",
      "--profile="], "--profile: profile path is empty"),
])
def test_an_empty_file_path_is_refused_not_taken_for_none(
        capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    """--gpu-file '', --plot '' and validate's --profile '' ran as if not given (exit 0, no
    record, no chart, the bundled profiles); decode's --profile '' said " is not a profile
    JSON file ([Errno 21] Is a directory: '')". --trace '' was already "trace path is empty"."""
    assert said in refused(capsys, *argv)


def test_a_csv_header_that_names_a_column_twice_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second 'value' (or 'prompt_tokens') column won silently: csv.DictReader keeps the
    last cell of a name, so a trace of 100-token prompts was simulated at 50,000."""
    lines = MEASUREMENTS.read_text("utf-8").splitlines()
    rows = tmp_path / "rows.csv"
    rows.write_text("\n".join([lines[0] + ", Value"] + [f"{line},7" for line in lines[1:3]])
                    + "\n", "utf-8")
    assert "names the column 'value' twice" in refused(capsys, "validate", str(rows))
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,100,10,50000\n",
                     "utf-8")
    assert "names the column 'prompt_tokens' twice" in refused(
        capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(trace))


@pytest.mark.parametrize("field", ["bandwidth_efficiency", "compute_efficiency", "band_low",
                                   "dequant_compute", "group_bandwidth"])
def test_a_profile_share_under_one_percent_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    """bandwidth_efficiency 1e-300 was read: decode printed a 300-digit step time and 0.0
    tok/s with exit 0 (the fuzz audit). A share of a rated figure under 1 % is refused, named."""
    bundled = json.loads(PROFILES.read_text("utf-8"))["engines"]["vllm"]
    value: object = 1e-300
    if field == "group_bandwidth":
        value = {group: 1e-300 for group in bundled[field]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"engines": {"vllm": {**bundled, field: value}}}))
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(path))
    assert field in said and "1e-300" in said


def test_calibrate_writes_no_profile_it_could_not_read_back() -> None:
    """A fit whose share falls under 1 % (rows 100× slower than their cards) is refused before
    it is written, naming the field, rather than written and refused at its first use."""
    from dataclasses import replace

    from ridgeline.cli_data import _refuse_unreadable_fit
    from ridgeline.engines import MIN_SHARE, bundled_profiles
    from ridgeline.errors import InputError

    fitted = bundled_profiles()["vllm"]
    _refuse_unreadable_fit("vllm", fitted, "rows.csv")  # the bundled fit reads back
    with pytest.raises(InputError, match=r"no profile written: .*bandwidth_efficiency"):
        _refuse_unreadable_fit("vllm", replace(fitted, bandwidth_efficiency=MIN_SHARE / 2),
                               "rows.csv")

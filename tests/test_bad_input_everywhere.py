"""Bad input (audit): a check holds wherever the input is read — every per-group map of a
profile, every command's --gpu-file, every field of a transceiver config, every output flag —
and a number past what it can be is named as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.engines import accelerator_group, accelerator_groups
from ridgeline.hardware import catalog, load_accelerator_file
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "src/ridgeline/data/profiles.json"
ACCELERATORS = ROOT / "src/ridgeline/data/accelerators/datacenter.json"
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr and no traceback; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def profile_file(tmp_path: Path, key: str, groups: dict[str, float]) -> str:
    """The bundled vllm profile with ``groups`` added to its per-group map ``key``."""
    bundled = json.loads(PROFILES.read_text("utf-8"))["engines"]["vllm"]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"engines": {"vllm": {
        **bundled, key: {**bundled.get(key, {}), **groups}}}}), "utf-8")
    return str(path)


def card_file(tmp_path: Path, **changes: object) -> str:
    """The catalog's H100 SXM as a --gpu-file record, with ``changes``."""
    record = next(r for r in json.loads(ACCELERATORS.read_text("utf-8"))
                  if r["id"] == "h100-sxm")
    path = tmp_path / "card.json"
    path.write_text(json.dumps({**record, "aliases": [], **changes}), "utf-8")
    return str(path)


# -- a profile's per-group maps ----------------------------------------------------------------
@pytest.mark.parametrize(("key", "value"), [
    ("group_bandwidth", 1.5), ("group_compute", 1.5), ("fitted_groups", 40),
    ("fitted_max_batch", 64), ("max_batch_optimism", 0.2)])
def test_a_profile_naming_no_accelerator_group_is_refused_with_the_groups(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: float) -> None:
    """group_bandwidth {"nvidia-foo": 1.5} was kept and never read: the profile ran at 1x on
    every card, exit 0, without a word."""
    said = refused(capsys, *DECODE, "--profile",
                   profile_file(tmp_path, key, {"nvidia-foo": value}))
    assert f"{key} names 'nvidia-foo', which is no accelerator group" in said
    assert "the groups: amd-instinct, amd-radeon, amd-soc, apple," in said
    # a group a card falls in reads, and a name written before the AMD split too
    for group in ("nvidia-geforce", "amd"):
        code, _, err = run_cli(capsys, *DECODE, "--profile",
                               profile_file(tmp_path, key, {group: value}))
        assert code == 0, err


def test_the_known_groups_are_every_group_a_card_can_fall_in(tmp_path: Path) -> None:
    """The catalog's cards' groups, and a --gpu-file card's of a vendor the catalog lacks
    (google) or of none ("other"), all among accelerator_groups()."""
    groups = set(accelerator_groups())
    assert {accelerator_group(card) for card in catalog().values()} <= groups
    for vendor, group in (("google", "google"), ("", "other"), ("measured", "measured")):
        card = load_accelerator_file(card_file(tmp_path, id="my-card", vendor=vendor,
                                               form=""))
        assert accelerator_group(card) == group and group in groups


# -- every command's --gpu-file ----------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["decode", "llama-3.1-8b"], ["prefill", "llama-3.1-8b", "--prompt-len", "1000"],
    ["fit", "llama-3.1-8b"], ["roofline"], ["hardware"],
    ["kv", "llama-3.1-8b", "--context", "4096"]], ids=lambda argv: argv[0])
def test_every_command_refuses_a_gpu_file_under_a_catalog_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """validate and calibrate refused a record under the catalog's id; decode and the other
    one-card commands printed its own figures as the catalog's h100-sxm."""
    said = refused(capsys, *argv, "--gpu-file", card_file(tmp_path, id="h100-sxm"))
    assert "record id 'h100-sxm' is the catalog's h100-sxm: give it an id of its own " \
        "(e.g. my-h100-sxm)" in said
    said = refused(capsys, *argv, "--gpu-file", card_file(tmp_path, id="Lab Card"))
    assert "record id 'Lab Card': use letters, digits" in said
    code, _, err = run_cli(capsys, *argv, "--gpu-file", card_file(tmp_path, id="my-h100"))
    assert code == 0, err


def test_a_card_file_may_state_its_memory_by_size_and_unit_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """memory_size 48 and memory_unit GiB state the bytes; the record had been refused for
    lacking memory_bytes. With neither, the refusal names memory_bytes."""
    from ridgeline.hardware import load_accelerator_file

    path = card_file(tmp_path, id="my-card", memory_size=48, memory_unit="GiB")
    record = json.loads(Path(path).read_text("utf-8"))
    for key in ("memory_bytes", "runtime_total_bytes", "smi_total_bytes"):
        record.pop(key, None)
    Path(path).write_text(json.dumps(record), "utf-8")
    assert load_accelerator_file(path).memory_bytes == 48 * 2**30
    del record["memory_size"]
    Path(path).write_text(json.dumps(record), "utf-8")
    assert "lacks 'memory_bytes'" in refused(capsys, "hardware", "--gpu-file", path)


def test_observe_refuses_a_gpu_file_under_a_catalog_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text('vllm:num_requests_running{model_name="llama-3.1-8b"} 3\n', "utf-8")
    argv = ("observe", str(metrics), "--model", "llama-3.1-8b", "--gpu-file")
    said = refused(capsys, *argv, card_file(tmp_path, id="H100"))
    assert "record id 'H100' is the catalog's h100-sxm" in said
    code, _, err = run_cli(capsys, *argv, card_file(tmp_path, id="my-h100"))
    assert code == 0, err


# -- a transceiver config's every field --------------------------------------------------------
TRTLLM_FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm",
              "--cache-transceiver-config")


@pytest.mark.parametrize(("value", "shown"), [
    ('{"max_tokens_in_buffer": -5}', "-5"),
    ('{"backend": null, "max_tokens_in_buffer": "8k"}', "'8k'"),
    ('{"max_tokens_in_buffer": 1.5}', "1.5")])
def test_max_tokens_in_buffer_is_checked_without_a_backend(
        capsys: pytest.CaptureFixture[str], value: str, shown: str) -> None:
    """Without a backend (the transceiver off) max_tokens_in_buffer -5 ran, exit 0: the LLM
    API's config model checks each field it is given, the backend or not."""
    said = refused(capsys, *TRTLLM_FIT, value)
    assert ("cache_transceiver_config.max_tokens_in_buffer must be a whole number of tokens, "
            f"at least 1; got {shown}") in said
    code, _, err = run_cli(capsys, *TRTLLM_FIT, '{"max_tokens_in_buffer": 8192}')
    assert code == 0, err


# -- an empty output or source -----------------------------------------------------------------
@pytest.mark.parametrize(("argv", "said"), [
    (["page", "-o", ""], "argument -o: output path is empty"),
    (["page", "--output= "], "argument --output: output path is empty"),
    (["measure", "-o", ""], "argument -o: output path is empty"),
    (["calibrate", str(ROOT / "validation/lowbatch.csv"), "-o", ""],
     "argument -o: output path is empty"),
    (["observe", "", "--model", "llama-3.1-8b", "--gpu", "h100"],
     "argument SOURCE: source path or URL is empty"),
    (["validate", ""], "argument FILE: measurements path is empty"),
    (["calibrate", str(ROOT / "validation/lowbatch.csv"), " ", "-o", "p.json"],
     "argument FILE: measurements path is empty")])
def test_an_empty_output_or_source_is_named_empty(
        capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    """-o '' said "cannot write : a folder, not a file" (the working folder), observe ''
    "cannot read  ([Errno 21] Is a directory: '.')", validate '' " is not a readable CSV
    file ([Errno 21] Is a directory: '.')"."""
    assert said in refused(capsys, *argv)


# -- a token id past any vocabulary ------------------------------------------------------------
@pytest.mark.parametrize("token", ["9" * 5000, str(2**32)])
def test_a_token_id_past_32_bits_is_refused(capsys: pytest.CaptureFixture[str],
                                            token: str) -> None:
    """A 26-digit id ran, and a 5,000-digit one said "Exceeds the limit (4300 digits) for
    integer string conversion ... use sys.set_int_max_str_digits()"."""
    said = refused(capsys, "prefix", "--tokens-a", f"1,{token}", "--tokens-b", "1")
    assert "is past any tokenizer's: ids are at most 4,294,967,295 (32 bits)" in said
    assert "set_int_max_str_digits" not in said


def test_the_largest_token_id_and_leading_zeros_read(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "prefix", "--tokens-a", f"{2**32 - 1},0{'0' * 5000}7",
                             "--tokens-b", f"{2**32 - 1},7", "--block-size", "1")
    assert code == 0 and out.startswith("common prefix 2 tokens"), err


# -- one of ridgeline's own files handed in as a model -----------------------------------------
@pytest.mark.parametrize("argv", [
    ["attention", "--context", "4096", "--model"],
    ["amdahl", "--gpu", "h100", "--speedup", "2", "--model"],
    ["measure", "-o", "rows.csv", "--model"],
    ["decode", "--gpu", "h100"]], ids=lambda argv: argv[0])
def test_a_profile_file_given_as_a_model_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """calibrate's output as --model said "profile: config has no hidden_size or n_embd or
    d_model", as an accelerator record given there is named already."""
    path = tmp_path / "profile.json"
    path.write_text(PROFILES.read_text("utf-8"), "utf-8")
    argv = [str(tmp_path / a) if a == "rows.csv" else a for a in argv]
    argv = [*argv, str(path)] if argv[-1] == "--model" else [argv[0], str(path), *argv[1:]]
    said = refused(capsys, *argv)
    assert "profile.json is a file of engine profiles, not a model's config.json (give it to " \
        "--profile)" in said

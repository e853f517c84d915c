"""An engine's config file pasted with its command line: vLLM's --config YAML is its flags,
the command line's own winning; trtllm-serve's --extra_llm_api_options (--config) YAML is its
LLM API options, winning over its flags, the ones ridgeline models read and the rest refused
by name or, where they change nothing priced, ignored. The YAML is read by a small reader of
the subset those files use, which refuses the rest with the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.cli_config_file import TRTLLM_IGNORED
from ridgeline.data_parallel import TRTLLM_ATTENTION_DP
from ridgeline.datafiles import engine_defaults
from ridgeline.errors import InputError
from ridgeline.yaml_subset import parse_yaml
from tests.conftest import run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
TRT = (*FIT, "--engine", "trtllm")
SIM = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--num-prompts",
       "40", "--concurrency", "8", "--json")
TRTLLM_DEFAULT_FRACTION = engine_defaults("trtllm")["kv_cache_free_gpu_mem_fraction"]


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, (argv, err)
    return out


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def yaml_file(tmp_path: Path, text: str, name: str = "cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- the YAML subset ---------------------------------------------------------------------
def test_the_subset_reads_nested_mappings_flow_collections_lists_and_scalars() -> None:
    text = """---
# a trtllm-serve extra options file
kv_cache_config:
  dtype: fp8            # the cache's dtype
  free_gpu_memory_fraction: 0.85
cuda_graph_config:
speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 3}
batch_sizes: [1, 2, 4]
served:
- 'it''s'
- "a # not a comment"
enable_padding: true
seed: -3
path: http://host:80/x
"""
    settings = parse_yaml(text)
    assert settings["kv_cache_config"] == {"dtype": "fp8", "free_gpu_memory_fraction": 0.85}
    assert settings["cuda_graph_config"] is None  # 'key:' alone is null
    assert settings["speculative_config"]["num_nextn_predict_layers"] == 3
    assert settings["batch_sizes"] == [1, 2, 4]
    assert settings["served"] == ["it's", "a # not a comment"]
    assert settings["enable_padding"] is True and settings["seed"] == -3
    assert settings["path"].endswith(":80/x")


def test_numbers_are_read_as_pyyaml_reads_them() -> None:
    # YAML 1.1 (PyYAML, the engines' reader): a float has a dot; 1e9 stays a word
    settings = parse_yaml("a: 0.9\nb: 1e9\nc: 7\nd: .5\n")
    assert isinstance(settings["a"], float) and settings["b"] == "1e9"
    assert isinstance(settings["c"], int) and settings["d"] * 2 == 1


@pytest.mark.parametrize(("text", "line", "said"), [
    ("a: 1\nb: &anchor 2\n", 2, "anchor"),
    ("a: 1\nb: *anchor\n", 2, "alias"),
    ("a: |\n  two\n  lines\n", 1, "multi-line"),
    ("a: >\n  folded\n", 1, "multi-line"),
    ("a:\n\tb: 1\n", 2, "tab"),
    ("a: 1\nb: yes\n", 2, "YAML 1.1"),
    ("a: 1\na: 2\n", 2, "twice"),
    ("a: {b: 1\n", 1, "close on its line"),
    ("a:\n  - b: 1\n", 2, "list item"),
    ("a: 1\n   b: 2\n", 2, "indentation"),
    ("a: !!int 1\n", 1, "tag"),
    ("a: 010\n", 1, "decimal"),
    ("a: 1\nb: [1, , 2]\n", 2, "empty entry"),
])
def test_yaml_past_the_subset_is_refused_naming_its_line(text: str, line: int, said: str) -> None:
    with pytest.raises(InputError, match=f"^f.yaml:{line}: .*{said}"):
        parse_yaml(text, "f.yaml")


def test_a_trailing_comma_in_a_flow_collection_adds_no_null_entry() -> None:
    # PyYAML reads [1, 2,] as [1, 2]; a null third size would reach a flag as 'None'
    settings = parse_yaml("a: [1, [2, 4,],]\nb: {c: 1, }\n")
    assert settings == {"a": [1, [2, 4]], "b": {"c": 1}}


@pytest.mark.parametrize("kind", ["[MTP]", "{name: MTP}"])
def test_a_draft_type_that_is_not_a_name_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    # a list or mapping where decoding_type names the drafter: no TypeError traceback
    path = yaml_file(tmp_path, f"speculative_config: {{decoding_type: {kind}}}\n")
    err = refusal(capsys, *SIM, "--config", path)
    assert err.startswith("ridgeline: error: speculative_config in ") and "decoding_type" in err


@pytest.mark.parametrize("text", [
    "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "x: 1\n",
])
def test_nesting_past_the_stack_is_refused_not_a_traceback(text: str) -> None:
    with pytest.raises(InputError, match=r"^f\.yaml: nested too deeply"):
        parse_yaml(text, "f.yaml")


def test_a_file_that_is_not_text_is_refused_by_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "weights.yaml"
    path.write_bytes(b"max-model-len: 8192\nname: caf\xe9\n")  # Latin-1, not UTF-8
    assert "weights.yaml: not UTF-8 text" in refusal(capsys, *FIT, "--config", str(path))


def test_a_file_past_the_subset_exits_2_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "max-model-len: &len 8192\n")
    assert "cfg.yaml:1: an anchor" in refusal(capsys, *FIT, "--config", path)
    assert "No such file" in refusal(capsys, *FIT, "--config", str(tmp_path / "none.yaml"))
    assert "needs a YAML file" in refusal(capsys, *FIT, "--config")
    assert f"{tmp_path} is a folder, not a YAML file" in refusal(capsys, *FIT, "--config",
                                                                 str(tmp_path))


# -- vLLM's --config ---------------------------------------------------------------------
def test_a_vllm_config_file_is_the_same_flags_on_the_command_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # keys in either spelling, as FlexibleArgumentParser turns underscores into dashes
    path = yaml_file(tmp_path, "max_model_len: 32768\ngpu-memory-utilization: 0.85\n"
                     "kv-cache-dtype: fp8\nenable-prefix-caching: false\n")
    flags = ("--max-model-len", "32768", "--gpu-memory-utilization", "0.85",
             "--kv-cache-dtype", "fp8", "--no-enable-prefix-caching")
    from_file = answer(capsys, *FIT, "--config", path)
    assert from_file == answer(capsys, *FIT, *flags)
    assert from_file != answer(capsys, *FIT)


def test_vllms_command_line_wins_over_its_config_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "max-model-len: 32768\n")
    later = answer(capsys, *FIT, "--config", path, "--max-model-len", "8192")
    assert json.loads(later)["max_model_len"] == 8192
    assert later == answer(capsys, *FIT, "--max-model-len", "8192")


def test_a_vllm_config_files_model_gives_way_to_the_positional_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vllm serve MODEL --config FILE with model: in FILE serves MODEL (ServeSubcommand.cmd:
    args.model = args.model_tag); without MODEL on the command line, the file's is served."""
    path = yaml_file(tmp_path, "model: qwen3-8b\nmax-model-len: 8192\n")
    served = json.loads(answer(capsys, *FIT, "--config", path))
    assert served["model"] == "llama-3.1-8b" and served["max_model_len"] == 8192
    alone = json.loads(answer(capsys, "fit", "--gpu", "h100", "--json", "--config", path))
    assert alone["model"] == "qwen3-8b"


@pytest.mark.parametrize("line", [FIT, ("fit", "--model-path", "llama-3.1-8b", *FIT[2:])])
def test_a_vllm_config_files_other_model_beside_model_is_said_to_be_ignored(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, line: tuple[str, ...]) -> None:
    """model: in the file beside another model on the command line (MODEL, or SGLang's
    --model-path) gives way to it, and the run says so (a caution on stderr, kept in the
    JSON's cautions), naming the file and both models; the same model in both, or none on
    the command line, calls for no caution."""
    other = yaml_file(tmp_path, "model: qwen3-8b\nmax-model-len: 8192\n", "m.yaml")
    code, out, err = run_cli(capsys, *line, "--config", other)
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"
    cautions = [c for c in json.loads(out)["cautions"] if "m.yaml" in c]
    assert len(cautions) == 1 and "qwen3-8b" in cautions[0] and "llama-3.1-8b" in cautions[0]
    assert f"ridgeline: caution: {cautions[0]}" in err
    same = yaml_file(tmp_path, "model: llama-3.1-8b\nmax-model-len: 8192\n", "s.yaml")
    for argv in ((*FIT, "--config", same), ("fit", "--gpu", "h100", "--json", "--config", other)):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0 and "caution" not in err and "m.yaml" not in out + err


@pytest.mark.parametrize("key", ["model-path", "model_path", "model"])
@pytest.mark.parametrize("line", [FIT, ("fit", "--model-path", "llama-3.1-8b", *FIT[2:])])
def test_a_config_files_model_path_gives_way_to_the_command_lines_model(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str,
        line: tuple[str, ...]) -> None:
    """SGLang's model-path (either spelling) in the file, beside a model on the command line,
    gives way to it as model: does (the command line's flags come after the file's), with the
    same caution, not "the model is given twice"; a one-item list reads as its item."""
    other = yaml_file(tmp_path, f"{key}: qwen3-8b\nmax-model-len: 8192\n", "p.yaml")
    code, out, err = run_cli(capsys, *line, "--config", other)
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"
    cautions = [c for c in json.loads(out)["cautions"] if "p.yaml" in c]
    assert len(cautions) == 1 and f"gives {key} qwen3-8b" in cautions[0]
    same = yaml_file(tmp_path, f"{key}: [llama-3.1-8b]\nmax-model-len: 8192\n", "s.yaml")
    code, out, err = run_cli(capsys, *line, "--config", same)
    assert code == 0 and "caution" not in err, err


@pytest.mark.parametrize(("text", "said"), [
    ("max-model-len: [1, 2]\n", "max-model-len in x.yaml takes one value, got a list of 2"),
    ("max-model-len: null\n", "max-model-len in x.yaml is null"),
    ("gpu-memory-utilization: ~\n", "gpu-memory-utilization in x.yaml is null"),
    ("enforce-eager: [1]\n", "enforce-eager in x.yaml takes true or false, got a list of 1"),
    ("model: [qwen3-8b, llama-3.1-8b]\n", "model in x.yaml takes one value")])
def test_a_vllm_config_value_the_flag_cannot_take_is_refused_naming_the_file_and_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, said: str) -> None:
    """A list where the flag takes one value (or none: a switch) would be the flag and each
    item ('unrecognized arguments: 2'), and null the text 'None' ("got 'None'"), neither
    naming the file or the key: each is refused in one line that names both."""
    path = yaml_file(tmp_path, text, "x.yaml")
    argv = ("fit", "--gpu", "h100", "--config", path) if text.startswith("model") \
        else (*FIT, "--config", path)
    err = refusal(capsys, *argv)
    assert said.replace("x.yaml", path) in err
    assert "unrecognized" not in err and "'None'" not in err


def test_a_list_for_a_flag_of_several_values_stays_a_list(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--cudagraph-capture-sizes and --served-model-name take several values: a list is
    theirs, read as the command line's values."""
    path = yaml_file(tmp_path, "max-model-len: 8192\ncudagraph-capture-sizes: [1, 2, 4]\n"
                     "served-model-name: [a, b]\n")
    assert answer(capsys, *FIT, "--config", path) == answer(
        capsys, *FIT, "--max-model-len", "8192", "--cudagraph-capture-sizes", "1", "2", "4",
        "--served-model-name", "a", "b")


def test_an_unknown_key_in_a_vllm_config_is_refused_as_an_unknown_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "no-such-setting: 3\n")
    assert "--no-such-setting" in refusal(capsys, *FIT, "--config", path)


def test_a_key_fit_reads_but_decode_does_not_is_refused_naming_the_file_and_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """fit takes --target-concurrency, decode does not: decode's refusal names the file's
    key and the file, not an anonymous 'unrecognized arguments'."""
    path = yaml_file(tmp_path, "max-model-len: 8192\ntarget-concurrency: 4\n", "v.yaml")
    answer(capsys, *FIT, "--config", path)
    err = refusal(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--config", path)
    assert "target-concurrency in" in err and "v.yaml" in err and "unrecognized" not in err


@pytest.mark.parametrize(("text", "flags", "said"), [
    ("all2all-backend: deepep_low_latency\n", ("--all2all-backend", "deepep_low_latency"),
     "all2all-backend is not modelled"),
    ("load_format: bitsandbytes\n", ("--load-format", "bitsandbytes"),
     "load_format bitsandbytes is not modelled"),
    ("disable-custom-all-reduce: true\n", ("--disable-custom-all-reduce",),
     "disable-custom-all-reduce is not modelled")])
def test_a_not_modelled_key_in_a_vllm_config_is_refused_naming_the_file_and_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str,
        flags: tuple[str, ...], said: str) -> None:
    """A key whose flag is refused on the command line is refused from the file for the same
    reason, the line naming the file and the key as the file spells it."""
    path = yaml_file(tmp_path, "max-model-len: 8192\n" + text, "x.yaml")
    err = refusal(capsys, *FIT, "--config", path)
    assert f"x.yaml: {said}: " in err
    why = refusal(capsys, *FIT, *flags).split(" is not modelled: ")[1].split(" (see `")[0]
    assert err.rstrip().endswith(why)


@pytest.mark.parametrize(("key", "flag", "engine"), [
    ("enable-chunked-prefill: true", "--enable-chunked-prefill", ("--engine", "sglang")),
    ("enable_chunked_prefill: true", "--enable-chunked-prefill", ("--engine-version", "0.7.3")),
    ("disable-overlap-schedule: true", "--disable-overlap-schedule", ())])
def test_a_key_refused_only_for_its_engine_is_refused_naming_the_file_and_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, flag: str,
        engine: tuple[str, ...]) -> None:
    """A flag refused only once the engine is known (another engine's, or V1-only on a V0
    --engine-version: launch_note) names the file and the key when the file gave it, with the
    command line's reason."""
    path = yaml_file(tmp_path, f"max-model-len: 8192\n{key}\n", "x.yaml")
    err = refusal(capsys, *FIT, "--config", path, *engine)
    said = key.split(":")[0]
    assert f"x.yaml: {said} is " in err
    why = refusal(capsys, *FIT, flag, *engine).split(f"{flag} is ")[1]
    assert err.endswith(why)


def test_a_trtllm_file_given_without_its_engine_says_give_engine_trtllm(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A trtllm-serve YAML read as vLLM's (no --engine trtllm) is refused by its first LLM API
    key, saying which engine's file it looks like; with --engine trtllm it is read."""
    path = yaml_file(tmp_path, "cuda_graph_config:\n  max_batch_size: 64\n"
                     "kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n", "t.yml")
    err = refusal(capsys, *FIT, "--config", path)
    assert "cuda_graph_config in" in err and "t.yml" in err and "--engine trtllm" in err
    answer(capsys, *TRT, "--config", path)


# -- trtllm-serve's --extra_llm_api_options / --config -----------------------------------
@pytest.mark.parametrize("flag", ["--extra_llm_api_options", "--config"])
def test_a_trtllm_yaml_equals_the_flags_it_stands_for(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str) -> None:
    path = yaml_file(tmp_path, "kv_cache_config: {dtype: fp8, free_gpu_memory_fraction: 0.9}\n"
                     "max_batch_size: 64\nprint_iter_log: true\n")
    from_file = answer(capsys, *TRT, flag, path)
    assert from_file == answer(capsys, *TRT, "--kv-dtype", "fp8",
                               "--kv_cache_free_gpu_memory_fraction", "0.9",
                               "--max_batch_size", "64")
    assert json.loads(from_file)["max_num_seqs"] == 64


def test_the_trtllm_yaml_wins_over_trtllm_serves_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # serve.py merges the file over the flags' arguments (llm_args | llm_args_dict)
    path = yaml_file(tmp_path, "max_batch_size: 64\n")
    out = answer(capsys, *TRT, "--max_batch_size", "16", "--config", path)
    assert json.loads(out)["max_num_seqs"] == 64


def test_a_kv_cache_config_that_drops_the_flags_memory_fraction_prices_the_default(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The file's kv_cache_config replaces the KvCacheConfig the flags built (1.0 to 1.2), so
    the flag's fraction gives way to KvCacheConfig's default: the flag at that default (the
    Llama-3.3-70B guide's 0.9 beside {dtype: fp8}) changes nothing and is said nowhere; another
    is priced at the default too, with a caution naming it; one out of range is refused as the
    flag is."""
    path = yaml_file(tmp_path, "kv_cache_config:\n  dtype: fp8\n")
    default = str(TRTLLM_DEFAULT_FRACTION)
    without = answer(capsys, *TRT, "--config", path)
    code, out, err = run_cli(capsys, *TRT, "--kv_cache_free_gpu_memory_fraction", default,
                             "--config", path)
    assert code == 0 and out == without and "free_gpu_memory_fraction" not in err
    code, out, err = run_cli(capsys, *TRT, "--kv_cache_free_gpu_memory_fraction=0.8",
                             "--config", path)
    assert code == 0 and "0.8 is dropped" in err and "free_gpu_memory_fraction: 0.8" in err
    said = [c for c in json.loads(out)["cautions"] if "0.8 is dropped" in c]
    assert said and json.loads(out) | {"cautions": []} == json.loads(without) | {"cautions": []}
    assert json.loads(out)["conversations"] != json.loads(answer(
        capsys, *TRT, "--kv_cache_free_gpu_memory_fraction", "0.8", "--kv-dtype",
        "fp8"))["conversations"]  # the flag alone would have been priced
    assert "--kv_cache_free_gpu_memory_fraction" in refusal(
        capsys, *TRT, "--kv_cache_free_gpu_memory_fraction", "7", "--config", path)


def test_a_trtllm_option_that_changes_what_is_priced_is_refused_by_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "kv_cache_config:\n  dtype: fp8\nmoe_config:\n"
                     "  backend: WIDEEP\n")
    assert "moe_config in" in refusal(capsys, *TRT, "--config", path)
    path = yaml_file(tmp_path, "kv_cache_config:\n  host_cache_size: 1000000\n")
    assert "kv_cache_config.host_cache_size" in refusal(capsys, *TRT, "--config", path)


def test_a_key_no_llm_api_class_has_is_refused_as_tensorrt_llm_refuses_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """BaseLlmArgs forbids extra keys, so trtllm-serve would not start: not a setting that
    'changes the memory or the speed', but none at all; a real option ridgeline does not model
    is still refused as that."""
    err = refusal(capsys, *TRT, "--config", yaml_file(tmp_path, "bogus_key: 3\n"))
    assert "bogus_key in" in err and "TensorRT-LLM has no such option" in err
    err = refusal(capsys, *TRT, "--config", yaml_file(tmp_path, "attn_backend: FLASHINFER\n"))
    assert "attn_backend in" in err and "no such option" not in err


def test_trtllm_options_that_change_only_the_speed_are_dropped_by_fit_and_cautioned_elsewhere(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """enable_autotuner: false, stream_interval and a moe_config naming only its backend (the
    DGX Spark and deployment guides' files) change no memory: fit prices the same pool and
    notes each after the report; simulate prices TensorRT-LLM's default speeds and cautions
    each. At their defaults they are nothing to say."""
    keys = ("enable_autotuner", "stream_interval", "moe_config.backend")
    path = yaml_file(tmp_path, "enable_autotuner: false\nstream_interval: 20\n"
                     "moe_config:\n  backend: TRITON\n")
    code, out, err = run_cli(capsys, *TRT, "--config", path)
    assert code == 0 and json.loads(out) | {"notes": []} == json.loads(answer(capsys, *TRT))
    notes = [line for line in err.splitlines() if line.startswith("ridgeline: note: ignored")]
    assert all(any(key in line for line in notes) for key in keys) and len(notes) == len(keys)
    assert json.loads(out)["notes"] == [n.removeprefix("ridgeline: note: ") for n in notes]
    cautioned = json.loads(answer(capsys, *SIM, "--config", path))
    said = [c for c in cautioned["cautions"] if "is not modelled" in c]
    assert all(any(key in c for c in said) for key in keys)
    # the notes said on stderr are in the JSON's notes too
    assert cautioned | {"cautions": [], "notes": []} == \
        json.loads(answer(capsys, *SIM)) | {"cautions": [], "notes": []}
    defaults = yaml_file(tmp_path, "enable_autotuner: true\nstream_interval: 1\n", "d.yml")
    code, out, err = run_cli(capsys, *TRT, "--config", defaults)
    assert code == 0 and out == answer(capsys, *TRT) and "note" not in err


# three 10,000-token prompts at once, past TensorRT-LLM's default max_num_tokens (8,192)
LONG = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "trtllm", "--rate", "1",
        "--num-requests", "3", "--input-len", "10000", "--output-len", "5", "--json")


def test_trtllm_chunked_prefill_in_the_yaml_is_its_flag_and_lifts_the_whole_context_refusal(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """enable_chunked_prefill: true runs the prompts past max_num_tokens in chunks as the
    engine then would, where without it the engine refuses them (exit 2); the file's
    key is the command line's switch, in either spelling, and its false wins over it."""
    on = yaml_file(tmp_path, "enable_chunked_prefill: true\n")
    chunked = json.loads(answer(capsys, *LONG, "--extra_llm_api_options", on))
    assert chunked == json.loads(answer(capsys, *LONG, "--enable_chunked_prefill")) \
        == json.loads(answer(capsys, *LONG, "--enable-chunked-prefill"))
    text = LONG[:-1]  # the refusal in its one line
    whole = refusal(capsys, *text)  # off, the engine refuses every one of them
    assert "enable_chunked_prefill is off" in whole and chunked["completed"] == 3
    assert not [c for c in chunked["cautions"] if "enable_chunked_prefill is off" in c]
    assert "chunked prefill" in chunked["settings"]["capacity_policy"]
    off = yaml_file(tmp_path, "enable_chunked_prefill: false\n", "off.yaml")
    assert refusal(capsys, *text, "--enable_chunked_prefill", "--config", off) \
        == whole == refusal(capsys, *text, "--config", off)


def test_trtllm_chunked_prefill_changes_nothing_a_pool_holds(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """It schedules the steps; the pool trtllm-serve sizes at max_num_tokens is the same, and
    only the caution that prompts past max_num_tokens are refused goes (fit_cautions)."""
    on = yaml_file(tmp_path, "enable_chunked_prefill: true\n")
    chunked, whole = json.loads(answer(capsys, *TRT, "--config", on)), json.loads(answer(capsys, *TRT))
    refused = [c for c in whole["cautions"] if "longer than max_num_tokens" in c]
    assert len(refused) == 1 and chunked["cautions"] == [c for c in whole["cautions"]
                                                         if c not in refused]
    assert {**chunked, "cautions": []} == {**whole, "cautions": []}


def test_trtllm_options_that_change_nothing_priced_are_ignored(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    harmless = sorted(TRTLLM_IGNORED)[:4]
    path = yaml_file(tmp_path, "".join(f"{key}: 1\n" for key in harmless))
    assert answer(capsys, *TRT, "--config", path) == answer(capsys, *TRT)


def test_extra_llm_api_options_names_trtllm(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "max_batch_size: 64\n")
    assert "--engine trtllm" in refusal(capsys, *FIT, "--extra_llm_api_options", path)


def test_trtllm_cuda_graphs_off_and_its_overlap_switch_are_the_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "cuda_graph_config: null\ndisable_overlap_scheduler: true\n")
    assert answer(capsys, *SIM, "--config", path) == answer(
        capsys, *SIM, "--enforce-eager", "--disable-overlap-scheduler")
    kept = yaml_file(tmp_path, "cuda_graph_config:\n  enable_padding: true\n"
                     "disable_overlap_scheduler: false\n", "kept.yaml")
    assert answer(capsys, *SIM, "--disable-overlap-scheduler", "--config", kept) == answer(
        capsys, *SIM)  # the file's false wins over the flag, as trtllm-serve's does


def test_a_trtllm_draft_is_simulates_speculative_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """speculative_config read as engine_spec reads it: Eagle3's max_draft_len is --spec-tokens;
    MTP drafts with the checkpoint's MTP layers, which Llama-3.1-8B has none of."""
    path = yaml_file(tmp_path, "speculative_config:\n  decoding_type: Eagle3\n"
                     "  max_draft_len: 3\n  speculative_model_dir: /d\n")
    assert answer(capsys, *SIM, "--config", path) == answer(
        capsys, *SIM, "--spec-method", "eagle", "--spec-tokens", "3")
    # fit takes the drafter too, saying its weights and cache are not in TensorRT-LLM's pool
    code, out, err = run_cli(capsys, *TRT, "--config", path)
    assert code == 0 and "are not in this pool" in err
    assert json.loads(out)["conversations"] == json.loads(answer(capsys, *TRT))["conversations"]
    mtp = yaml_file(tmp_path, "speculative_config:\n  decoding_type: MTP\n"
                    "  num_nextn_predict_layers: 3\n")
    assert "llama-3.1-8b has none" in refusal(capsys, *SIM, "--config", mtp)
    assert answer(capsys, "simulate", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                  "--engine", "trtllm", "--num-prompts", "10", "--rate", "1", "--json",
                  "--config", mtp) == answer(
        capsys, "simulate", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine",
        "trtllm", "--num-prompts", "10", "--rate", "1", "--json", "--spec-method", "mtp",
        "--spec-tokens", "3")


# -- TensorRT-LLM's attention DP: one refusal, however it is asked for --------------------
def test_tensorrt_llms_attention_dp_is_refused_alike_in_every_spelling(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    moe = ("fit", "deepseek-r1", "--gpu", "h200", "--engine", "trtllm", "--max_seq_len", "8192")
    path = yaml_file(tmp_path, "kv_cache_config:\n  dtype: fp8\nenable_attention_dp: true\n")
    errors = [refusal(capsys, *moe, "--tp_size", "8", "--enable-dp-attention", "--dp-size", "8"),
              refusal(capsys, *moe, "--tp_size", "1", "--data-parallel-size", "8",
                      "--enable-expert-parallel"),
              refusal(capsys, *moe, "--tp_size", "8", "--config", path)]
    assert all(TRTLLM_ATTENTION_DP in err for err in errors)
    # what it names instead runs
    answer(capsys, *moe, "--tp_size", "8", "--ep_size", "8")
    answer(capsys, "fit", "deepseek-r1", "--gpu", "h200", "--engine", "vllm",
           "--max-model-len", "8192", "--data-parallel-size", "8", "--enable-expert-parallel")


@pytest.mark.parametrize("text", [
    'a: "x", ' + '"b": 1, ' * 400 + "\n",  # a one-line JSON object given as --config
    "a: [1]" + " 2" * 400 + "\n",
    "a: 0x" + "1" * 900 + "\n",
    "a: {" + "k" * 900 + ": 1, " + "k" * 900 + ": 2}\n",
])
def test_a_yaml_error_echoes_the_text_it_names_cut_short(text: str) -> None:
    """A JSON record given as --config echoed 2,300 characters of itself in 'text after a
    quoted string: ...': a value echoed in an error is cut (errors.shorten)."""
    with pytest.raises(InputError) as caught:
        parse_yaml(text, "f.yaml")
    assert len(str(caught.value)) < 300 and "chars)" in str(caught.value), str(caught.value)

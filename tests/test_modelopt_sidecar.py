"""ModelOpt's hf_quant_config.json beside a config.json with no quantization_config: the
weights and the checkpoint's KV cache are read from it, as vLLM, SGLang and TensorRT-LLM read
it (modelopt_sidecar.py), from a folder, a config.json's path, or the Hub with --fetch.
Before, such a checkpoint was sized as bf16 weights with a bf16 cache."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ridgeline import resolve_model
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError
from ridgeline.hub import fetch_model
from ridgeline.modelopt_sidecar import parse_sidecar, with_sidecar
from ridgeline.quantization import checkpoint_algo, stored_formats
from tests.conftest import refused_line, run_cli

PRODUCER = {"name": "modelopt", "version": "0.27.1"}


def sidecar(algo: str | None, kv: str | None = None, **block: Any) -> dict[str, Any]:
    """hf_quant_config.json as ModelOpt writes it."""
    return {"producer": PRODUCER, "quantization": {
        "quant_algo": algo, "kv_cache_quant_algo": kv, "exclude_modules": ["lm_head"],
        **({"group_size": 16} if algo == "NVFP4" else {}), **block}}


def checkpoint(tmp_path: Path, quant: dict[str, Any] | str | None, name: str = "ckpt",
               qc: dict[str, Any] | None = None) -> Path:
    """A folder: Llama-3.1-8B's config.json (with ``qc`` as its quantization_config) and
    ``quant`` as hf_quant_config.json beside it (text as it is, a dict as JSON, None none)."""
    config = dict(load_data("models/meta-llama--Llama-3.1-8B.json"))
    if qc is not None:
        config["quantization_config"] = qc
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if quant is not None:
        text = quant if isinstance(quant, str) else json.dumps(quant)
        (folder / "hf_quant_config.json").write_text(text)
    return folder


def model_json(capsys: pytest.CaptureFixture[str], model: str, *flags: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "model", model, *flags, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def fit_json(capsys: pytest.CaptureFixture[str], model: str, engine: str,
             gpu: str = "h100") -> dict[str, Any]:
    code, out, err = run_cli(capsys, "fit", model, "--gpu", gpu, "--engine", engine, "--json")
    assert code == 0, err
    return dict(json.loads(out))


LINEAR = {"attention": "fp8", "mlp": "fp8"}


def dense(formats: Any) -> dict[str, str]:
    """The formats of the categories a dense Llama has (a uniform format names every linear
    category, experts and Mamba included)."""
    return {c: f for c, f in formats.items() if c in ("attention", "mlp")}


@pytest.mark.parametrize(("quant", "weights", "kv"), [
    (sidecar("FP8", "FP8"), "fp8", "fp8"),
    (sidecar("FP8"), "fp8", None),
    (sidecar("NVFP4", "FP8"), "nvfp4", "fp8"),
    (sidecar("NVFP4"), "nvfp4", None),
])
def test_a_folders_sidecar_gives_the_weights_and_the_cache_every_engine_serves(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, quant: dict[str, Any],
        weights: str, kv: str | None) -> None:
    folder = str(checkpoint(tmp_path, quant))
    shown = model_json(capsys, folder)
    assert shown["stored_formats"] == {"attention": weights, "mlp": weights}
    assert shown["quantization_file"] == "hf_quant_config.json"
    engines = ("vllm", "sglang", "trtllm")
    assert shown["checkpoint_kv_cache_dtypes"] == ({e: kv for e in engines} if kv else {})
    # fit's cache, each engine's auto; NVFP4 weights run under TensorRT-LLM and SGLang on
    # Blackwell alone (SGLang's ModelOptFp4Config.get_min_capability: 100)
    for engine in engines:
        gpu = "b200" if weights == "nvfp4" and engine in ("trtllm", "sglang") else "h100"
        assert fit_json(capsys, folder, engine, gpu)["kv_dtype"] == (kv or "bf16"), engine


def test_the_sidecar_shrinks_the_weights_and_doubles_the_cache_fit_sizes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Llama-3.1-8B, ModelOpt FP8 with an FP8 cache, vLLM on one H100: the weights were sized
    at bf16 (16.1 GB) and the cache at bf16; read from the file, the pool is 6.5 GiB larger
    and each token's KV half as large."""
    with_file = fit_json(capsys, str(checkpoint(tmp_path, sidecar("FP8", "FP8"))), "vllm")
    without = fit_json(capsys, str(checkpoint(tmp_path, None, "plain")), "vllm")
    assert (with_file["kv_dtype"], without["kv_dtype"]) == ("fp8", "bf16")
    assert (with_file["pool_bytes_total"] - without["pool_bytes_total"]) / 2**30 == pytest.approx(
        6.5, abs=0.05)


def test_the_model_text_says_where_the_quantization_was_read(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "model", str(checkpoint(tmp_path, sidecar("FP8", "FP8"))))
    assert code == 0, err
    assert "stored as      attention fp8, mlp fp8" in out
    assert "read from ModelOpt's hf_quant_config.json" in out
    assert "checkpoint KV  fp8 under vllm, sglang and trtllm --kv-cache-dtype auto" in out


def test_a_config_json_path_reads_the_sidecar_beside_it(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, sidecar("NVFP4", "FP8"))
    model = resolve_model(str(folder / "config.json"))
    assert dense(model.stored_format_map) == {"attention": "nvfp4", "mlp": "nvfp4"}
    assert (model.quant_method, model.quant_algo, model.kv_cache_dtype) == \
        ("modelopt", "NVFP4", "fp8")
    assert model.quantization_file == "hf_quant_config.json"
    # a renamed copy is a file of its own, whose folder's sidecar may be another model's
    renamed = folder / "llama.json"
    renamed.write_text((folder / "config.json").read_text())
    assert resolve_model(str(renamed)).stored_format_map == {}


def test_the_folder_you_stand_in_is_named_by_its_own_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`ridgeline fit . --gpu h100` inside a checkpoint's folder: the model goes by the
    folder's name, its sidecar read. Before, '.' had no stem: every line named the model ''
    (" on 1 x h100-sxm", "'s max_position_embeddings")."""
    monkeypatch.chdir(checkpoint(tmp_path, sidecar("FP8", "FP8"), name="Llama-FP8"))
    model = resolve_model(".")
    assert (model.name, model.quantization_file) == ("Llama-FP8", "hf_quant_config.json")
    code, out, err = run_cli(capsys, "fit", ".", "--gpu", "h100")
    assert code == 0, err
    assert "Llama-FP8 on 1 x h100-sxm" in out and "Llama-FP8's max_position_embeddings" in out


@pytest.mark.parametrize(("given", "name"), [
    ("Llama-3.1-8B", "Llama-3.1-8B"), ("Llama-3.1-8B/config.json", "Llama-3.1-8B"),
    ("Llama-3.1-8B/llama.json", "llama"), ("config.json", "Llama-3.1-8B"),
    ("./config.json", "Llama-3.1-8B")])
def test_a_config_is_named_by_its_folder_and_a_renamed_one_by_its_stem(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        given: str, name: str) -> None:
    """Every report's header names the model: a config.json's folder (as a Hub id names the
    repo), the whole folder name. Before, …/Llama-3.1-8B/config.json was "config", and the
    folder Llama-3.1-8B its stem "Llama-3"."""
    folder = checkpoint(tmp_path, None, name="Llama-3.1-8B")
    (folder / "llama.json").write_text((folder / "config.json").read_text())
    monkeypatch.chdir(tmp_path if given.startswith("Llama") else folder)
    assert resolve_model(given).name == name
    code, out, err = run_cli(capsys, "decode", given, "--gpu", "h100")
    assert code == 0, err
    assert out.startswith(f"{name} on 1 x h100-sxm")


def test_an_empty_quantization_config_beside_the_sidecar_is_refused_naming_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vLLM's get_config reads hf_quant_config.json only where config.json's
    quantization_config ``is None``: an empty one stands, and its quant_method "" is no
    quantization, so the engines would load the file's FP8 weights as unquantized. Before,
    ridgeline said "quantization method '(none)' is not supported"."""
    folder = checkpoint(tmp_path, sidecar("FP8", "FP8"), qc={})
    for model in (folder, folder / "config.json"):
        line = refused_line(capsys, "fit", str(model), "--gpu", "h100")
        assert "config.json: quantization_config is empty ({}), and ModelOpt's " \
            "hf_quant_config.json beside it goes unread" in line, line
        assert "(none)" not in line
    alone = checkpoint(tmp_path, None, name="alone", qc={})
    line = refused_line(capsys, "model", str(alone))
    assert "alone: quantization_config is empty ({}), so ridgeline cannot tell" in line, line
    line = refused_line(capsys, "model", str(checkpoint(tmp_path, None, "bits", {"bits": 4})))
    assert "bits: quantization_config names no quant_method" in line, line


def test_config_jsons_own_quantization_config_stands(tmp_path: Path) -> None:
    """vLLM and SGLang read the file only where config.json has none; a malformed one beside
    it is then never opened."""
    own = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    for quant in (sidecar("NVFP4", "FP8"), "not json"):
        model = resolve_model(str(checkpoint(tmp_path, quant, f"own{len(str(quant))}", own)))
        assert dense(model.stored_format_map) == LINEAR
        assert (model.quant_method, model.kv_cache_dtype, model.quantization_file) == \
            ("fp8", "", "")


@pytest.mark.parametrize(("text", "says"), [
    ("", "is empty"),
    ("{\"quantization\": ", "is not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ("{\"producer\": {\"name\": \"modelopt\"}}", "has no \"quantization\" object"),
    ("{\"quantization\": \"FP8\"}", "has no \"quantization\" object"),
])
def test_a_malformed_sidecar_is_refused_in_one_line_naming_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, says: str) -> None:
    folder = checkpoint(tmp_path, text)
    for model in (folder, folder / "config.json"):
        line = refused_line(capsys, "model", str(model))
        assert "hf_quant_config.json" in line and says in line, line


def test_an_algorithm_ridgeline_cannot_size_is_refused_by_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = refused_line(capsys, "fit", str(checkpoint(tmp_path, sidecar("W4A8_MXFP4_FP8"))),
                        "--gpu", "h100")
    assert "ModelOpt quant_algo 'W4A8_MXFP4_FP8' is not supported" in line


def test_the_block_is_read_where_modelopt_keeps_its_algorithms() -> None:
    """hf_quant_config.json's layout: quant_algo, exclude_modules and quantized_layers in the
    ``quantization`` block (quantization.modelopt_block); a null quant_algo quantizes the KV
    cache alone."""
    nested = with_sidecar({}, sidecar("NVFP4", "FP8", exclude_modules=[
        "lm_head", "model.layers.*.self_attn*"]))["quantization_config"]
    assert checkpoint_algo(nested) == "NVFP4"
    assert dense(stored_formats(nested, "m")) == {"mlp": "nvfp4"}  # attention left as it is
    # Qwen's one-output gate on its shared expert is not the shared expert
    gated = with_sidecar({}, sidecar("FP8", exclude_modules=[
        "lm_head", "model.layers.*.mlp.shared_expert_gate"]))["quantization_config"]
    assert stored_formats(gated, "m")["shared_experts"] == "fp8"
    kv_only = with_sidecar({}, sidecar(None, "FP8"))["quantization_config"]
    assert stored_formats(kv_only, "m") == {} and checkpoint_algo(kv_only) == ""
    mixed = with_sidecar({}, sidecar("MIXED_PRECISION", quantized_layers={
        "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.layers.0.mlp.experts": {"quant_algo": "NVFP4"}}))["quantization_config"]
    assert stored_formats(mixed, "m") == {"attention": "fp8", "experts": "nvfp4"}  # per layer
    with pytest.raises(InputError, match="no \"quantization\" object"):
        parse_sidecar("{}", "x/hf_quant_config.json")


class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def _hub(monkeypatch: pytest.MonkeyPatch, files: dict[str, Any]) -> list[str]:
    """urlopen answering each file's URL with ``files[name]``: a dict as JSON, an exception
    raised; a file not named answers 404."""
    seen: list[str] = []

    def fake_urlopen(request: urllib.request.Request, timeout: float) -> _Response:
        url = request.full_url
        seen.append(url)
        body = files.get(url.rsplit("/", 1)[1],
                         urllib.error.HTTPError(url, 404, "missing", {}, None))  # type: ignore[arg-type]
        if isinstance(body, Exception):
            raise body
        return _Response(json.dumps(body).encode())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return seen


LLAMA = load_data("models/meta-llama--Llama-3.1-8B.json")
HUB = "https://huggingface.co/org/llama-fp8/resolve/main/"


def test_fetch_reads_the_sidecar_beside_a_config_without_quantization(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _hub(monkeypatch, {"config.json": LLAMA,
                              "hf_quant_config.json": sidecar("FP8", "FP8")})
    shown = model_json(capsys, "org/llama-fp8", "--fetch")
    assert seen == [HUB + "config.json", HUB + "hf_quant_config.json"]
    assert shown["stored_formats"] == LINEAR
    assert shown["checkpoint_kv_cache_dtypes"] == {"vllm": "fp8", "sglang": "fp8",
                                                   "trtllm": "fp8"}
    code, out, err = run_cli(capsys, "fit", "org/llama-fp8", "--fetch", "--gpu", "h100",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["kv_dtype"] == "fp8"


def test_fetch_takes_a_404_for_no_sidecar_and_asks_nothing_of_a_quantized_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _hub(monkeypatch, {"config.json": LLAMA})
    plain = fetch_model("org/llama-fp8")
    assert plain.stored_format_map == {} and plain.quantization_file == ""
    assert seen[-1] == HUB + "hf_quant_config.json"
    own = {**LLAMA, "quantization_config": {"quant_method": "fp8"}}
    seen = _hub(monkeypatch, {"config.json": own})
    assert dense(fetch_model("org/llama-fp8").stored_format_map) == LINEAR
    assert seen == [HUB + "config.json"]  # the file is not fetched, as vLLM does not


@pytest.mark.parametrize(("answer", "says"), [
    (urllib.error.HTTPError("u", 401, "gated", {}, None), "gated"),  # type: ignore[arg-type]
    (urllib.error.HTTPError("u", 500, "oops", {}, None), "answered 500"),  # type: ignore[arg-type]
    (urllib.error.URLError("no route"), "cannot reach"),
    ([], "expected a JSON object"),
])
def test_fetch_refuses_a_sidecar_it_cannot_read_as_it_refuses_a_config(
        monkeypatch: pytest.MonkeyPatch, answer: Any, says: str) -> None:
    _hub(monkeypatch, {"config.json": LLAMA, "hf_quant_config.json": answer})
    with pytest.raises(InputError, match=says):
        fetch_model("org/llama-fp8")

"""ModelOpt's quant_algo values: the weight format each stores, and the engines that serve it
(formats.json modelopt_algos, each row with its source).

One checkpoint format, three engines' readers: vLLM serves FP8, FP8_PER_CHANNEL_PER_TOKEN,
FP8_PB_WO and NVFP4 from either file, W4A16_NVFP4 and MIXED_PRECISION from config.json only
(its convertor refuses them from hf_quant_config.json: 'Unknown ModelOpt quant algo'); SGLang
the FP8, FP4 and mixed ones; TensorRT-LLM the FP8 and NVFP4 ones and the int4 AWQ (W4A16_AWQ,
W4A8_AWQ) and int8 weight-only (W8A16) ones vLLM and SGLang have no method for. INT8 is no
weights algorithm of any of them (TensorRT-LLM's KV-cache one), and is refused as read.
``refusal`` says why an engine refuses a checkpoint's algorithm and which engine serves it,
``release_refusal`` why a release before the one that brought it refuses it (SGLang's
W4A16_NVFP4 from 0.5.19, MIXED_PRECISION from 0.5.15; vLLM's W4A16_NVFP4 from 0.21,
MIXED_PRECISION from 0.17 and its W4A16_NVFP4 layers, qwen3.6-35b-a3b's experts, from 0.22);
``needs_fp8_activations`` marks W4A8_AWQ, whose fp8 activations TensorRT-LLM multiplies on
cards of compute capability 8.9 or more only (quantization_gates.capability_problem).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ridgeline.datafiles import load_data
from ridgeline.engine_names import DISPLAY_NAMES, engine_name

if TYPE_CHECKING:
    from ridgeline.model import ModelSpec

# each engine's refusal, in its own words where it has some
_REFUSALS = {
    "vllm": "vLLM refuses at start-up ('{refusal}')",
    "sglang": "SGLang names no method for (ModelConfig._parse_modelopt_quant_config names the "
              "FP8, FP4 and MIXED_PRECISION ones only; the weights then fail to load as 16-bit "
              "ones)",
    "trtllm": "TensorRT-LLM's QuantAlgo does not list",
}
_VLLM_WORDS = {True: "Unknown ModelOpt quant algo: {algo}",  # from hf_quant_config.json
               False: "ModelOpt currently only supports: [...] quantizations in vLLM"}


@dataclass(frozen=True)
class ModelOptAlgo:
    """One quant_algo: the format its weights are stored in ('' for MIXED_PRECISION, read layer
    by layer), the engines that serve it from config.json and from hf_quant_config.json, and
    the activations' type its matmuls take where it quantizes them itself (W4A8_AWQ: fp8), and
    the release each engine that has one serves it from (``since``: SGLang's W4A16_NVFP4 0.5.19),
    the last release it serves it in (``until``: SGLang's FP8_PB_WO 0.5.17), and the release
    it serves the algorithm's layers of a format from (``layers_since``: vLLM's
    nvfp4-w4a16 layers of a MIXED_PRECISION export, 0.22), as (engine, format, release)."""

    algo: str
    format: str
    engines: tuple[str, ...]
    sidecar_engines: tuple[str, ...]
    activations: str
    source: str
    since: tuple[tuple[str, str], ...] = ()
    layers_since: tuple[tuple[str, str, str], ...] = ()
    until: tuple[tuple[str, str], ...] = ()

    def engines_from(self, sidecar: bool) -> tuple[str, ...]:
        """The engines that serve it read from hf_quant_config.json (``sidecar``) or not."""
        return self.sidecar_engines if sidecar else self.engines


@lru_cache(maxsize=1)
def modelopt_algos() -> dict[str, ModelOptAlgo]:
    return {row["algo"]: ModelOptAlgo(row["algo"], row["format"] or "", tuple(row["engines"]),
                                      tuple(row.get("sidecar_engines", row["engines"])),
                                      row.get("activations", ""), row["source"],
                                      tuple(sorted(row.get("since", {}).items())),
                                      tuple((engine, fmt, release) for engine, layers
                                            in sorted(row.get("layers_since", {}).items())
                                            for fmt, release in sorted(layers.items())),
                                      tuple(sorted(row.get("until", {}).items())))
            for row in load_data("formats.json")["modelopt_algos"]}


# a quant_algo that names no weights an engine serves, with why (formats.json's source)
KV_ONLY = {"INT8": "TensorRT-LLM takes INT8 as a KV-cache algorithm only (its QUANT_ALGO_LIST "
                   "for weights leaves it out), and vLLM and SGLang have no ModelOpt int8 "
                   "method; int8 weights are W8A16 (weight-only, TensorRT-LLM)"}


def algo_formats() -> dict[str, str]:
    """{quant_algo: weight format} of the uniform algorithms: 'W4A8_AWQ' -> 'awq-int4'."""
    return {a.algo: a.format for a in modelopt_algos().values() if a.format}


def refusal(algo: str, engine: str, sidecar: bool) -> str:
    """Why ``engine`` refuses a checkpoint of ModelOpt ``algo`` (read from hf_quant_config.json
    where ``sidecar``), naming the engines that serve it; "" where it serves it, or where the
    engine or algorithm is not one this table covers."""
    row = modelopt_algos().get(algo)
    if row is None or engine not in DISPLAY_NAMES:
        return ""
    serving = row.engines_from(sidecar)
    if engine in serving:
        return ""
    words = _REFUSALS[engine].format(refusal=_VLLM_WORDS[sidecar].format(algo=algo))
    where = " read from hf_quant_config.json" if engine in row.engines else ""
    if serving:
        others = " and ".join(engine_name(e) for e in serving)
        lever = f"{others} serve{'s' if len(serving) == 1 else ''} it: give --engine {serving[0]}"
    else:
        lever = "write it into config.json's quantization_config, which vLLM reads it from"
    return f"ModelOpt quant_algo {algo}{where}, which {words}; {lever}"


def checkpoint_refusal(spec: ModelSpec, engine: str) -> str:
    """Why ``engine`` refuses ``spec``'s ModelOpt checkpoint, as stored, by its quant_algo
    (``refusal``, read from the file it came from), or "": on any card, so Deployment.build
    asks it before the card's kernels (W4A16_NVFP4 under TensorRT-LLM on an A100 is named
    for its algorithm, not for the fp8 cache the A100 lacks), and
    quantization_gates.modelopt_problem for a layout."""
    if spec.quant_method != "modelopt":
        return ""
    why = refusal(spec.quant_algo, engine, _from_sidecar(spec))
    return f"{spec.name} is stored in {why}" if why else ""


def served_since(algo: str, engine: str) -> str | None:
    """The release ``engine`` serves ModelOpt ``algo`` from, where a row names one (SGLang's
    W4A16_NVFP4: '0.5.19'); None where every release modelled serves it, or none does."""
    row = modelopt_algos().get(algo)
    return dict(row.since).get(engine) if row else None


def served_until(algo: str, engine: str) -> str | None:
    """The last release ``engine`` serves ModelOpt ``algo`` in, where a row names one (SGLang's
    FP8_PB_WO: '0.5.17'; 0.5.18 reads quant_algo FP8 alone as modelopt_fp8); None where every
    release modelled from ``served_since`` on serves it."""
    row = modelopt_algos().get(algo)
    return dict(row.until).get(engine) if row else None


def layers_served_since(spec: ModelSpec, engine: str) -> tuple[tuple[str, str], ...]:
    """(format, release) for each of ``spec``'s layer formats that ``engine`` serves under its
    ModelOpt algorithm from a release of its own, where a row names any (qwen3.6-35b-a3b's
    nvfp4-w4a16 experts under vLLM: (('nvfp4-w4a16', '0.22'),)); () where there are none."""
    row = modelopt_algos().get(spec.quant_algo)
    stored = set(spec.stored_format_map.values())
    return tuple((fmt, release) for e, fmt, release in (row.layers_since if row else ())
                 if e == engine and fmt in stored)


# each release gate's reason, in the engine's own words where it has some (formats.json source)
_RELEASE_WORDS = {
    ("sglang", "W4A16_NVFP4"): "its ModelOptFp4Config refuses it at start-up ('ModelOpt "
                               "currently only supports: FP8, NVFP4 quantizations in sglang')",
    ("sglang", "MIXED_PRECISION"): "it reads MIXED_PRECISION as w4afp8 (int4 experts with fp8 "
                                   "activations), which holds no {layers} layers, so the weights "
                                   "fail to load",
    ("vllm", "W4A16_NVFP4"): "its ModelOpt config refuses it at start-up ('ModelOpt currently "
                             "only supports: [...] quantizations in vLLM')",
    ("vllm", "MIXED_PRECISION"): "it reads the checkpoint with ModelOptFp8Config, which refuses "
                                 "it at start-up ('ModelOpt currently only supports: [...] "
                                 "quantizations in vLLM')",
}
# each release's reason for refusing an algorithm an earlier release served (until)
# (engine, read from hf_quant_config.json)
_DROPPED_WORDS = {
    ("sglang", False): "from 0.5.18 its ModelOptFp8Config takes quant_algo FP8 alone and refuses "
                       "any other at start-up ('ModelOptFp8Config only supports regular FP8 "
                       "quantization')",
    ("sglang", True): "from 0.5.18 its ModelConfig names modelopt_fp8 for quant_algo FP8 alone "
                      "and no method for any other, so the fp8 weights fail to load as 16-bit "
                      "ones",
}
# the same where the algorithm is served but its layers of a format are not yet (layers_since)
_LAYER_WORDS = {
    ("vllm", "MIXED_PRECISION"): "its ModelOptMixedPrecisionConfig runs fp8 and nvfp4 layers only "
                                 "and leaves the {layers} ones 16-bit, so their packed weights "
                                 "fail to load",
}


def release_refusal(spec: ModelSpec, engine: str, since: str, version: str,
                    layer_format: str = "") -> str:
    """Why ``engine`` at ``version``, a release before ``since``, refuses ``spec``'s ModelOpt
    checkpoint (or, with ``layer_format``, its layers of that format: layers_served_since),
    naming the layers' formats where the algorithm is MIXED_PRECISION: 'qwen3.6-35b-a3b is
    stored in ModelOpt quant_algo MIXED_PRECISION (fp8 and nvfp4-w4a16 layers), which SGLang
    0.5.14 does not serve: it reads MIXED_PRECISION as w4afp8 …; SGLang serves it from
    v0.5.15'."""
    formats = sorted(set(spec.stored_format_map.values()))
    layers = f" ({' and '.join(formats)} layers)" if spec.quant_algo == "MIXED_PRECISION" else ""
    mixed = " and ".join(f for f in formats if f != "fp8") or "such"
    words = _LAYER_WORDS if layer_format else _RELEASE_WORDS
    why = words.get((engine, spec.quant_algo), "it has no method for it")
    mixed = layer_format or mixed
    name = engine_name(engine)
    return (f"{spec.name} is stored in ModelOpt quant_algo {spec.quant_algo}{layers}, which "
            f"{name} {version} does not serve: {why.format(layers=mixed)}; {name} serves it "
            f"from v{since}: name --engine-version {since} or later, or another --engine")


def dropped_refusal(spec: ModelSpec, engine: str, until: str, version: str | None) -> str:
    """Why ``engine`` at ``version`` (None: its newest release), a release after ``until``,
    refuses ``spec``'s ModelOpt checkpoint, naming the engines that still serve it: an
    FP8_PB_WO export under SGLang 0.5.18 or later ('ModelOptFp8Config only supports regular
    FP8 quantization'), which SGLang 0.5.17, vLLM and TensorRT-LLM serve."""
    row = modelopt_algos()[spec.quant_algo]
    name = engine_name(engine)
    at = f"{name} {version}" if version else f"{name}'s newest release"
    sidecar = _from_sidecar(spec)
    why = _DROPPED_WORDS.get((engine, sidecar), "it has no method for it")
    others = [e for e in row.engines_from(sidecar) if e != engine]
    elsewhere = "".join(f", or --engine {e}" for e in others)
    return (f"{spec.name} is stored in ModelOpt quant_algo {spec.quant_algo}, which {at} does "
            f"not serve: {why}; {name} serves it up to v{until}: name --engine-version {until} "
            f"or earlier{elsewhere}")


def _from_sidecar(spec: ModelSpec) -> bool:
    """Whether ``spec``'s quant_algo was read from hf_quant_config.json, not config.json."""
    from ridgeline.modelopt_sidecar import SIDECAR

    return spec.quantization_file == SIDECAR


# TensorRT-LLM's fp8 matmuls need compute capability 8.9 (engine_platforms.TRTLLM_NO_FP8_FAMILIES)
FP8_ACTIVATIONS = "fp8"


def needs_fp8_activations(algo: str) -> bool:
    """Whether ``algo``'s matmuls take fp8 activations (W4A8_AWQ), so need fp8 tensor cores."""
    row = modelopt_algos().get(algo)
    return row is not None and row.activations == FP8_ACTIVATIONS

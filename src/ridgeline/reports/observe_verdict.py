"""`ridgeline observe`'s verdict: its checks together — the pool (observe_pool), the step's
predicted and measured latency (observe_latency), decode's floor (observe_floor), the wall and
its lever (observe_wall), each built on the one before — and whether the metrics name the
model described."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ridgeline.catalog import model_entry, normalise
from ridgeline.errors import InputError
from ridgeline.reports.observe_wall import ObservedWall


@dataclass(frozen=True)
class ObserveVerdict(ObservedWall):
    """The figures and the wall, from the observation and the deployment described:
    ObserveReport (reports/observe.py) adds the worked steps and renders them."""

    @property
    def model_caution(self) -> str | None:
        """A caution when the metrics' model_name label names another model than --model."""
        model = self.deployment.model
        try:
            entry = model_entry(model.name)
        except InputError:  # a config.json: no catalog names to compare
            return None
        others = [m for m in self.obs.model_names if not same_model(m, (entry.id, entry.hf_id))]
        if not others:
            return None
        return (f"the engine labels its metrics model_name={others[0]!r}, not --model "
                f"{entry.id} ({entry.hf_id}): the figures below are for {entry.id}")


    @property
    def weights_caution(self) -> str | None:
        """A caution when the metrics' model_name names a quantized checkpoint ('…-FP8',
        '…-AWQ', '…-NVFP4': ``named_weights``) while the weights described are 16-bit (no
        --weights): every figure would be priced at twice the bytes or more."""
        if self.deployment.bytes_per_weight < 1.5:  # the weights described are quantized
            return None
        for label in self.obs.model_names:
            named = named_weights(label)
            if named is not None:
                fmt, word = named
                return (f"the engine serves model_name={label!r}, whose name says {word} "
                        f"weights, but the weights described are {self.deployment.weights.label}: "
                        f"give --weights {fmt} (as the checkpoint stores them), or every "
                        "figure here prices 16-bit weights")
        return None


# a quantized checkpoint's name part (between hyphens, dots or underscores, case aside) and
# the --weights it takes: RedHatAI's '…-FP8', '…-quantized.w4a16' and '…-quantized.w8a8'
# (int8), '…-AWQ', '…-GPTQ-Int4', '…-GPTQ-Int8', NVIDIA's '…-NVFP4' and '…-FP4', '…-MXFP4',
# Unsloth's '…-bnb-4bit'; the first part found wins, in this order ("W8A8-FP8" is fp8)
_NAMED_WEIGHTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("nvfp4",), "nvfp4"), (("mxfp4",), "mxfp4"), (("fp4",), "nvfp4"),
    (("gptq", "int8"), "gptq-int8"), (("gptq",), "gptq-int4"), (("awq",), "awq-int4"),
    (("fp8",), "fp8"), (("w4a16",), "w4a16"), (("w8a8",), "int8"), (("int8",), "int8"),
    (("bnb", "4bit"), "bnb-nf4"),
)


def named_weights(label: str) -> tuple[str, str] | None:
    """The --weights a checkpoint's name gives, and the name part that gave it:
    'RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8' is ('fp8', 'FP8'),
    'hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4' ('awq-int4', 'AWQ'); None for a
    name with none ('meta-llama/Llama-3.1-8B-Instruct')."""
    name = served_name(label)
    parts = [p for p in re.split(r"[-_.]", name.lower()) if p]
    for needed, fmt in _NAMED_WEIGHTS:
        if all(p in parts for p in needed):
            word = next(w for w in re.split(r"[-_.]", name) if w.lower() == needed[0])
            return fmt, word
    return None


# a Hugging Face cache's snapshot folder: …/models--{org}--{name}/snapshots/{commit}
_HF_SNAPSHOT = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def served_name(label: str) -> str:
    """The model's name in a model_name label: its last path part, or, for a Hugging Face
    cache's snapshot folder ('/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-
    Instruct/snapshots/0e9e39f…'), the repository's name ('Llama-3.1-8B-Instruct'), not the
    commit's hash."""
    snapshot = _HF_SNAPSHOT.search(label)
    if snapshot is not None:
        return snapshot[2]
    return label.rstrip("/").rsplit("/", 1)[-1]


def same_model(label: str, names: tuple[str, ...]) -> bool:
    """Loosely: the label's model name (``served_name``) and one of ``names`` (a catalog id, a
    Hugging Face id) contain each other between hyphens, case aside —
    'Llama-3.1-8B-Instruct-FP8' is llama-3.1-8b, 'Llama-3.1-405B' is not."""
    mine = f"-{normalise(served_name(label))}-"
    for name in names:
        theirs = f"-{normalise(name.rsplit('/', 1)[-1])}-"
        if mine in theirs or theirs in mine:
            return True
    return False

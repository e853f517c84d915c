"""The bundled data: model configs by alias, type defaults, and forgiving name lookup.

Files are read here and nowhere else in the core (hardware and formats call ``load_data``;
ModelOpt's hf_quant_config.json beside a config.json is read by ``modelopt_sidecar.py``).
A model name resolves as: a catalog alias (``llama-3.1-70b``), a Hugging Face id
(``meta-llama/Llama-3.1-70B``), a path to a local ``config.json`` or its folder (with the
hf_quant_config.json beside it where config.json has no quantization_config), or a path to a
``.gguf`` (``gguf_model.py`` reads its header).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.datafiles import load_data
from ridgeline.errors import InputError, shorten
from ridgeline.model import ModelSpec
from ridgeline.modelopt_sidecar import spec_from_disk
from ridgeline.userfiles import CompressedFileError, json_object, read_text


def normalise(name: str) -> str:
    """Lower case, runs of space/underscore/slash become one hyphen: 'NVIDIA H100' -> 'nvidia-h100'."""
    return re.sub(r"[\s_/]+", "-", name.strip().lower())


def nearest_spelling(typed: str, known: Sequence[str]) -> str | None:
    """The one of ``known`` (a command's flags, the commands, the engines) ``typed`` is a slip
    from, else None: ``--batc`` is 0.91 alike to --batch by difflib's ratio, past the 0.8
    asked; ``fti`` two letters of fit swapped (a ratio of 0.67, too short a word for the ratio
    to reach 0.8); ``--foo`` is like nothing decode takes."""
    others = [k for k in known if k != typed]
    swapped = [k for k in others if len(k) == len(typed) and any(
        typed == k[:i] + k[i + 1] + k[i] + k[i + 2:] for i in range(len(k) - 1))]
    close = swapped or difflib.get_close_matches(typed, others, n=1, cutoff=0.8)
    return close[0] if close else None


def resolve_name(name: str, table: Mapping[str, str], what: str, listing: str = "") -> str:
    """Look ``name`` up in {normalised alias: id}; unknown names list the closest ids, or,
    with none close, the command ``listing`` that lists them all."""
    key = normalise(name)
    if key in table:
        return table[key]
    ids = sorted(set(table.values()))
    # The name without its separators, where one id's alias reads so ("rtx4090" -> "rtx-4090")
    bare = sorted({i for a, i in table.items() if a.replace("-", "") == key.replace("-", "")})
    if len(bare) == 1:
        return bare[0]
    # A unique id that starts with or contains the name is taken ("h200" -> "h200-sxm").
    matches = sorted({i for a, i in table.items() if a.startswith(key + "-") or a == key})
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise InputError(f"{what} {shorten(name)!r} is ambiguous: it could be {', '.join(matches[:8])}")
    close = difflib.get_close_matches(key, list(table), n=8, cutoff=0.5)
    # difflib ranks them best first; keep that order, each id once ("llama-3.1-8bb" names
    # llama-3.1-8b first, not the alphabetically earlier llama-3-8b), but the name's own
    # family first: "mistral-7b-instruct" names mistral-7b before falcon-7b, whose alias
    # falcon-7b-instruct shares more letters with it
    family = key.split("-")[0]
    close.sort(key=lambda alias: not alias.startswith(family))
    suggestions = list(dict.fromkeys(table[c] for c in close))[:5]
    if suggestions:
        raise InputError(f"unknown {what} {shorten(name)!r}; closest: {', '.join(suggestions)}")
    if listing:
        raise InputError(f"unknown {what} {shorten(name)!r}, and none of the {len(ids)} known "
                         f"is close: `{listing}` lists them")
    raise InputError(f"unknown {what} {shorten(name)!r}; known: {', '.join(ids[:8])}"
                     + (", …" if len(ids) > 8 else ""))


@dataclass(frozen=True)
class ModelVariant:
    """Another Hugging Face repo (an instruct or chat tune) whose config.json is the entry's
    but for token ids and tooling fields; ``source`` is that config.json."""
    hf_id: str
    source: str


@dataclass(frozen=True)
class ModelEntry:
    id: str
    hf_id: str
    file: str
    card_total_params: str
    card_active_params: str | None
    card_source: str
    card_kind: str  # exact | size-class
    reference_total_params: int | None = None
    # the Hub's safetensors total as written ("8.03B"), kept apart where the card names only a
    # size class ("8B"): a rounded recount, never shown as the card's figure
    hf_reported_total_params: str | None = None
    reference_active_params: int | None = None
    reference_source: str | None = None
    card_active_convention: str = "with-embedding"
    variants: tuple[ModelVariant, ...] = ()
    # the rope_scaling block the card documents past the native context (Qwen3's YaRN), as
    # (key, value) pairs, and where the card says so
    card_rope_scaling: tuple[tuple[str, Any], ...] = ()
    card_rope_source: str | None = None

    @property
    def hf_ids(self) -> tuple[str, ...]:
        """The entry's Hugging Face id, then its variants'."""
        return (self.hf_id, *(v.hf_id for v in self.variants))


_PARAM_SCALES = {"M": 10**6, "B": 10**9, "T": 10**12}


def card_params(label: str | None) -> int | None:
    """A model card's parameter label as a count, for --json: "72.7B" → 72,700,000,000,
    "1T" → 10^12 (decimal, so 7.61B is 7,610,000,000 exactly); None stays None."""
    if label is None:
        return None
    number, scale = label[:-1], _PARAM_SCALES[label[-1]]
    whole, _, frac = number.partition(".")
    return int(whole) * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)


@dataclass(frozen=True)
class UnbundledRepo:
    """A Hugging Face repo with no config here, the bundled entry ``closest`` to it, and what
    is known of how their configs differ (``note``, read where ``source`` says)."""
    hf_id: str
    closest: str
    note: str
    source: str


@lru_cache(maxsize=1)
def unbundled_repos() -> tuple[UnbundledRepo, ...]:
    return tuple(UnbundledRepo(**row) for row in load_data("models/index.json")["not_bundled"])


def unbundled_repo(name: str) -> UnbundledRepo | None:
    """The record of a repo the catalog knows of but does not bundle, by its id or its name
    without the owner ('Kimi-K2-Instruct-0905'); None for any other name."""
    key = normalise(name)
    for repo in unbundled_repos():
        if key in (normalise(repo.hf_id), normalise(repo.hf_id.split("/")[1])):
            return repo
    return None


@lru_cache(maxsize=1)
def model_entries() -> tuple[ModelEntry, ...]:
    return tuple(ModelEntry(**{**row, "variants": tuple(ModelVariant(**v) for v in
                                                        row.get("variants", ())),
                               "card_rope_scaling": tuple(
                                   row.get("card_rope_scaling", {}).items())})
                 for row in load_data("models/index.json")["models"])


@lru_cache(maxsize=1)
def renamed_repos() -> dict[str, str]:
    """{a repo's former Hugging Face id: its id now} ('meta-llama/Meta-Llama-3.1-8B-Instruct'
    -> 'meta-llama/Llama-3.1-8B-Instruct'), as index.json's ``renamed`` records them."""
    return {row["hf_id"]: row["now"] for row in load_data("models/index.json")["renamed"]}


@lru_cache(maxsize=1)
def _model_names() -> dict[str, str]:
    table: dict[str, str] = {}
    for entry in model_entries():
        for alias in (entry.id, *entry.hf_ids, *(h.split("/")[1] for h in entry.hf_ids),
                      entry.file[:-5]):
            table[normalise(alias)] = entry.id
    for former, now in renamed_repos().items():  # the Hub redirects the old name
        for alias in (former, former.split("/")[1]):
            table[normalise(alias)] = table[normalise(now)]
    return table


def hub_id(name: str) -> str | None:
    """The Hugging Face id ``name`` spells, in the Hub's casing: a catalog entry's or one of
    its variants', whole or without its owner ('Llama-3.1-70B-Instruct' ->
    'meta-llama/Llama-3.1-70B-Instruct'), a renamed repo's id now; None for a name that
    spells none (a file)."""
    key = normalise(name)
    for former, now in renamed_repos().items():
        if key in (normalise(former), normalise(former.split("/")[1])):
            return now
    for entry in model_entries():
        for hf in entry.hf_ids:
            if key in (normalise(hf), normalise(hf.split("/")[1])):
                return hf
    return None


def catalog_model_id(name: str) -> str | None:
    """The catalog entry ``name`` resolves to as resolve_model resolves it (an alias, a Hugging
    Face id or a variant's: 'meta-llama/Llama-3.1-8B-Instruct' -> 'llama-3.1-8b'), or None
    for a file, a folder or a name the catalog does not know (nothing is read)."""
    if not name or not name.strip():
        return None
    path = Path(name).expanduser()
    if name.strip().lower().endswith((".gguf", ".json")) or _on_disk(path) or _special(path):
        return None
    try:
        return resolve_name(name, _model_names(), "model")
    except InputError:
        return None


def model_entry(model_id: str) -> ModelEntry:
    for entry in model_entries():
        if entry.id == model_id:
            return entry
    raise InputError(f"unknown model {model_id!r}")


@cache
def catalog_model(model_id: str) -> ModelSpec:
    entry = model_entry(model_id)
    return spec_from_hf_config(load_data(f"models/{entry.file}"), name=entry.id)


def resolve_model(name: str | os.PathLike[str], fetchable: bool = True) -> ModelSpec:
    """A catalog alias ('llama-3.1-8b': 32 layers of width 4,096, GQA 32 over 8 heads of
    128), a Hugging Face id in the catalog ('meta-llama/Llama-3.1-8B-Instruct'), a path to a
    config.json (a str or a pathlib.Path), or a path to a .gguf file (its header read as the
    model, ``gguf_model.py``). A catalog model is one shared, frozen ModelSpec.
    ``fetchable``: whether the command asking takes --fetch (its hint for an id not bundled)."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise InputError(f"model must be a name or a path such as 'llama-3.1-8b', got "
                         f"{type(name).__name__} {name!r:.40}")
    if not name or not name.strip():
        raise InputError("model name is empty")
    path = Path(name).expanduser()
    if name.strip().lower().endswith(".gguf"):
        if not (_on_disk(path) and path.is_file()):
            raise InputError(gguf_refusal(name))
        from ridgeline.gguf_model import spec_from_gguf  # it imports precision, which imports us

        return spec_from_gguf(path)
    if name.endswith(".json") or _on_disk(path) or _special(path):
        # ModelOpt's hf_quant_config.json beside it, where config.json has no quantization_config
        return spec_from_disk(path, read_config_file(path))
    try:
        return catalog_model(resolve_name(name, _model_names(), "model", "ridgeline model"))
    except InputError as exc:
        known = unbundled_repo(name)
        # a repo known but not bundled: the closest entry, and how its config is known to differ
        message = str(exc) if known is None else (
            f"unknown model {shorten(name)!r}; closest: {known.closest} ({known.note})")
        if "/" in name.strip("/") and not name.startswith((".", "/", "~")):
            fetch = "--fetch reads its config.json from the Hugging Face Hub" if fetchable \
                else (f"give the path to its config.json (`ridgeline model {shorten(name)} "
                      "--fetch` reads it from the Hugging Face Hub)")
            raise InputError(f"{message}; {shorten(name)!r} is not bundled: {fetch}") from None
        if known is not None:
            raise InputError(message) from None
        raise


def gguf_refusal(name: str) -> str:
    """What to say of a .gguf given as the model that is not a file here: ridgeline reads a
    local GGUF's header, or the architecture from a config.json (a catalog name, a Hub id, or
    a file) and the GGUF's type from --weights."""
    return (f"{shorten(name)}: no such GGUF file here (ridgeline reads a .gguf's header from "
            "disk, and does not fetch one): give the file's path, or the model it was made from "
            "(a name `ridgeline model` lists, a Hugging Face id, or its config.json) and the "
            "GGUF's type with --weights (q4_k_m, q8_0, iq2_xxs, …)")


def _on_disk(path: Path) -> bool:
    """Whether a file or folder is there (a name too long for a path, or a symlink loop, is
    not one)."""
    try:
        return path.is_file() or path.is_dir()
    except (OSError, RuntimeError):
        return False


def _special(path: Path) -> str | None:
    """What a path that is there but is neither a file nor a folder is: "pipe" (as
    <(command) gives, read like a file), "socket" or "device" (/dev/null); else None."""
    try:
        mode = path.stat().st_mode
    except (OSError, RuntimeError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "pipe" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"


def read_config_file(path: Path) -> Mapping[str, Any]:
    """Read a config.json (or a folder holding one); refuse anything that is not one."""
    if _on_disk(path) and path.is_dir():
        path = path / "config.json"
    kind = _special(path)
    if kind not in (None, "pipe"):
        raise InputError(f"{shorten(str(path))} is a {kind}, not a file: give a model's "
                         "config.json")
    if kind is None and (not _on_disk(path) or path.is_dir()):
        raise InputError(f"no such config file: {shorten(str(path))}")
    try:
        text = read_text(path)
    except CompressedFileError as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError as exc:  # a binary file: /bin/ls, a .safetensors shard
        raise InputError(f"{shorten(str(path))} is not a text file (byte {exc.object[exc.start]:#04x} "
                         f"at offset {exc.start:,} is no UTF-8): give a model's config.json"
                         ) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    return parse_config_text(text, str(path))


def parse_config_text(text: str, origin: str) -> Mapping[str, Any]:
    config = json_object(text, origin, "a config.json")
    if "memory_bandwidth_bytes_per_s" in config and "peak_flops" in config:
        raise InputError(f"{origin} is an accelerator record, not a model's config.json "
                         "(give it to --gpu-file)")
    if isinstance(config.get("engines"), dict) and "model_type" not in config:
        raise InputError(f"{origin} is a file of engine profiles, not a model's config.json "
                         "(give it to --profile)")
    return config


def all_model_ids() -> Iterable[str]:
    return [entry.id for entry in model_entries()]

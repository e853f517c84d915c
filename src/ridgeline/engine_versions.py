"""What --engine-version takes: a build for llama.cpp (b9400), a release for vLLM and SGLang
(0.11) and for TensorRT-LLM (1.2.0, 1.0.0rc6: the releases whose defaults are modelled)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from ridgeline.datafiles import engine_defaults, load_data
from ridgeline.engine_names import engine_name
from ridgeline.errors import InputError
from ridgeline.sglang_memory import (
    sglang_algorithm_from,
    sglang_algorithm_key,
    sglang_data,
    sglang_era,
    sglang_release,
)
from ridgeline.units import ascii_whole
from ridgeline.vllm_memory import parse_version, vllm_accounting


def llamacpp_build(text: str) -> int | None:
    """'b9400', 'B9400' or '9400' → 9400; None for anything else (a vLLM/SGLang version, or
    build 0, which never was)."""
    match = re.fullmatch(r"\s*[bB]?([0-9]+)\s*", text)  # ASCII: \d takes '１' and '٣' too
    build = ascii_whole(match.group(1)) if match else None
    return build or None


def check_engine_version(engine: str, version: str) -> None:
    """The version is one this engine has and ridgeline models, or a one-line error: vLLM's
    by its accounting eras, SGLang's by its memory-default eras (sglang_era: 1.0 and 0.2
    refused), so that prefix, which sizes no pool, refuses the releases fit refuses."""
    check_version_kind(engine, version)
    if engine == "vllm":
        vllm_accounting(version)
    elif engine == "sglang":
        sglang_era(version)


def modelled_version(engine: str, version: str | None) -> str | None:
    """``version`` where ridgeline models it (``check_engine_version`` takes it), else None:
    the engine's defaults, as a run that names no version is priced. A measurement's notes may
    name a release no rule here covers (a vLLM 1.x, a number misread as one); what follows the
    version (a hybrid's state dtype) is then priced as the row's engine without one, not
    refused."""
    if version is None:
        return None
    try:
        check_engine_version(engine, version)
    except InputError:
        return None
    return version


def sized_version(engine: str, version: str | None) -> str | None:
    """The release whose rules sized a pool, as --json names it: ``version`` where given,
    else the one a run without --engine-version is priced as: vLLM's default_version (0.34),
    SGLang's newest_checked (0.5.23, its newest default rule); None for TensorRT-LLM and
    llama.cpp, whose defaults here span releases (engines.json ``version``)."""
    if version is not None:
        return version
    if engine == "vllm":
        return str(engine_defaults("vllm")["default_version"])
    return str(sglang_data()["newest_checked"]) if engine == "sglang" else None


def engine_release(engine: str, version: str | None, named: bool = False) -> str:
    """The engine as an answer names it beside the release it was priced as (sized_version):
    'vllm 0.34', 'sglang 0.5.23', 'vllm 0.19' where --engine-version 0.19 was given; the
    engine alone where no release is (TensorRT-LLM: 'trtllm'). fit's header, simulate's,
    and prefill's "expected on" lines; ``named``, as its project spells it (engine_name), in
    decode's prose: 'vLLM 0.34', 'TensorRT-LLM'."""
    release = sized_version(engine, version)
    name = engine_name(engine) if named else engine
    return f"{name} {release}" if release else name


def check_version_kind(engine: str, version: str) -> None:
    """llama.cpp takes a build (b9400), vLLM and SGLang a release (0.11), others neither: one
    line of the same shape for every engine, naming what was given and what the engine
    takes, before any rule reads the version (SGLang's CUDA-graph sizes read it before its
    pool does)."""
    build = llamacpp_build(version) is not None
    if engine.startswith("llama.cpp"):
        if not build:
            raise InputError(f"--engine-version {version}: not a llama.cpp build (expected a "
                             "build, as b9400)")
        return
    if engine not in ("vllm", "sglang", "trtllm"):
        raise InputError(f"--engine-version models vLLM's, SGLang's and TensorRT-LLM's "
                         f"versions and llama.cpp's builds; {engine} has none")
    expected = "(expected a release, as 1.2.0 or 1.0.0rc6)" if engine == "trtllm" else \
        "(expected a release, as 0.11 or v0.6.4)"
    if build:
        raise InputError(f"--engine-version {version}: a llama.cpp build, not a version of "
                         f"{engine_name(engine)} {expected}")
    try:
        parse_version(version)
    except InputError:
        raise InputError(f"--engine-version {version}: not a version of {engine_name(engine)} "
                         f"{expected}") from None
    if engine == "trtllm":
        check_trtllm_release(version)


def check_trtllm_release(version: str) -> None:
    """A TensorRT-LLM release whose defaults are modelled (engines.json trtllm.releases: 1.0
    to 1.2, their release candidates and patches), or a one-line error naming the range and
    what the release outside it does differently: 0.21.0 ran the prebuilt TensorRT engine by
    default; 1.3.0rc5 merges a YAML's kv_cache_config into the flags' and pools a hybrid's
    Mamba state."""
    from ridgeline.vllm_memory import in_releases

    releases = engine_defaults("trtllm")["releases"]
    if in_releases(version, releases):
        return
    early = parse_version(version) < parse_version(releases["from"])
    why = (f"before {releases['from']} trtllm-serve ran the prebuilt TensorRT engine by "
           "default, whose defaults are not these" if early else
           "later releases merge a YAML's kv_cache_config into the flags' and keep a hybrid's "
           "Mamba state in the KV pool (PR #12185), which ridgeline does not model")
    raise InputError(f"--engine-version {version}: ridgeline models TensorRT-LLM "
                     f"{releases['from']} to {releases['newest']} (their rc and patch "
                     f"releases too); {why}; name a release in that range, or leave "
                     f"--engine-version out for {releases['newest']}'s defaults")


def release_text(text: str) -> str:
    """--engine-version as ridgeline keeps and prints it: stripped, and a release's leading v
    dropped ('v0.11.0' → '0.11.0', as vllm_accounting already labelled vLLM's), for every
    engine alike; a llama.cpp build ('b9400') and anything else as given."""
    text = text.strip()
    return text[1:] if re.match(r"[vV]\d+\.", text) else text


def release_reached(version: str, release: str) -> bool:
    """Whether --engine-version ``version`` is ``release`` or later ('0.18' is 0.18.0:
    vllm_memory.parse_version reads the parts left out as 0)."""
    return parse_version(version) >= parse_version(release)


@cache
def _removed_flags(engine: str) -> dict[str, dict[str, Any]]:
    """data/removed_flags.json's records of ``engine``, by each spelling."""
    records = load_data("removed_flags.json").get(engine, [])
    return {flag: record for record in records for flag in record["flags"]}


def removed_flags(engine: str) -> tuple[str, ...]:
    """The spellings some release of ``engine`` removed (data/removed_flags.json)."""
    return tuple(_removed_flags(engine))


def removed_flag_problem(engine: str, version: str | None, flag: str,
                         given: str = "") -> str:
    """Why ``engine`` at ``version`` refuses ``flag`` (named ``given`` where a config file's
    key gave it), or "": vLLM 0.18.0 removed --swap-space (PR #36216), 0.12.0
    --disable-log-requests and the EPLB flags beside --eplb-config, 0.8.3 --speculative-model
    (data/removed_flags.json). No version, or one that is no version of the engine's (refused
    where the version is checked): "", the flag read as the releases that had it read it."""
    record = _removed_flags(engine).get(flag)
    if version is None or record is None:
        return ""
    try:
        if release_before(engine, version, record["removed_in"]):
            return ""
    except InputError:
        return ""
    said = f" ({given})" if given and given != flag else ""
    return (f"{engine_name(engine)} {version} has no {flag}{said}: it was removed in v{record['removed_in']} "
            f"({record['pr']}); {record['replacement']}, or name an earlier --engine-version")


def expert_parallel_problem(engine: str, version: str | None) -> str:
    """Why ``engine`` at ``version`` cannot run a model's experts expert-parallel, or "" (no
    version: the newest modelled): vLLM's --enable-expert-parallel came in 0.8 (PR #14305),
    SGLang's --enable-ep-moe in 0.4.0.post1 (PR #2371) (engines.json cli.ep_since)."""
    cli = engine_defaults(engine).get("cli", {})
    since = cli.get("ep_since")
    if not release_before(engine, version, since):
        return ""
    flag = cli.get("ep_switch", {}).get("flag", cli["ep"])
    return (f"{engine_name(engine)} {version} has no expert parallelism: {flag} came in v{since} "
            "(leave --enable-expert-parallel out, or name a later --engine-version)")


PIPELINE_FROM = (0, 5, 1)  # vLLM's first release with --pipeline-parallel-size (PR #4412)


def pipeline_parallel_problem(engine: str, version: str | None, stages: int) -> str:
    """Why ``engine`` at ``version`` cannot run ``stages`` pipeline stages, or "" (no
    version: the newest modelled; one stage: no pipeline): vLLM's --pipeline-parallel-size
    came in v0.5.1 (PR #4412), so 0.4 refuses PP 2 and runs PP 1."""
    if engine != "vllm" or stages <= 1 or not version \
            or parse_version(version) >= PIPELINE_FROM:
        return ""
    return (f"vLLM {version} has no pipeline parallelism: it came in v0.5.1 (PR #4412; "
            "vLLM #6054)")


def split_launch_problem(engine: str, version: str | None) -> str:
    """Why ``engine`` at ``version`` cannot run a split's printed launch, or "" (no version:
    the newest modelled; an engine without the check): vLLM's NixlConnector and its proxy came
    in v0.9.0 (PR #17751) and only the V1 engine drives it, SGLang's --disaggregation-mode with
    --disaggregation-transfer-backend in v0.4.6 (PRs #4654, #5328) (engines.json
    cli.disaggregated.since). The split is still priced; its commands are not printed."""
    d = engine_defaults(engine).get("cli", {}).get("disaggregated", {})
    since = d.get("since")
    if release_before(engine, version, since):
        return (f"{engine_name(engine)} {version} cannot launch this split: {d['since_what']} came "
                f"in v{since} (name a later --engine-version for its commands)")
    if engine == "vllm" and version is not None and vllm_accounting(version).engine == "V0":
        return (f"vLLM {version} cannot launch this split: NixlConnector is a V1 engine "
                "connector, and VLLM_USE_V1=0 runs V0 (drop V0 for its commands)")
    return ""


def release_before(engine: str, version: str | None, since: str | None) -> bool:
    """Whether ``version`` is a release before ``since`` (SGLang's order: 0.4.0 <
    0.4.0.post1); False where either is None."""
    if version is None or since is None:
        return False
    if engine == "sglang":
        return sglang_release(version) < sglang_release(since)
    return not release_reached(version, since)


def speculative_problem(engine: str, version: str | None, draft_method: str,
                        algorithm: str = "") -> str:
    """Why ``engine`` at ``version`` has no ``draft_method`` drafter (--spec-method's words;
    ``algorithm`` SGLang's name where its flags gave one), or "" (no version: the newest
    modelled): SGLang's --speculative-algorithm EAGLE came after v0.4.1, NEXTN (mtp) in
    v0.4.3.post1, EAGLE3 in v0.4.4.post2, STANDALONE (draft-model) in v0.5.2, NGRAM in v0.5.3
    (engines.json sglang.speculative_algorithms); an earlier release refuses the flag."""
    since = sglang_algorithm_from(draft_method, algorithm) if engine == "sglang" else None
    if not release_before(engine, version, since):
        return ""
    name = sglang_data()["speculative_algorithms"][
        sglang_algorithm_key(draft_method, algorithm)]["algorithm"]
    return (f"SGLang {version} has no --speculative-algorithm {name} (--spec-method "
            f"{draft_method}): it came in v{since} (name a later --engine-version, or another "
            "drafter)")

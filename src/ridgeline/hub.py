"""Fetch a config.json from the Hugging Face Hub — only when the user asks (``--fetch``).

Never called at import time or in tests. Uses the standard library; a token in
``HF_TOKEN`` is sent for gated repositories. Where config.json has no quantization_config,
ModelOpt's hf_quant_config.json is fetched beside it, as vLLM's and SGLang's loaders fetch it
(modelopt_sidecar.py); a repo without one answers 404, which means none.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ridgeline.catalog import parse_config_text
from ridgeline.errors import InputError
from ridgeline.model import ModelSpec
from ridgeline.modelopt_sidecar import SIDECAR, needs_sidecar, parse_sidecar, spec_with_sidecar

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_URL = "https://huggingface.co/{repo}/resolve/{revision}/{file}"


def _fetch_text(repo_id: str, file: str, revision: str, timeout_s: float,
                missing_ok: bool = False) -> tuple[str | None, str]:
    """(``file``'s text in ``repo_id``, its URL); the text None where the Hub answers 404 and
    ``missing_ok``; a clear InputError when offline, gated or missing."""
    import urllib.error
    import urllib.request

    if not _REPO_ID.match(repo_id):
        raise InputError(f"{repo_id!r} is not a Hugging Face repo id (owner/name)")
    url = HUB_URL.format(repo=repo_id, revision=revision, file=file)
    request = urllib.request.Request(url, headers={"User-Agent": "ridgeline"})
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read().decode("utf-8"), url
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise InputError(
                f"{repo_id} is gated or private: accept its licence on huggingface.co and set "
                "HF_TOKEN"
            ) from None
        if exc.code == 404:
            if missing_ok:
                return None, url
            raise InputError(f"{repo_id} has no {file} at revision {revision!r}") from None
        raise InputError(f"Hugging Face Hub answered {exc.code} for {url}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(
            f"cannot reach the Hugging Face Hub ({reason}); pass a local config.json instead"
        ) from None
    except UnicodeDecodeError:
        raise InputError(f"{url} is not UTF-8 text") from None


def fetch_config(repo_id: str, revision: str = "main", timeout_s: float = 20.0) -> Mapping[str, Any]:
    """Download ``repo_id``'s config.json; a clear InputError when offline, gated or missing."""
    text, url = _fetch_text(repo_id, "config.json", revision, timeout_s)
    return parse_config_text(text or "", url)  # a 404 was refused: text is there


def fetch_sidecar(repo_id: str, revision: str = "main",
                  timeout_s: float = 20.0) -> Mapping[str, Any] | None:
    """``repo_id``'s hf_quant_config.json, parsed; None where the repo has none (404)."""
    text, url = _fetch_text(repo_id, SIDECAR, revision, timeout_s, missing_ok=True)
    return None if text is None else parse_sidecar(text, url)


def fetch_model(repo_id: str, revision: str = "main", timeout_s: float = 20.0) -> ModelSpec:
    """The spec of ``repo_id``'s config.json, with its hf_quant_config.json where config.json
    has no quantization_config (fetched only then)."""
    config = fetch_config(repo_id, revision, timeout_s)
    sidecar = fetch_sidecar(repo_id, revision, timeout_s) if needs_sidecar(config) else None
    return spec_with_sidecar(config, sidecar, name=repo_id)

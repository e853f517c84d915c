"""Fetch a config.json from the Hugging Face Hub — only when the user asks (``--fetch``).

Never called at import time or in tests. Uses the standard library; a token in
``HF_TOKEN`` is sent for gated repositories.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ridgeline.catalog import parse_config_text
from ridgeline.errors import InputError

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
HUB_URL = "https://huggingface.co/{repo}/resolve/{revision}/config.json"


def fetch_config(repo_id: str, revision: str = "main", timeout_s: float = 20.0) -> Mapping[str, Any]:
    """Download ``repo_id``'s config.json; a clear InputError when offline, gated or missing."""
    import urllib.error
    import urllib.request

    if not _REPO_ID.match(repo_id):
        raise InputError(f"{repo_id!r} is not a Hugging Face repo id (owner/name)")
    url = HUB_URL.format(repo=repo_id, revision=revision)
    request = urllib.request.Request(url, headers={"User-Agent": "ridgeline"})
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            text = response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise InputError(
                f"{repo_id} is gated or private: accept its licence on huggingface.co and set "
                "HF_TOKEN"
            ) from None
        if exc.code == 404:
            raise InputError(f"{repo_id} has no config.json at revision {revision!r}") from None
        raise InputError(f"Hugging Face Hub answered {exc.code} for {url}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(
            f"cannot reach the Hugging Face Hub ({reason}); pass a local config.json instead"
        ) from None
    return parse_config_text(text, url)

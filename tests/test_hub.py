"""--fetch: the Hub is reached only when asked; errors say offline, gated or missing.

No test touches the network: urlopen is replaced.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from ridgeline.errors import InputError
from ridgeline.hub import fetch_config


class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def _serve(monkeypatch: pytest.MonkeyPatch, outcome: Any) -> list[str]:
    seen: list[str] = []

    def fake_urlopen(request: urllib.request.Request, timeout: float) -> _Response:
        seen.append(request.full_url)
        if isinstance(outcome, Exception):
            raise outcome
        return _Response(outcome)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return seen


def test_fetch_reads_the_config_from_the_hub_url(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _serve(monkeypatch, json.dumps({"hidden_size": 8}).encode())
    assert fetch_config("org/model")["hidden_size"] == 8
    assert seen == ["https://huggingface.co/org/model/resolve/main/config.json"]


@pytest.mark.parametrize(
    ("error", "message"),
    [(urllib.error.URLError("no route"), "cannot reach"),
     (urllib.error.HTTPError("u", 401, "gated", {}, None), "gated"),  # type: ignore[arg-type]
     (urllib.error.HTTPError("u", 404, "missing", {}, None), "no config.json")],  # type: ignore[arg-type]
)
def test_fetch_errors_name_the_problem(
    monkeypatch: pytest.MonkeyPatch, error: Exception, message: str
) -> None:
    _serve(monkeypatch, error)
    with pytest.raises(InputError, match=message):
        fetch_config("org/model")


def test_a_non_repo_id_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _serve(monkeypatch, b"{}")
    with pytest.raises(InputError, match="not a Hugging Face repo id"):
        fetch_config("../etc/passwd")
    assert seen == []


def test_the_hub_is_not_imported_by_the_core() -> None:
    import subprocess
    import sys

    code = "import ridgeline.cli, sys; print('urllib.request' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

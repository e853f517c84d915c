"""A file's path in a one-line error: whole through a deep folder, cut at both ends only past
PATH_LIMIT, so the file's name is always there."""

from __future__ import annotations

from pathlib import Path

import pytest

from ridgeline.errors import PATH_LIMIT, shorten_path
from tests.conftest import run_cli


def test_a_deep_folder_s_config_is_named_whole_in_its_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / ("configs-for-llama" + "/nested" * 3)
    deep.mkdir(parents=True)
    config = deep / "config.json"
    config.write_text("{not json")
    assert 80 < len(str(config)) <= PATH_LIMIT
    code, _, err = run_cli(capsys, "model", str(config))
    assert code == 2 and str(config) in err and len(err.strip().splitlines()) == 1


def test_a_path_past_the_limit_keeps_both_ends() -> None:
    path = "/srv/" + "x" * 5000 + "/config.json"
    short = shorten_path(path)
    assert len(short) < PATH_LIMIT + 30 and short.startswith("/srv/xx")
    assert short.endswith(f"/config.json ({len(path):,} chars)")
    assert shorten_path(path[:PATH_LIMIT]) == path[:PATH_LIMIT]

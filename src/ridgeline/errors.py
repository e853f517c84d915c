"""The error types a user sees: bad input (a one-line message, exit code 2 at the CLI) and a
"does not fit" that is an answer (the same line and exit code; under --json, a JSON object)."""

from __future__ import annotations

import re


class InputError(ValueError):
    """Bad input: a malformed config, an unknown name, a negative size.

    The message names the problem in one line; the CLI prints it and exits with code 2.
    """


class DoesNotFit(InputError):
    """Not bad input but the answer no: the deployment asked about cannot run what was asked
    (its weights overflow the card, its engine would refuse to start), so a command that
    needs it running (simulate, utilization, amdahl) has nothing to measure. Exit code 2 as
    for bad input, but under --json stdout carries it as ``{"fits": false, "error": {"code":
    ``code``, "message": …}}`` (render.refusal_json), so a script can tell it from a typo."""

    code = "does_not_fit"


class EveryRequestRefused(DoesNotFit):
    """The deployment runs, but its engine refused every request of the load (each past
    max_model_len, or more than its pool): no latency to report."""

    code = "refused_every_request"


class FellBehind(DoesNotFit):
    """The deployment runs, but fell so far behind the load offered that the simulation
    stopped before any request arriving in --window finished: no latency to report there
    (simulate's answer, not bad input: a lower rate or more replicas is the lever)."""

    code = "fell_behind"


def wrong_kind(value: object, name: str, wants: str) -> InputError:
    """The refusal of a library argument of the wrong kind, in the one form all take (raise
    it): Deployment.build("llama-3.1-8b", h100) says "model must be a ModelSpec from
    resolve_model, got str 'llama-3.1-8b'", not an AttributeError from deep inside."""
    return InputError(f"{name} must be {wants}, got {type(value).__name__} "
                      f"{shorten(repr(value), 60)}")


def shorten(text: str, limit: int = 80) -> str:
    """A value echoed in an error, cut to ``limit`` characters (a 5,000-character name, a
    400-digit number) so that the message stays one readable line."""
    return text if len(text) <= limit else f"{text[:limit - 12]}…({len(text):,} chars)"


PATH_LIMIT = 160  # a file's path in an error, whole up to this many characters


def shorten_path(path: object) -> str:
    """A file's path echoed in an error: whole up to PATH_LIMIT characters (a deep folder's,
    a pytest tmp_path's under xdist), past it its two ends, so the file's name stays."""
    text = str(path)
    if len(text) <= PATH_LIMIT:
        return text
    end = PATH_LIMIT // 2 - 8
    return f"{text[:end]}…{text[-end:]} ({len(text):,} chars)"


def shorten_runs(message: str, limit: int = 160) -> str:
    """Every unbroken run of more than ``limit`` characters in an error message (a value the
    user typed, echoed) cut to its two ends; the words around it kept whole. The limit lets
    a file's path through whole however deep its folder (a pytest tmp_path under xdist runs
    past 80), and still cuts a 5,000-character name. A control character (a newline in a
    path) is written as its escape: the message stays one line."""
    def cut(run: str) -> str:  # both ends: a path keeps its file name
        end = limit // 2 - 8
        return f"{run[:end]}…{run[-end:]} ({len(run):,} chars)"

    one_line = re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], message)
    return re.sub(rf"\S{{{limit + 1},}}", lambda m: cut(m.group()), one_line)

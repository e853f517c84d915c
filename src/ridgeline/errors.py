"""The one error type a user sees: a one-line message, exit code 2 at the CLI."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: a malformed config, an unknown name, a negative size.

    The message names the problem in one line; the CLI prints it and exits with code 2.
    """


def shorten(text: str, limit: int = 80) -> str:
    """A value echoed in an error, cut to ``limit`` characters (a 5,000-character name, a
    400-digit number) so that the message stays one readable line."""
    return text if len(text) <= limit else f"{text[:limit - 12]}…({len(text):,} chars)"

"""The one error type a user sees: a one-line message, exit code 2 at the CLI."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: a malformed config, an unknown name, a negative size.

    The message names the problem in one line; the CLI prints it and exits with code 2.
    """

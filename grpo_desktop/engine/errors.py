"""Errors whose message is written for the user: what is wrong and how to fix it.

The CLI prints them as one paragraph (no traceback) and the GUI shows them in a message bar. Anything
that is not a `UserError` is a bug and is reported with its traceback in the log.
Torch-free.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a file, a setting, a model): the message says how to fix it."""


class ConfigError(UserError, ValueError):
    """A config that cannot be built or used."""


class DataError(UserError):
    """A dataset that cannot be read or lacks what the run needs."""


class ModelError(UserError):
    """A model that cannot be found or loaded."""


class CheckerError(UserError):
    """User checker code that cannot even be compiled or lacks a check() function."""

"""Errors a person sees. Each message says what went wrong and how to fix it."""

from __future__ import annotations


class NanoagentError(Exception):
    """An expected failure; the CLI prints its message as one line and exits with `exit_code`."""

    exit_code = 1


class ConfigError(NanoagentError):
    pass


class UsageError(NanoagentError):
    exit_code = 2

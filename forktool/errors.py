"""Errors the fork tool reports to its user (message, exit code 2)."""


class ForkError(Exception):
    """A problem with the input: reported in one message, nothing changed."""

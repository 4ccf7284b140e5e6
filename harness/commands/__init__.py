"""Plug-in subcommands of ``harness``: one module per command, each with ``main(argv)``."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type of counts (--limit, --threads...): argparse prints the usage and exits 2 on bad input."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value

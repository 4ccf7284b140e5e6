"""Plug-in subcommands of ``harness``: one module per command, each with ``main(argv)``."""

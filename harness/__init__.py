"""Measurement and exploration: build, run, check, time, search, store, analyse."""

"""Raises when imported (a test of --import)."""

RATIO = 1 / 0

"""Experiments: configs, the runner that measures each cell, cache warm-up, `compare`."""

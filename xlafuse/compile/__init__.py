"""Variants -> XLA options, the passes of the running XLA, one compile path, child processes."""

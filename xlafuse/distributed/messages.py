"""A small JSON value sent from process 0 to every process.

Process 0 alone reads the results folder (another host may not see it), so what it decides
there (the cells still to run, or why there are none) reaches the others this way: the JSON
text as bytes, its length first, through `multihost_utils.broadcast_one_to_all`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def share(value: Any, processes: int) -> Any:
    """Process 0's `value` on every process (JSON-able); on one process, `value` itself.

    Every process calls it at the same point; the others' `value` is not read.
    """
    if processes == 1:
        return value
    from jax.experimental import multihost_utils  # JAX only where processes are many

    data = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
    padded = np.zeros(size, dtype=np.uint8)
    padded[: min(size, data.size)] = data[:size]
    sent = np.asarray(multihost_utils.broadcast_one_to_all(padded), dtype=np.uint8)
    return json.loads(sent.tobytes().decode())

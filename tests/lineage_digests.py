"""Digests of what the lineage (`xlafuse.hlo.lineage`) makes of the recorded traces and of the
corpus, kept in tests/data/lineage-digests.json: a change of its code that keeps every trace of
every recorded and corpus module (status, kernel, holders, optimized names, how) keeps them.

A rule that traces more changes them, as it changes the counts: the failing assertion shows the
new digest, which goes into the file with the new counts.

Imported as `from lineage_digests import assert_digest` (pytest puts tests/ on the path).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

DIGESTS = Path(__file__).parent / "data" / "lineage-digests.json"


def fingerprint(lineage) -> dict[str, Any]:
    """Everything a `Lineage` says, as JSON-able data: its `to_dict` (module names, counts, the
    traces), the kernels in order and what each layout copy copies."""
    out = lineage.to_dict()
    out["kernels"] = list(lineage.kernels)
    out["copy_of"] = {k: list(v) for k, v in sorted(lineage.copy_of.items())}
    return out


def digest(value: Any) -> str:
    """The SHA-256 of `value` written as JSON with sorted keys (hex, first 16 digits)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def lineage_digest(lineage) -> str:
    """`digest` of the lineage's `fingerprint`."""
    return digest(fingerprint(lineage))


def assert_digest(key: str, value: str) -> None:
    """`value` is the digest the file keeps under `key`."""
    expected = json.loads(DIGESTS.read_text()).get(key)
    assert value == expected, f"lineage digest of {key}: {value}, recorded {expected}"

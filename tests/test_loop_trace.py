"""A recorded trace of a loop program joined with its HLO, per call (issue 43).

The zoo's cart-pole at full size (1,024 cart-poles x 500 `lax.scan` steps) on an H100, jax
0.11.2, one traced call (`tests/data/record_kernel_trace.py cartpole full forward default
--calls 1`): 5,006 device launches. The HLO's per-call counts (`xlafuse.hlo.loops`) must be what
the device ran, kernel by kernel.
"""

import gzip
import json

import pytest
from helpers import CARTPOLE_FULL

from xlafuse.hlo import analyze_hlo
from xlafuse.hlo.loops import PER_CALL
from xlafuse.measurement.kernels import Event, join_trace
from xlafuse.measurement.validate import is_memcpy


@pytest.fixture(scope="module")
def recorded():
    payload = json.loads(gzip.decompress((CARTPOLE_FULL / "default.events.json.gz").read_bytes()))
    text = gzip.decompress((CARTPOLE_FULL / "default.hlo.txt.gz").read_bytes()).decode()
    report = analyze_hlo(text)
    events = [Event(*e) for e in payload["events"]]
    return report, events, join_trace(report, events, payload["calls"])


def test_the_launches_per_call_are_the_devices(recorded):
    report, events, times = recorded
    assert report.per_call_basis == PER_CALL
    # the scan's condition never launches (XLA runs a counted loop's body without it), so the
    # HLO's count is the device's: 5,006 = 6 kernels once + 10 of the body 500 times
    assert report.launches_per_call == len(events) == times.launches_per_call == 5006
    condition = [k for k in report.kernel_details if report.runs_of(k) == 0]
    assert [k.name for k in condition] == ["loop_compare_fusion"]


def test_every_kernel_ran_as_often_as_the_hlo_says(recorded):
    report, _, times = recorded
    assert times.unattributed == () and times.unattributed_share == 0.0
    traced = {k.name: k.launches_per_call for k in times.kernels}
    runs = {k.name: report.runs_of(k) for k in report.kernel_details}
    assert sorted(runs.values()).count(500) == 10 and sorted(runs.values()).count(1) == 6
    assert all(traced.get(k.name, 0.0) == runs[k.name] for k in report.kernel_details)
    # The body's two copies run as memcpys, which carry no name: after the first iteration each
    # is paired by its place in the body (between `input_concatenate_fusion` and
    # `loop_add_fusion`), 500 each, and the three copies outside the loop once each.
    copies = {k.name: traced[k.name] for k in report.kernel_details if k.opcode == "copy"}
    assert copies == {"copy.23": 1, "copy.24": 1, "copy.22": 1, "copy.13": 500, "copy.17": 500}
    memcpys = [e for e in recorded[1] if is_memcpy(e.name)]
    assert len(memcpys) == 1000 + 3


def test_per_call_bytes_are_the_bodys_times_the_trip_count(recorded):
    report, _, _ = recorded
    body = sum(k.bytes_in + k.bytes_out for k in report.kernel_details if report.runs_of(k) == 500)
    once = sum(k.bytes_in + k.bytes_out for k in report.kernel_details if report.runs_of(k) == 1)
    assert report.modeled_bytes_per_call == 500 * body + once
    assert report.modeled_bytes_per_call > 400 * report.modeled_bytes

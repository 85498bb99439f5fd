"""Each kernel's producers (issue 47, `xlafuse.hlo.dataflow`): through a loop's carried values,
and, in a program of one computation, the kernel-to-kernel edges `inspect --dot` draws."""

import pathlib
import re

from helpers import GPT2_TRAIN, recorded_hlo

from xlafuse.hlo import analyze_module
from xlafuse.hlo.dataflow import kernel_producers, producer_names
from xlafuse.hlo.parse import parse_hlo
from xlafuse.report.graph import to_dot

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "shared" / "hlo-samples" / "h200-jax0.11.2"


def test_a_loops_kernels_read_its_initial_values_and_the_previous_iteration():
    # scan_rnn on the H200: a while loop of 16 steps; its body's kernels read the loop's state
    text = (SAMPLES / "scan_rnn.default.hlo.txt").read_text()
    report = analyze_module(parse_hlo(text))
    assert producer_names(text, report.kernel_details) == {
        "copy.12": (),
        "copy.13": (),
        "loop_broadcast_fusion": (),
        # h: its first value (copy.13), then the tanh of the iteration before
        "gemm_fusion_dot_general.1": ("copy.13", "loop_tanh_fusion"),
        # the step counter: its first value (copy.12), then the previous iteration's add
        "loop_tanh_fusion": ("copy.12", "gemm_fusion_dot_general.1", "loop_add_fusion"),
        "input_reduce_fusion": ("loop_tanh_fusion",),
        # the output's buffer: first the broadcast's, then its own (not its own producer)
        "fusion-start": (
            "copy.12",
            "loop_broadcast_fusion",
            "input_reduce_fusion",
            "loop_add_fusion",
        ),
        "loop_add_fusion": ("copy.12",),
        # the loop's condition reads the counter too
        "loop_compare_fusion": ("copy.12", "loop_add_fusion"),
    }


def test_in_one_computation_the_producers_are_the_dot_graphs_kernel_edges():
    _, module = recorded_hlo(GPT2_TRAIN, ["default"])["default"]
    report = analyze_module(module)
    kernels = report.kernel_details
    found = kernel_producers(module, kernels)
    ours = {(kernels[p].name, k.name) for k, ps in zip(kernels, found, strict=True) for p in ps}
    names = {f"{k.computation}/{k.name}": k.name for k in kernels}
    edges = re.findall(r'^  "([^"]+)" -> "([^"]+)"', to_dot(module, report=report), re.M)
    drawn = {(names[a], names[b]) for a, b in edges if a in names and b in names}
    assert ours == drawn and len(ours) == 1643

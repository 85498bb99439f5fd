"""Runs per call of a module's computations: loop trip counts (`xlafuse.hlo.loops`)."""

from xlafuse.hlo import parse_hlo
from xlafuse.hlo.flops import module_flops
from xlafuse.hlo.fusion import analyze_module
from xlafuse.hlo.loops import runs_per_call

# Loop counters left out: the trip counts are XLA's backend_config, which is what is read.
NESTED = """HloModule nested

inner_body {
  p = (s32[], f32[8,8]) parameter(0)
  x = f32[8,8] get-tuple-element(p), index=1
  d = f32[8,8] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  i = s32[] get-tuple-element(p), index=0
  ROOT t = (s32[], f32[8,8]) tuple(i, d)
}

inner_cond {
  n = s32[] constant(3)
  p = (s32[], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ROOT gt = pred[] compare(n, i), direction=GT
}

outer_body {
  p = (s32[], f32[8,8]) parameter(0)
  w = (s32[], f32[8,8]) while(p), condition=inner_cond, body=inner_body, backend_config={"known_trip_count":{"n":"3"}}
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8,8] get-tuple-element(w), index=1
  ROOT t = (s32[], f32[8,8]) tuple(j, y)
}

outer_cond {
  p = (s32[], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

unknown_body {
  p = (s32[], f32[8,8]) parameter(0)
  x = f32[8,8] get-tuple-element(p), index=1
  e = f32[8,8] exponential(x)
  k = s32[] get-tuple-element(p), index=0
  ROOT t = (s32[], f32[8,8]) tuple(k, e)
}

ENTRY main {
  x = f32[8,8] parameter(0)
  z = s32[] constant(0)
  s = (s32[], f32[8,8]) tuple(z, x)
  w = (s32[], f32[8,8]) while(s), condition=outer_cond, body=outer_body, backend_config={"known_trip_count":{"n":"5"}}
  u = (s32[], f32[8,8]) while(s), condition=outer_cond, body=unknown_body
  a = f32[8,8] get-tuple-element(w), index=1
  b = f32[8,8] get-tuple-element(u), index=1
  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

DOT = 2 * 8 * 8 * 8


def test_nested_loops_multiply_their_trip_counts():
    runs = runs_per_call(parse_hlo(NESTED))
    assert runs["main"] == 1
    assert runs["outer_body"] == 5
    assert runs["inner_body"] == 15
    # given a trip count, XLA's while thunk runs the body that many times and never the
    # condition (tests/data/trace-cartpole-full: the condition's kernel never launches)
    assert runs["inner_cond"] == 0
    assert runs["unknown_body"] is None  # no known_trip_count: not guessed
    # outer_cond is the condition of both loops: none from the first, unknown from the second
    assert runs["outer_cond"] is None


def test_module_flops_count_a_loop_body_once_per_trip():
    module = parse_hlo(NESTED)
    counted = module_flops(module, analyze_module(module).kernel_details)
    # ENTRY's dot once, the inner loop's dot 15 times
    assert counted.matmul_flops == DOT * (1 + 15)
    # flagged: the unknown loop's exponential and the compare of the condition both loops share
    assert counted.unknown_runs == 2
    # the outer counter's add 5 times, the inner condition's compare never (a counted loop's
    # condition does not run), the shared condition's compare and the unknown loop's
    # exponential (64 elements) once each
    assert counted.flops - counted.matmul_flops == 5 + 0 + 1 + 64
    assert counted.unknown_kernels == 0

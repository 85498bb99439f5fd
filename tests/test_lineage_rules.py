"""Each rewrite rule of the lineage's value numbering (`xlafuse.hlo.lineage.rules.RULES`) on HLO
cut from the recording its docstring names: with the rule, an instruction of the program is
identified by structure with the one XLA made of it; without it, not. The program's side is cut
from the recording's `unoptimized.hlo.txt.gz`, XLA's from the optimized module (its parameters
numbered from 0, inputs made parameters, metadata kept where a rule reads it)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from xlafuse.hlo.lineage import literal_payloads, trace_module
from xlafuse.hlo.lineage.numbering import NumberedGraph
from xlafuse.hlo.lineage.rules import RULES, Rule
from xlafuse.hlo.parse import parse_hlo


@dataclass(frozen=True)
class Case:
    """A rule's two modules: the program's and XLA's form of one computation.

    Attributes:
        program: the program's HLO (the reference).
        xla: XLA's optimized HLO.
        instruction: the program's instruction identified by structure ...
        optimized: ... with this instruction of XLA's, with the rule and not without it.
        fires: ("program" or "xla", the instruction the rule numbers).
    """

    program: str
    xla: str
    instruction: str
    optimized: str
    fires: tuple[str, str]


ADD = """
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
"""
MAX = """
%region_4.11 (Arg_0.12: f32[], Arg_1.13: f32[]) -> f32[] {
  %Arg_0.12 = f32[] parameter(0)
  %Arg_1.13 = f32[] parameter(1)
  ROOT %max.14 = f32[] maximum(%Arg_0.12, %Arg_1.13)
}
"""

# tests/data/trace-gpt2-fwd: a layer norm's scale, read in f32 (default)
SCALE = """HloModule jit_fn

ENTRY %main (leaves_11_.1: bf16[768]) -> f32[1,1,768] {
  %leaves_11_.1 = bf16[768]{0} parameter(0)
  %reshape.174 = bf16[1,1,768]{2,1,0} reshape(%leaves_11_.1)
  ROOT %convert_element_type.139 = f32[1,1,768]{2,1,0} convert(%reshape.174)
}
"""
SCALE_XLA = """HloModule jit_fn

%fused_convert (param_4.486: bf16[768]) -> f32[768] {
  %param_4.486 = bf16[768]{0} parameter(0)
  ROOT %convert_element_type.0.1 = f32[768]{0} convert(%param_4.486)
}

ENTRY %main (leaves_11_.1: bf16[768]) -> f32[768] {
  %leaves_11_.1 = bf16[768]{0} parameter(0)
  ROOT %loop_convert_fusion = f32[768]{0} fusion(%leaves_11_.1), kind=kLoop, calls=%fused_convert
}
"""

# tests/data/trace-gpt2-small-train: a layer norm's f32 weights, rounded to bf16 and back, then
# broadcast over the tokens through a reshape adding and dropping dimensions of size 1 (default)
WEIGHTS = """HloModule jit_step

ENTRY %main (leaves_308_.1: f32[768]) -> f32[1,128,768] {
  %leaves_308_.1 = f32[768]{0} parameter(0)
  %convert_element_type.600 = bf16[768]{0} convert(%leaves_308_.1)
  %reshape.422 = bf16[1,1,768]{2,1,0} reshape(%convert_element_type.600)
  %convert_element_type.604 = f32[1,1,768]{2,1,0} convert(%reshape.422)
  %mul.1808 = f32[1,1,768]{2,1,0} broadcast(%convert_element_type.604), dimensions={0,1,2}
  %mul.1809 = f32[1,768]{1,0} reshape(%mul.1808)
  ROOT %mul.1810 = f32[1,128,768]{2,1,0} broadcast(%mul.1809), dimensions={0,2}
}
"""
WEIGHTS_XLA = """HloModule jit_step

%fused_convert (param_0.6322: f32[768]) -> f32[1,128,768] {
  %param_0.6322 = f32[768]{0} parameter(0)
  ROOT %mul.1810.10 = f32[1,128,768]{2,1,0} broadcast(%param_0.6322), dimensions={2}
}

ENTRY %main (leaves_308_.1: f32[768]) -> f32[1,128,768] {
  %leaves_308_.1 = f32[768]{0} parameter(0)
  ROOT %loop_convert_fusion = f32[1,128,768]{2,1,0} fusion(%leaves_308_.1), kind=kLoop, calls=%fused_convert
}
"""

# tests/data/trace-gpt2-fwd: the causal mask, `jnp.tril` of ones (inlined from its `call`),
# broadcast to every head (default)
MASK = """HloModule jit_fn

ENTRY %main () -> pred[8,12,1024,1024] {
  %iota.5 = s32[1024]{0} iota(), iota_dimension=0
  %iota.6 = s32[1024,1024]{1,0} broadcast(%iota.5), dimensions={0}
  %iota.7 = s32[1024]{0} iota(), iota_dimension=0
  %iota.8 = s32[1024,1024]{1,0} broadcast(%iota.7), dimensions={1}
  %ge.9 = pred[1024,1024]{1,0} compare(%iota.6, %iota.8), direction=GE
  %constant.44 = pred[] constant(true)
  %broadcast.15 = pred[1024,1024]{1,0} broadcast(%constant.44), dimensions={}
  %constant.38 = pred[] constant(false)
  %broadcast_in_dim.14 = pred[1024,1024]{1,0} broadcast(%constant.38), dimensions={}
  %select_n.9 = pred[1024,1024]{1,0} select(%ge.9, %broadcast.15, %broadcast_in_dim.14)
  %broadcast_in_dim.56 = pred[1,1,1024,1024]{3,2,1,0} reshape(%select_n.9)
  %and.40 = pred[1,1,1024,1024]{3,2,1,0} broadcast(%broadcast_in_dim.56), dimensions={0,1,2,3}
  %and.41 = pred[1024,1024]{1,0} reshape(%and.40)
  ROOT %and.42 = pred[8,12,1024,1024]{3,2,1,0} broadcast(%and.41), dimensions={2,3}
}
"""
MASK_XLA = """HloModule jit_fn

%fused_compare () -> pred[1024,1024] {
  %iota.98.1 = s32[1024,1024]{1,0} iota(), iota_dimension=0
  %iota.99.1 = s32[1024,1024]{1,0} iota(), iota_dimension=1
  ROOT %ge.20.1 = pred[1024,1024]{1,0} compare(%iota.98.1, %iota.99.1), direction=GE
}

%fused_broadcast (param_1.1972: pred[1024,1024]) -> pred[8,12,1024,1024] {
  %param_1.1972 = pred[1024,1024]{1,0} parameter(0)
  ROOT %broadcast.212.62 = pred[8,12,1024,1024]{3,2,1,0} broadcast(%param_1.1972), dimensions={2,3}
}

ENTRY %main () -> pred[8,12,1024,1024] {
  %loop_compare_fusion = pred[1024,1024]{1,0} fusion(), kind=kLoop, calls=%fused_compare
  ROOT %loop_broadcast_fusion = pred[8,12,1024,1024]{3,2,1,0} fusion(%loop_compare_fusion), kind=kLoop, calls=%fused_broadcast
}
"""

# tests/data/trace-gpt2-fwd: a softmax's maximum over the keys (`maximum(reduce_max, -inf)`,
# vmapped: a leading dimension of size 1), broadcast back over them (default)
SOFTMAX = f"""HloModule jit_fn
{MAX}
ENTRY %main (where: f32[1,8,12,1024,1024]) -> f32[1,8,12,1024,1024] {{
  %where = f32[1,8,12,1024,1024]{{4,3,2,1,0}} parameter(0)
  %constant.49 = f32[] constant(-inf)
  %reduce_max.84 = f32[1,8,12,1024]{{3,2,1,0}} reduce(%where, %constant.49), dimensions={{4}}, to_apply=%region_4.11
  %constant.43 = f32[] constant(-inf)
  %broadcast.14 = f32[1,8,12,1024]{{3,2,1,0}} broadcast(%constant.43), dimensions={{}}
  %max.38 = f32[1,8,12,1024]{{3,2,1,0}} maximum(%reduce_max.84, %broadcast.14)
  %broadcast_in_dim.57 = f32[1,8,12,1024,1]{{4,3,2,1,0}} reshape(%max.38)
  %sub.178 = f32[1,8,12,1024,1]{{4,3,2,1,0}} broadcast(%broadcast_in_dim.57), dimensions={{0,1,2,3,4}}
  %sub.179 = f32[1,8,12,1024]{{3,2,1,0}} reshape(%sub.178)
  ROOT %sub.180 = f32[1,8,12,1024,1024]{{4,3,2,1,0}} broadcast(%sub.179), dimensions={{0,1,2,3}}
}}
"""
SOFTMAX_XLA = f"""HloModule jit_fn
{MAX}
%fused_reduce (param_0.1902: f32[8,12,1024,1024]) -> f32[8,12,1024,1024] {{
  %param_0.1902 = f32[8,12,1024,1024]{{3,2,1,0}} parameter(0)
  %constant_292 = f32[] constant(-inf)
  %reduce.167 = f32[8,12,1024]{{2,1,0}} reduce(%param_0.1902, %constant_292), dimensions={{3}}, to_apply=%region_4.11
  ROOT %broadcast.490 = f32[8,12,1024,1024]{{3,2,1,0}} broadcast(%reduce.167), dimensions={{0,1,2}}
}}

ENTRY %main (where: f32[8,12,1024,1024]) -> f32[8,12,1024,1024] {{
  %where = f32[8,12,1024,1024]{{3,2,1,0}} parameter(0)
  ROOT %input_reduce_fusion = f32[8,12,1024,1024]{{3,2,1,0}} fusion(%where), kind=kInput, calls=%fused_reduce
}}
"""

# tests/data/trace-gpt2-small-train: a layer norm's gradient sums `-x` over the features;
# XLA negates the sum (default)
NEGATED = f"""HloModule jit_step
{ADD}
ENTRY %main (mul.2175: f32[1,128,768]) -> f32[1,128] {{
  %mul.2175 = f32[1,128,768]{{2,1,0}} parameter(0)
  %neg.66 = f32[1,128,768]{{2,1,0}} negate(%mul.2175)
  %constant.245 = f32[] constant(0)
  ROOT %reduce_sum.1726 = f32[1,128]{{1,0}} reduce(%neg.66, %constant.245), dimensions={{2}}, to_apply=%add
}}
"""
NEGATED_XLA = f"""HloModule jit_step
{ADD}
%fused_multiply_reduce.24 (param_3.6591: f32[1,128,768]) -> f32[1,128] {{
  %param_3.6591 = f32[1,128,768]{{2,1,0}} parameter(0)
  %bitcast.2788.3 = f32[128,768]{{1,0}} bitcast(%param_3.6591)
  %constant_245_64 = f32[] constant(0)
  %reduce.248.3 = f32[128]{{0}} reduce(%bitcast.2788.3, %constant_245_64), dimensions={{1}}, to_apply=%add
  %bitcast.2789.1 = f32[1,128]{{1,0}} bitcast(%reduce.248.3)
  ROOT %negate.26 = f32[1,128]{{1,0}} negate(%bitcast.2789.1)
}}

ENTRY %main (mul.2175: f32[1,128,768]) -> f32[1,128] {{
  %mul.2175 = f32[1,128,768]{{2,1,0}} parameter(0)
  ROOT %input_reduce_fusion = f32[1,128]{{1,0}} fusion(%mul.2175), kind=kInput, calls=%fused_multiply_reduce.24
}}
"""

# tests/data/trace-gpt2-small-train: a weight gradient's GEMM (K = 3,072), its result read in f32;
# XLA splits K in 16 (default)
SPLIT_K = """HloModule jit_step

ENTRY %main (add_any.168: bf16[1,128,3072], convert_element_type.872: bf16[768,3072]) -> f32[1,128,768] {
  %add_any.168 = bf16[1,128,3072]{2,1,0} parameter(0)
  %convert_element_type.872 = bf16[768,3072]{1,0} parameter(1)
  %dot_general.297 = bf16[1,128,768]{2,1,0} dot(%add_any.168, %convert_element_type.872), lhs_contracting_dims={2}, rhs_contracting_dims={1}, metadata={op_name="jit(step)/transpose(jvp())/dot_general"}
  ROOT %convert_element_type.898 = f32[1,128,768]{2,1,0} convert(%dot_general.297)
}
"""
SPLIT_K_XLA = f"""HloModule jit_step
{ADD}
%gemm_fusion_dot.439_computation (parameter_0.75: bf16[128,16,192], parameter_1.75: bf16[768,16,192]) -> f32[16,128,768] {{
  %parameter_0.75 = bf16[128,16,192]{{2,1,0}} parameter(0)
  %parameter_1.75 = bf16[768,16,192]{{2,1,0}} parameter(1)
  ROOT %dot.561 = f32[16,128,768]{{2,1,0}} dot(%parameter_0.75, %parameter_1.75), lhs_batch_dims={{1}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{1}}, rhs_contracting_dims={{2}}, metadata={{op_name="jit(step)/transpose(jvp())/dot_general"}}
}}

%fused_reduce.115 (param_0.10929: f32[16,128,768]) -> f32[128,768] {{
  %param_0.10929 = f32[16,128,768]{{2,1,0}} parameter(0)
  %constant_245_229 = f32[] constant(0)
  ROOT %reduce.150.1 = f32[128,768]{{1,0}} reduce(%param_0.10929, %constant_245_229), dimensions={{0}}, to_apply=%add, metadata={{op_name="jit(step)/transpose(jvp())/dot_general"}}
}}

ENTRY %main (add_any.168: bf16[1,128,3072], convert_element_type.872: bf16[768,3072]) -> f32[128,768] {{
  %add_any.168 = bf16[1,128,3072]{{2,1,0}} parameter(0)
  %convert_element_type.872 = bf16[768,3072]{{1,0}} parameter(1)
  %bitcast.1931.0 = bf16[128,16,192]{{2,1,0}} bitcast(%add_any.168)
  %bitcast.1930.0 = bf16[768,16,192]{{2,1,0}} bitcast(%convert_element_type.872)
  %gemm_fusion_dot.439 = f32[16,128,768]{{2,1,0}} fusion(%bitcast.1931.0, %bitcast.1930.0), kind=kCustom, calls=%gemm_fusion_dot.439_computation
  ROOT %loop_reduce_fusion.12 = f32[128,768]{{1,0}} fusion(%gemm_fusion_dot.439), kind=kLoop, calls=%fused_reduce.115
}}
"""

# tests/data/trace-gpt2-small-train: a weight gradient's GEMM (K = 768) read in bf16 and split
# into heads; XLA splits K in 8, rounds the f32 sum to bf16 and reads it through a bitcast
# (default)
ROUNDED = """HloModule jit_step

ENTRY %main (add_any.172: bf16[1,128,768], convert_element_type.863: bf16[768,768]) -> bf16[1,12,64,1,128] {
  %add_any.172 = bf16[1,128,768]{2,1,0} parameter(0)
  %convert_element_type.863 = bf16[768,768]{1,0} parameter(1)
  %dot_general.299 = bf16[1,128,768]{2,1,0} dot(%add_any.172, %convert_element_type.863), lhs_contracting_dims={2}, rhs_contracting_dims={1}, metadata={op_name="jit(step)/transpose(jvp())/dot_general"}
  %reshape.607 = bf16[1,128,12,1,64]{4,3,2,1,0} reshape(%dot_general.299)
  ROOT %transpose.141 = bf16[1,12,64,1,128]{2,3,1,4,0} transpose(%reshape.607), dimensions={0,2,4,3,1}
}
"""
ROUNDED_XLA = f"""HloModule jit_step
{ADD}
%gemm_fusion_dot.440_computation (parameter_0.76: bf16[128,8,96], parameter_1.76: bf16[768,8,96]) -> f32[8,128,768] {{
  %parameter_0.76 = bf16[128,8,96]{{2,1,0}} parameter(0)
  %parameter_1.76 = bf16[768,8,96]{{2,1,0}} parameter(1)
  ROOT %dot.562 = f32[8,128,768]{{2,1,0}} dot(%parameter_0.76, %parameter_1.76), lhs_batch_dims={{1}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{1}}, rhs_contracting_dims={{2}}, metadata={{op_name="jit(step)/transpose(jvp())/dot_general"}}
}}

%fused_reduce.87 (param_0.6249: f32[8,128,768]) -> bf16[128,768] {{
  %param_0.6249 = f32[8,128,768]{{2,1,0}} parameter(0)
  %constant_245_230 = f32[] constant(0)
  %reduce.151.1 = f32[128,768]{{1,0}} reduce(%param_0.6249, %constant_245_230), dimensions={{0}}, to_apply=%add, metadata={{op_name="jit(step)/transpose(jvp())/dot_general"}}
  ROOT %convert.123.1 = bf16[128,768]{{1,0}} convert(%reduce.151.1), metadata={{op_name="jit(step)/transpose(jvp())/dot_general"}}
}}

ENTRY %main (add_any.172: bf16[1,128,768], convert_element_type.863: bf16[768,768]) -> bf16[12,64,128] {{
  %add_any.172 = bf16[1,128,768]{{2,1,0}} parameter(0)
  %convert_element_type.863 = bf16[768,768]{{1,0}} parameter(1)
  %bitcast.1933.0 = bf16[128,8,96]{{2,1,0}} bitcast(%add_any.172)
  %bitcast.1932.0 = bf16[768,8,96]{{2,1,0}} bitcast(%convert_element_type.863)
  %gemm_fusion_dot.440 = f32[8,128,768]{{2,1,0}} fusion(%bitcast.1933.0, %bitcast.1932.0), kind=kCustom, calls=%gemm_fusion_dot.440_computation
  %loop_reduce_fusion.11 = bf16[128,768]{{1,0}} fusion(%gemm_fusion_dot.440), kind=kLoop, calls=%fused_reduce.87
  ROOT %bitcast.3125.0 = bf16[12,64,128]{{1,0,2}} bitcast(%loop_reduce_fusion.11)
}}
"""

# tests/data/trace-gpt2-small-train: attention's output, transposed back to (tokens, heads);
# XLA lays the GEMM's result out so that the transpose is a bitcast (default)
ATTENTION = """HloModule jit_step

ENTRY %main (squeeze.37: bf16[1,128,12,64], convert_element_type.609: bf16[1,1,12,128,128]) -> bf16[1,128,12,1,64] {
  %squeeze.37 = bf16[1,128,12,64]{3,2,1,0} parameter(0)
  %convert_element_type.609 = bf16[1,1,12,128,128]{4,3,2,1,0} parameter(1)
  %dot_general.221 = bf16[1,12,64,1,128]{4,3,2,1,0} dot(%squeeze.37, %convert_element_type.609), lhs_batch_dims={0,2}, lhs_contracting_dims={1}, rhs_batch_dims={1,2}, rhs_contracting_dims={4}, metadata={op_name="jit(step)/jvp(vmap(BNTS,BSNH->BTNH))/dot_general"}
  ROOT %transpose.125 = bf16[1,128,12,1,64]{1,3,4,2,0} transpose(%dot_general.221), dimensions={0,4,1,3,2}
}
"""
ATTENTION_XLA = """HloModule jit_step

%gemm_fusion_dot.268_computation (parameter_0.2: bf16[128,12,64], parameter_1.2: bf16[12,128,128]) -> bf16[12,64,128] {
  %parameter_0.2 = bf16[128,12,64]{2,1,0} parameter(0)
  %parameter_1.2 = bf16[12,128,128]{2,1,0} parameter(1)
  ROOT %dot.488 = bf16[12,64,128]{2,1,0} dot(%parameter_0.2, %parameter_1.2), lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={0}, rhs_contracting_dims={2}, metadata={op_name="jit(step)/jvp(vmap(BNTS,BSNH->BTNH))/dot_general"}
}

ENTRY %main (squeeze.37: bf16[1,128,12,64], convert_element_type.609: bf16[1,1,12,128,128]) -> bf16[128,768] {
  %squeeze.37 = bf16[1,128,12,64]{3,2,1,0} parameter(0)
  %convert_element_type.609 = bf16[1,1,12,128,128]{4,3,2,1,0} parameter(1)
  %bitcast.1775.0 = bf16[128,12,64]{2,1,0} bitcast(%squeeze.37)
  %fusion.2383 = bf16[12,128,128]{2,1,0} bitcast(%convert_element_type.609)
  %gemm_fusion_dot.268 = bf16[12,64,128]{2,1,0} fusion(%bitcast.1775.0, %fusion.2383), kind=kCustom, calls=%gemm_fusion_dot.268_computation
  ROOT %bitcast.3189.0 = bf16[128,768]{0,1} bitcast(%gemm_fusion_dot.268)
}
"""

# tests/data/trace-resnet50-train: AdamW's first moment of a 1x1 convolution's weights (`0.9 *
# m`); XLA runs it on the weights transposed (default)
MOMENT = """HloModule jit_step

ENTRY %main (leaves_109_.1: f32[1,1,64,256]) -> f32[1,1,64,256] {
  %leaves_109_.1 = f32[1,1,64,256]{3,2,1,0} parameter(0)
  %constant.515 = f32[] constant(0.9)
  %broadcast.307 = f32[1,1,64,256]{3,2,1,0} broadcast(%constant.515), dimensions={}
  ROOT %mul.3539 = f32[1,1,64,256]{3,2,1,0} multiply(%leaves_109_.1, %broadcast.307)
}
"""
MOMENT_XLA = """HloModule jit_step

%fused_transpose (param_4.7282: f32[1,1,64,256]) -> f32[256,1,1,64] {
  %param_4.7282 = f32[1,1,64,256]{3,2,1,0} parameter(0)
  %transpose.85.3.clone.1 = f32[256,1,1,64]{3,2,1,0} transpose(%param_4.7282), dimensions={3,0,1,2}
  %constant_584_315_clone_1 = f32[] constant(0.9)
  %broadcast.829.14.clone.1 = f32[256,1,1,64]{3,2,1,0} broadcast(%constant_584_315_clone_1), dimensions={}
  ROOT %multiply.801.5.clone.1 = f32[256,1,1,64]{3,2,1,0} multiply(%transpose.85.3.clone.1, %broadcast.829.14.clone.1)
}

ENTRY %main (leaves_109_.1: f32[1,1,64,256]) -> f32[256,1,1,64] {
  %leaves_109_.1 = f32[1,1,64,256]{3,2,1,0} parameter(0)
  ROOT %loop_transpose_fusion = f32[256,1,1,64]{3,2,1,0} fusion(%leaves_109_.1), kind=kLoop, calls=%fused_transpose
}
"""

# XLA's test corpus, 05767 (xla/service/gpu/model/gpu_performance_model_test.cc): a reduce of a
# transpose, and the reduce XLA's simplifier makes of it (written here: no recording has it)
TRANSPOSED_SUM = """HloModule testmodule

max {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT max = f32[] maximum(p0, p1)
}

ENTRY fusion {
  c = f32[] constant(-inf)
  p0 = f32[1500,32,128] parameter(0)
  transpose.1 = f32[1500,128,32] transpose(p0), dimensions={0,2,1}
  ROOT reduce.1 = f32[1500,32] reduce(transpose.1, c), dimensions={1}, to_apply=max
}
"""
TRANSPOSED_SUM_XLA = """HloModule testmodule

max {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT max = f32[] maximum(p0, p1)
}

ENTRY fusion {
  c = f32[] constant(-inf)
  p0 = f32[1500,32,128] parameter(0)
  ROOT reduce.1 = f32[1500,32] reduce(p0, c), dimensions={2}, to_apply=max
}
"""

CASES = {
    "view": Case(
        SCALE, SCALE_XLA, "convert_element_type.139", "convert_element_type.0.1",
        ("program", "reshape.174"),
    ),
    "rounded_split_k_sum": Case(
        ROUNDED, ROUNDED_XLA, "transpose.141", "bitcast.3125.0", ("xla", "convert.123.1")
    ),
    "precision_round_trip": Case(
        WEIGHTS, WEIGHTS_XLA, "mul.1810", "mul.1810.10", ("program", "convert_element_type.604")
    ),
    "select_of_true_false": Case(
        MASK, MASK_XLA, "and.42", "broadcast.212.62", ("program", "select_n.9")
    ),
    "neutral_operand": Case(SOFTMAX, SOFTMAX_XLA, "sub.180", "broadcast.490", ("program", "max.38")),
    "broadcast_iota": Case(MASK, MASK_XLA, "and.42", "broadcast.212.62", ("program", "iota.6")),
    "squeezed_broadcast": Case(
        WEIGHTS, WEIGHTS_XLA, "mul.1810", "mul.1810.10", ("program", "mul.1810")
    ),
    "negated_sum": Case(
        NEGATED, NEGATED_XLA, "reduce_sum.1726", "negate.26", ("program", "reduce_sum.1726")
    ),
    "split_k_sum": Case(
        SPLIT_K, SPLIT_K_XLA, "convert_element_type.898", "reduce.150.1",
        ("xla", "reduce.150.1"),
    ),
    "transposition": Case(
        ATTENTION, ATTENTION_XLA, "transpose.125", "bitcast.3189.0", ("xla", "bitcast.3189.0")
    ),
    "transposed_elementwise": Case(
        MOMENT, MOMENT_XLA, "mul.3539", "multiply.801.5.clone.1",
        ("xla", "multiply.801.5.clone.1"),
    ),
    "reduce_of_transpose": Case(
        TRANSPOSED_SUM, TRANSPOSED_SUM_XLA, "reduce.1", "reduce.1", ("program", "reduce.1")
    ),
    "squeezed_reduce": Case(
        SOFTMAX, SOFTMAX_XLA, "reduce_max.84", "reduce.167", ("program", "reduce_max.84")
    ),
}  # fmt: skip


def test_the_rules_are_tried_in_this_order_each_once():
    assert [rule.name for rule in RULES] == [
        "view",
        "rounded_split_k_sum",
        "precision_round_trip",
        "select_of_true_false",
        "neutral_operand",
        "broadcast_iota",
        "squeezed_broadcast",
        "negated_sum",
        "split_k_sum",
        "transposition",
        "transposed_elementwise",
        "reduce_of_transpose",
        "squeezed_reduce",
    ]


def test_every_rule_has_its_case_and_every_case_a_rule():
    assert sorted(CASES) == sorted(rule.name for rule in RULES)


def _found(case: Case, rules) -> tuple:
    """How the program's instruction is traced, and to what, under `rules`."""
    program, xla = parse_hlo(case.program), parse_hlo(case.xla)
    trace = trace_module(
        program, xla, reference_text=case.program, optimized_text=case.xla, rules=rules
    ).by_name
    return trace[case.instruction].how, trace[case.instruction].optimized


@pytest.mark.parametrize("name", [rule.name for rule in RULES])
def test_each_rule_identifies_what_xla_makes_with_the_program_s_form(name):
    case = CASES[name]
    assert _found(case, RULES) == ("structure", (case.optimized,))
    without = tuple(rule for rule in RULES if rule.name != name)
    assert _found(case, without) != ("structure", (case.optimized,))


@pytest.mark.parametrize("name", [rule.name for rule in RULES])
def test_each_rule_numbers_the_instruction_of_its_case(name):
    # Both modules numbered once, as matching first numbers them, the rule recording each
    # instruction it numbers: among them, the one its case names.
    case = CASES[name]
    numbering, numbered = [""], set()

    def recorded(rule: Rule) -> Rule:
        def apply(key, graph):
            value = rule.apply(key, graph)
            if value is not None:
                numbered.add((numbering[0], key[1]))
            return value

        return replace(rule, apply=apply) if rule.name == name else rule

    rules = tuple(recorded(rule) for rule in RULES)
    table: dict[tuple, int] = {}
    untransposed: dict[int, tuple] = {}
    for side, text in (("program", case.program), ("xla", case.xla)):
        numbering[0] = side
        payloads = literal_payloads(text)
        NumberedGraph(parse_hlo(text), table, untransposed, payloads, rules=rules).number({})
    assert case.fires in numbered

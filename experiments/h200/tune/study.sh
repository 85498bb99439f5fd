#!/usr/bin/env bash
# The H200 tune study (experiments/h200/tune/README.md), one target per argument:
#   experiments/h200/tune/study.sh OUT cartpole [lstm ...]
# Each target: `xlafuse tune` (its default search, coordinate descent, within its budget, then
# the fresh-process rerun of the winner) into OUT/<target>/; the `-grid` targets measure the
# same space exhaustively, the yardstick of the search. Run from the repository root.
set -uo pipefail
targets="cartpole cartpole-grid cartpole-wide cartpole-wide-grid cartpole-pipelined lstm
transformer_block rollout rollout-pipelined gpt2-train resnet50-train"
if [ $# -lt 2 ]; then
    echo "usage: $0 OUT TARGET [TARGET ...]; the targets:" $targets >&2
    exit 2
fi
for target in "${@:2}"; do
    case " $(echo $targets) " in
    *" $target "*) ;;
    *) echo "unknown target '$target'; the targets:" $targets >&2; exit 2 ;;
    esac
done
out=$1
shift
tune() {  # NAME ARGS...: one tune, its printed lines kept beside its files
    local name=$1
    shift
    mkdir -p "$out/$name"
    echo "== $name: xlafuse tune $*" | tee "$out/$name/tune.log"
    PYTHONPATH=. python3 -m xlafuse tune "$@" --out "$out/$name" 2>&1 | tee -a "$out/$name/tune.log"
}
unrolls=unroll=1,2,4,8,16,32
for target in "$@"; do
    case $target in
    cartpole)
        tune cartpole cartpole --size full --knob $unrolls \
            --space while-loop-double-buffering --budget-s 90 ;;
    cartpole-grid)
        tune cartpole-grid cartpole --size full --knob $unrolls \
            --space while-loop-double-buffering --search grid --no-rerun ;;
    cartpole-wide)  # coordinate descent over a larger space, judged by cartpole-wide-grid
        tune cartpole-wide cartpole --size full --knob unroll=1,4,16,32 \
            --space while-loop-double-buffering,command-buffers --budget-s 90 ;;
    cartpole-wide-grid)
        tune cartpole-wide-grid cartpole --size full --knob unroll=1,4,16,32 \
            --space while-loop-double-buffering,command-buffers --search grid --no-rerun ;;
    cartpole-pipelined)  # tuned for calls back to back (--figure pipelined)
        tune cartpole-pipelined cartpole --size full --knob $unrolls \
            --space while-loop-double-buffering,command-buffers --figure pipelined \
            --budget-s 120 ;;
    lstm)
        tune lstm lstm --size full --knob $unrolls \
            --space while-loop-double-buffering --budget-s 90 ;;
    transformer_block)
        tune transformer_block transformer_block --size full \
            --space gemm-fusion,multi-output-fusion --budget-s 60 ;;
    rollout)  # a user program from examples/
        tune rollout examples/cartpole.py:rollout --overrides envs=1024,steps=500 \
            --knob unroll=1,4,16,32 --space while-loop-double-buffering --budget-s 60 ;;
    rollout-pipelined)  # the issue's own program, tuned for calls back to back
        tune rollout-pipelined examples/cartpole.py:rollout --overrides envs=1024,steps=500 \
            --knob unroll=1,4,8,16,32 --space while-loop-double-buffering --figure pipelined \
            --budget-s 90 ;;
    gpt2-train)
        tune gpt2-train gpt2 --size full --mode train --space gemm-fusion --budget-s 150 ;;
    resnet50-train)
        tune resnet50-train resnet50 --size full --mode train --space gemm-fusion \
            --budget-s 120 ;;
    esac
done

#!/usr/bin/env bash
# Hand-fused beside compiler-fused (issue 46) on one GPU: attention (GPT-2's shapes and sequence
# 4,096, forward and train), LayerNorm, the gated MLP and GPT-2 full train with the fused LM-head
# loss, each under every implementation this GPU and the installed tokamax can run (prepare.py
# leaves out the others, saying why, in OUT/offered.txt). On an H100 (2026-12-07): 6.5 minutes
# without GPT-2's third cell; GPT-2's three cells alone, 3 minutes.
#
# Usage, on the GPU machine, from the repository root:
#   experiments/h100/hand_fused/study.sh [OUT]        (OUT: experiments/h100/hand_fused)
# Without tokamax, it is installed from .whl/ first (wheels.sh makes it).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${1:-experiments/h100/hand_fused}"
HERE=experiments/h100/hand_fused
export XLAFUSE_NO_CACHE=1 PYTHONPATH=.
mkdir -p "$OUT"

if ! python3 -c "import tokamax" 2>/dev/null && [ -d .whl ]; then
    # the wheels into a folder of their own (the machine's site-packages may not be writable)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=.:/tmp/site
fi
{
    python3 -c "import jax, jaxlib, tokamax; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'tokamax', tokamax.__version__); print(jax.devices())"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    git rev-parse HEAD 2>/dev/null || echo "no git: the copied tree"
} > "$OUT/env.txt" 2>&1
python3 "$HERE/prepare.py" "$OUT" || exit 1

# seconds per study: one that hangs leaves the others their time (9.5 minutes at most;
# GPT-2 has three full train steps to compile and time: 130 s covered two on 2026-12-07; the
# three, with the wheels' install and the summary, took 179-201 s in three runs);
# STUDIES="attention:110 layernorm:45" runs those alone, within those budgets
for budget in ${STUDIES:-attention:170 layernorm:70 swiglu:90 gpt2:240}; do
    study="${budget%%:*}"
    mkdir -p "$OUT/$study"
    timeout "${budget##*:}" python3 -m xlafuse run "$OUT/configs/hand_fused_$study.toml" \
        --out "$OUT/$study" 2>&1 | tee "$OUT/$study/run.log"
done
python3 "$HERE/summarize.py" "$OUT" > "$OUT/summary.md"
if [ "${TESTS_S:-90}" -gt 0 ]; then  # TESTS_S=0: the studies alone
    timeout "${TESTS_S:-90}" python3 -m pytest -q -p no:cacheprovider tests/test_hand_fused_gpu.py \
        > "$OUT/gpu-tests.txt" 2>&1
    tail -n 3 "$OUT/gpu-tests.txt"
fi

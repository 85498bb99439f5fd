#!/usr/bin/env bash
# The wheels the GPU machine needs for tokamax 0.0.17 (it reaches no index), into .whl/ of the
# repository root (ignored by git; the device run carries it: `carry: [".whl"]`, about 40 MB).
# Run on a machine with an index, from the repository root: experiments/h100/hand_fused/wheels.sh
# tokamax 0.0.17 needs Python 3.12 and jax >= 0.11.1, which the GPU machine has; its import needs
# xprof (about 32 MB), whose own heavier dependencies (gcsfs, google-cloud-storage, duckdb) its
# import does not need: tokamax and xprof are installed there with --no-deps, the rest with their
# dependencies, from these wheels and what is installed (study.sh). qwix's (flax, jax) and
# tensorboardx's (numpy, packaging) are there already.
set -euo pipefail
cd "$(dirname "$0")/../../.."
python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "tokamax==0.0.17" "xprof>=2.23.1" einshape jaxtyping wadler-lindig "pydantic>=2.11" \
    pydantic-core annotated-types typing-inspection typing-extensions qwix tqdm immutabledict \
    tensorboardx protobuf absl-py
du -sh .whl

#!/usr/bin/env bash
# The wheels the GPU machine needs for tokamax 0.0.17 (it reaches no index), into .whl/ of the
# repository root (ignored by git; the device run carries it: `carry: [".whl"]`, about 22 MB).
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
    tensorboardx protobuf absl-py fire termcolor
# xprof's web UI (static/), its events database and its own tests are not what tokamax imports:
# leaving them out takes its wheel from 32 to 15 MB, so that the wheels and the tree travel together
# within the device's 64 MiB (pip installs a wheel without checking its RECORD's hashes).
python3 - <<'PY'
import pathlib, zipfile
(wheel,) = pathlib.Path(".whl").glob("xprof-*.whl")
unused = ("xprof/static/", "xprof/integration_tests/", "xprof/skills/", "xprof/convert/events_db/")
slim = wheel.with_suffix(".slim")
with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
    for item in src.infolist():
        if not item.filename.startswith(unused):
            dst.writestr(item, src.read(item))
slim.replace(wheel)
PY
du -sh .whl

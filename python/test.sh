#!/usr/bin/env bash
# Builds the Python package into a fresh virtualenv (target/python-venv)
# and runs its tests against a real `leasehold serve` from this workspace.
# Needs python3 (3.9 or later) with venv, and pip reaching the registry
# for maturin and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LEASEHOLD_PYTHON_VENV:-target/python-venv}
python3 -m venv --clear "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" pytest
cargo build --quiet -p leasehold-cli
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
    maturin develop --quiet --manifest-path python/Cargo.toml
LEASEHOLD_BIN="$PWD/target/debug/leasehold" "$venv/bin/python" -m pytest -q python/tests "$@"

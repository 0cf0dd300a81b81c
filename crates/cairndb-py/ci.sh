#!/usr/bin/env bash
# Builds the Python package `cairndb` from this directory and runs its
# tests, on a machine with Python 3, a Rust toolchain, and PyPI and
# crates.io reachable: a fresh virtual environment, maturin and pytest
# from PyPI, `pip install` of this directory (maturin builds the
# extension in release mode), then pytest.
#
# Environment: CAIRNDB_PY_VENV (default: a new temporary directory,
# removed afterwards) and CARGO_TARGET_DIR (default: the repository's
# target/, so that repeated runs build incrementally).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

if [[ -n "${CAIRNDB_PY_VENV:-}" ]]; then
    venv="$CAIRNDB_PY_VENV"
else
    venv="$(mktemp -d)/venv"
    trap 'rm -rf "$(dirname "$venv")"' EXIT
fi

echo "== cairndb-py: venv at $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "maturin>=1.9,<2.0" pytest

echo "== cairndb-py: building and installing the package"
"$venv/bin/python" -m pip install -q "$here"
"$venv/bin/python" -c 'import cairndb; print("cairndb", cairndb.__version__, "from", cairndb.__file__)'

echo "== cairndb-py: pytest"
# From the tests' directory: `cairndb` must come from the installed wheel,
# not from the source tree.
cd "$here/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider .

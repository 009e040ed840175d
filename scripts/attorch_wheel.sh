#!/usr/bin/env bash
# A wheel of attorch (github.com/BobMcDear/attorch) at the commit the library corpus pins, for the GPU host (no network
# there; it installs .whl/*.whl with pip --no-deps: scripts/gpu/library_env.sh). attorch is not on PyPI and ships no
# packaging ("clone this repository"), so this takes the attorch/ package (and LICENSE) out of a git clone or mirror
# and builds it with a minimal pyproject.toml: name attorch, version 0.0.0+g67c2772, no dependencies declared (its
# README pins torch==2.4.0 and triton==3.0.0; the host brings its own torch and triton).
#
#   scripts/attorch_wheel.sh SRC_GIT_DIR OUT_DIR    # e.g. scripts/attorch_wheel.sh ~/attorch/.git .whl
#
# PYTHON (default python3) builds it: it needs pip and setuptools >= 70.1 (or an older one and the wheel package);
# --no-build-isolation, so nothing is downloaded.
set -euo pipefail
SRC="${1:?usage: $0 SRC_GIT_DIR OUT_DIR}"
OUT="${2:?usage: $0 SRC_GIT_DIR OUT_DIR}"
PYTHON="${PYTHON:-python3}"
COMMIT=67c2772baf33913ef51c2d1064f746ca17b63749
VERSION=0.0.0+g67c2772

git --git-dir="$SRC" rev-parse --verify --quiet "$COMMIT^{commit}" > /dev/null \
  || { echo "$SRC has no commit $COMMIT (fetch it first)" >&2; exit 1; }
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT
git --git-dir="$SRC" archive "$COMMIT" attorch LICENSE | tar -x -C "$BUILD"
cat > "$BUILD/pyproject.toml" <<EOF
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "attorch"
version = "$VERSION"
description = "github.com/BobMcDear/attorch at $COMMIT, its attorch/ package unchanged (opgate's attorch_wheel.sh)"
requires-python = ">=3.8"
dependencies = []

[tool.setuptools]
packages = ["attorch"]
EOF
mkdir -p "$OUT"
"$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$OUT" "$BUILD"
ls -l "$OUT"/attorch-"$VERSION"-py3-none-any.whl

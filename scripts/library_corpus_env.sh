#!/usr/bin/env bash
# The library corpus's environment (tests/data/verify/library_corpus, versions in its requirements.txt).
#
#   scripts/library_corpus_env.sh                 # CPU: create $VENV (default /work/libvenv) with torch, opgate and
#                                                 # the pinned libraries
#   scripts/library_corpus_env.sh --wheels DIR    # GPU host: download into DIR the wheels a host that already has
#                                                 # torch / triton / numpy / transformers needs (no network there:
#                                                 # install them with pip install --no-deps DIR/*.whl)
#
# flag_gems 5.0.2 pins numpy==1.26.4 and packaging==26.0 exactly (and torch==2.9.0+cu128 in its [nvidia] extra);
# neither is needed to import or run it, so it is installed with --no-deps and its runtime deps are listed here:
# PyYAML, SQLAlchemy (+ greenlet on x86_64, typing-extensions). fla-core 0.6.0 needs einops (torch/triton come from
# the host).
#
# attorch (the attorch_*.py specs) is not on PyPI: scripts/attorch_wheel.sh SRC_GIT_DIR DIR builds its wheel at the
# pinned commit 67c2772 from a git clone or mirror (no dependencies declared) into the same DIR. It imports only with a
# CUDA GPU, so the CPU venv below leaves it out.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQ="$REPO/tests/data/verify/library_corpus/requirements.txt"
pin() { grep -i "^$1==" "$REQ" | head -1; }
LIBS=("$(pin fla-core)" "$(pin flag_gems)")
DEPS=("$(pin einops)" "$(pin PyYAML)" "$(pin SQLAlchemy)" "greenlet==3.5.6" "typing-extensions>=4.6")

if [[ "${1:-}" == "--wheels" ]]; then
  DIR="${2:?usage: $0 --wheels DIR}"
  PY="${PYVER:-3.12}"
  mkdir -p "$DIR"
  pip download --no-deps --only-binary=:all: --python-version "$PY" --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$DIR" "${LIBS[@]}" "${DEPS[@]}"
  ls -l "$DIR"
  exit 0
fi

VENV="${VENV:-/work/libvenv}"
TORCH="${TORCH_SPEC:-torch==2.13.0}"   # the CPU wheel of this machine; never a CUDA build here
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "$TORCH"
"$VENV/bin/pip" install -q -e "$REPO[verify]"
"$VENV/bin/pip" install -q --no-deps "${LIBS[@]}"
"$VENV/bin/pip" install -q "${DEPS[@]}"
"$VENV/bin/python" -c "import fla, torch; print('fla', fla.__version__, 'torch', torch.__version__)"
echo "venv ready: $VENV (flag_gems imports only on a GPU host)"

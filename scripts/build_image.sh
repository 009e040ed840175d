#!/usr/bin/env bash
# Build the opgate container image (deploy/image/Containerfile) that deploy/helm/opgate and deploy/k8s run,
# for your own registry. Run from anywhere; the repository is found from this script's path.
#
#   scripts/build_image.sh --tag registry.example.com/infra/opgate:0.1.0 --push
#   helm install opgate deploy/helm/opgate --set image.repository=registry.example.com/infra/opgate
#
# Steps: (1) `pip wheel` opgate from this checkout and `pip download` its dependencies (plus prometheus-client
# for `opgate serve`) as binary wheels for the image's Python and CPU into build/image/wheels/; (2) build the
# image from build/image/ with deploy/image/Containerfile; the build reads no package index, only the base
# image and, if the base has no python3, Debian's archive; (3) print the image's size; --push pushes it.
#
# Options (defaults in brackets):
#   --tag IMAGE          image name [ghcr.io/opgate/opgate:VERSION, VERSION from pyproject.toml]
#   --engine "CMD ..."   the build tool, words split on spaces [podman, else docker], e.g. "podman --runtime runc"
#   --base IMAGE         base image [docker.io/library/debian:bookworm-slim]
#   --python X.Y         Python of the base image, for the wheels [3.11: Debian bookworm's python3]
#   --arch ARCH          x86_64 or aarch64 [uname -m]
#   --pin REQUIREMENT    an extra requirement for the image's packages, repeatable, e.g. 'cuda-bindings<13' for a
#                        fleet whose drivers are older than CUDA 13's (580): cuda-bindings 13's runtime needs one
#   --offline-base       make the base here with mmdebstrap (Debian bookworm, minbase) and import it as
#                        localhost/opgate-base:bookworm: no registry needed for the base (CI, air-gapped hosts)
#   --push               push IMAGE after the build
#   -- ARGS              passed to `ENGINE build` unchanged (e.g. --network host --ulimit nproc=4096:4096)
# Environment: PYTHON (the python that runs pip here) [python3].
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)"
TAG="ghcr.io/opgate/opgate:$VERSION"
ENGINE=""
BASE="docker.io/library/debian:bookworm-slim"
IMAGE_PY="3.11"
ARCH="$(uname -m)"
OFFLINE_BASE=0
PUSH=0
PINS=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --engine) ENGINE="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --python) IMAGE_PY="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --pin) PINS+=("$2"); shift 2 ;;
    --offline-base) OFFLINE_BASE=1; shift ;;
    --push) PUSH=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_image.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$ENGINE" ]; then
  if command -v podman >/dev/null; then ENGINE="podman"
  elif command -v docker >/dev/null; then ENGINE="docker"
  else echo "build_image.sh: neither podman nor docker found; install one, or give --engine" >&2; exit 2; fi
fi
read -r -a ENGINE_CMD <<< "$ENGINE"
case "$ARCH" in
  x86_64|amd64) ARCH=x86_64; OCI_ARCH=amd64 ;;
  aarch64|arm64) ARCH=aarch64; OCI_ARCH=arm64 ;;
  *) echo "build_image.sh: --arch $ARCH: opgate's wheels exist for x86_64 and aarch64 only" >&2; exit 2 ;;
esac
PYTAG="cp${IMAGE_PY/./}"

CONTEXT="$ROOT/build/image"
WHEELS="$CONTEXT/wheels"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"

echo "== 1/3 wheels for CPython $IMAGE_PY on $ARCH -> ${WHEELS#"$ROOT"/}"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "$ROOT"
OPGATE_WHEEL="$(ls "$WHEELS"/opgate-*.whl)"
# glibc 2.17 .. 2.36 (bookworm): pip matches a manylinux tag only when it is named exactly.
PLATFORMS=(--platform "manylinux2014_$ARCH")
for minor in $(seq 17 36); do PLATFORMS+=(--platform "manylinux_2_${minor}_$ARCH"); done
"$PY" -m pip download --quiet --only-binary=:all: --dest "$WHEELS" --python-version "$IMAGE_PY" \
  --implementation cp --abi "$PYTAG" --abi abi3 --abi none "${PLATFORMS[@]}" \
  "$OPGATE_WHEEL" "prometheus-client>=0.17" pip "${PINS[@]}"
printf '%s\n' "opgate==$VERSION" "prometheus-client>=0.17" "${PINS[@]}" > "$WHEELS/requirements.txt"
ls "$WHEELS"

if [ "$OFFLINE_BASE" = 1 ]; then
  BASE="localhost/opgate-base:bookworm"
  echo "== base: mmdebstrap bookworm (minbase) -> $BASE"
  command -v mmdebstrap >/dev/null || { echo "build_image.sh: --offline-base needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
  # As Docker's debian:bookworm-slim leaves out: manuals, docs and locales (the copyright files stay); the
  # merged-usr hook makes the /usr symlinks itself, where plain minbase pulls in usrmerge and with it perl (+45 MB).
  mmdebstrap --quiet --variant=minbase --architectures="$OCI_ARCH" --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$CONTEXT/base.tar"
  "${ENGINE_CMD[@]}" import --change 'CMD ["bash"]' "$CONTEXT/base.tar" "$BASE" >/dev/null
  rm -f "$CONTEXT/base.tar"
fi

echo "== 2/3 ${ENGINE_CMD[*]} build -> $TAG (base $BASE)"
"${ENGINE_CMD[@]}" build --file "$ROOT/deploy/image/Containerfile" --tag "$TAG" --platform "linux/$OCI_ARCH" \
  --build-arg "BASE_IMAGE=$BASE" --build-arg "OPGATE_VERSION=$VERSION" "${EXTRA[@]}" "$CONTEXT"

SIZE="$("${ENGINE_CMD[@]}" image inspect --format '{{.Size}}' "$TAG")"
echo "== 3/3 $TAG: $SIZE bytes ($(( SIZE / 1048576 )) MiB uncompressed)"
if [ "$PUSH" = 1 ]; then
  "${ENGINE_CMD[@]}" push "$TAG"
fi

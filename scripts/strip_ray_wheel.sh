#!/usr/bin/env bash
# A stripped Ray wheel and the Ray dependencies a torch environment lacks, for `opgate fleet` on a GPU host with
# no network where little can be carried (the device machine takes 64 MiB with the repository; Ray's own wheel
# is 76 MiB). Test aid, not a Ray distribution: run it where PyPI answers, carry the folder.
#
#   scripts/strip_ray_wheel.sh                      # Python 3.12 (the GPU host's), Ray 2.60.0 -> .whl-ray/
#   scripts/strip_ray_wheel.sh --python 3.11 --out /tmp/whl-ray-311   # for this machine's python3, to try it here
#
# Kept: what `ray.init`, `ray start --head` / `ray start --address` (GCS, raylet, the runtime-env and dashboard
# agents' Python) and remote tasks need; opgate's fleet imports only `ray` and ray.util.scheduling_strategies.
# Removed: ray/jars (Java workers), rllib, data, serve, train, tune, llm and the dashboard's web client
# (dashboard/client: the browser UI; its Python stays), and the `serve` / `tune` console scripts. The three
# native binaries (_raylet.so, raylet, gcs_server) lose their symbol tables (`strip`; the dynamic symbols stay).
# RECORD is rewritten (hash and size of every changed file, removed files gone), so pip installs it as usual.
#
# Dependencies: Ray's Requires-Dist (no extras) minus what torch itself requires (filelock, typing-extensions),
# with their own dependencies, as binary wheels for the same Python: jsonschema and its small deps, click,
# msgpack, packaging, protobuf, pyyaml, requests (aiohttp and its dependencies, psutil and colorama are vendored
# inside Ray). scripts/gpu/fleet_ray.sh installs only those the host lacks.
#
# Options: --python X.Y [3.12]  --ray VERSION [2.60.0]  --out DIR [.whl-ray, under the repository]
# Environment: PYTHON (the python that runs pip and the rewrite here) [python3], STRIP [strip].
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
STRIP="${STRIP:-strip}"
TARGET_PY="3.12"
RAY_VERSION="2.60.0"
OUT="$ROOT/.whl-ray"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) TARGET_PY="$2"; shift 2 ;;
    --ray) RAY_VERSION="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "strip_ray_wheel.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v "$STRIP" >/dev/null || { echo "strip_ray_wheel.sh: no $STRIP here (apt-get install binutils)" >&2; exit 2; }
ABI="cp${TARGET_PY/./}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/strip-ray.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
rm -f "$OUT"/*.whl

# pip matches a manylinux tag only when it is named exactly: glibc 2.17 (Ray's manylinux2014) to 2.39.
PLATFORMS=(--platform manylinux2014_x86_64)
for minor in $(seq 17 39); do PLATFORMS+=(--platform "manylinux_2_${minor}_x86_64"); done
WHEEL_ARGS=(--quiet --only-binary=:all: --python-version "$TARGET_PY" --implementation cp --abi "$ABI" --abi abi3
            --abi none "${PLATFORMS[@]}")

echo "== Ray $RAY_VERSION for CPython $TARGET_PY"
"$PY" -m pip download "${WHEEL_ARGS[@]}" --no-deps --dest "$WORK" "ray==$RAY_VERSION"
ORIGINAL="$(ls "$WORK"/ray-"$RAY_VERSION"-*.whl)"

"$PY" - "$ORIGINAL" "$OUT/$(basename "$ORIGINAL")" "$STRIP" "$WORK" <<'PYEOF'
"""Copy the wheel without the removed trees, with stripped binaries and a RECORD that matches."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

source, target, strip, work = sys.argv[1:5]
REMOVED = ("ray/jars/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/train/", "ray/tune/", "ray/llm/",
           "ray/dashboard/client/")
# strip's default (--strip-all) for the executables; a shared object keeps what relocation needs.
STRIPPED = {"ray/_raylet.so": ["--strip-unneeded"], "ray/core/src/ray/raylet/raylet": [],
            "ray/core/src/ray/gcs/gcs_server": []}
DROPPED_SCRIPTS = ("serve = ", "tune = ")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


removed = {prefix: 0 for prefix in REMOVED}
records, record_name = [], None
with zipfile.ZipFile(source) as wheel, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
    for info in wheel.infolist():
        name = info.filename
        prefix = next((p for p in REMOVED if name.startswith(p)), None)
        if prefix:
            removed[prefix] += info.file_size
            continue
        top_dist_info = name.count("/") == 1 and name.split("/")[0].endswith(".dist-info")  # not a vendored one
        if top_dist_info and name.endswith("/RECORD"):
            record_name = name
            continue
        data = wheel.read(info)
        if name in STRIPPED:
            path = os.path.join(work, os.path.basename(name))
            with open(path, "wb") as f:
                f.write(data)
            subprocess.run([strip, *STRIPPED[name], path], check=True, timeout=300)
            with open(path, "rb") as f:
                stripped = f.read()
            print(f"  strip {name}: {len(data) / 2**20:.1f} -> {len(stripped) / 2**20:.1f} MiB")
            data = stripped
        elif top_dist_info and name.endswith("/entry_points.txt"):
            text = data.decode()
            data = "".join(line for line in text.splitlines(True) if not line.startswith(DROPPED_SCRIPTS)).encode()
        out.writestr(info, data)  # the ZipInfo keeps the file mode (raylet and gcs_server stay executable)
        records.append(record_line(name, data))
    if record_name is None:
        sys.exit(f"{source}: no .dist-info/RECORD: not a wheel")
    out.writestr(record_name, "\n".join([*records, f"{record_name},,"]) + "\n")
for prefix, size in removed.items():
    print(f"  removed {prefix:22s} {size / 2**20:6.1f} MiB")
with zipfile.ZipFile(target) as wheel:  # every file listed once with its hash, nothing listed that is not there
    listed = [line.split(",") for line in wheel.read(record_name).decode().splitlines()]
    wrong = [path for path, digest, _ in listed
             if path != record_name and record_line(path, wheel.read(path)) != f"{path},{digest},{_}"]
    unlisted = set(wheel.namelist()) - {path for path, *_ in listed}
    if wrong or unlisted or len(listed) != len(wheel.namelist()):
        sys.exit(f"{target}: RECORD does not match the files (wrong {wrong[:3]}, unlisted {sorted(unlisted)[:3]})")
    print(f"  RECORD: {len(listed)} files, every hash checked")
PYEOF

echo "== dependencies a torch environment lacks"
# Requires-Dist without extras; torch's own requirements are in every torch environment.
# Ray's own METADATA: the vendored packages under ray/ carry dist-info folders of their own.
mapfile -t DEPS < <(unzip -p "$OUT/$(basename "$ORIGINAL")" "ray-$RAY_VERSION.dist-info/METADATA" \
  | sed -n 's/^Requires-Dist: //p' \
  | grep -v 'extra ==' | grep -viE '^(filelock|typing[-_]extensions)\b')
printf '  %s\n' "${DEPS[@]}"
"$PY" -m pip download "${WHEEL_ARGS[@]}" --dest "$OUT" "${DEPS[@]}"
# opgate's own pure-Python dependency that the GPU host's python lacks: without it doctor.extension_binaries is an
# `error` on every node (fleet run of 2026-12-03), which says nothing about Ray or the fleet
"$PY" -m pip download "${WHEEL_ARGS[@]}" --no-deps --dest "$OUT" "pyelftools>=0.31"

echo "== $OUT"
ls -l "$OUT"
du -cb "$OUT"/*.whl | tail -1 | awk '{printf "total %d bytes (%.1f MiB); the original Ray wheel alone: %.1f MiB\n", $1, $1 / 1048576, '"$(stat -c %s "$ORIGINAL")"' / 1048576}'

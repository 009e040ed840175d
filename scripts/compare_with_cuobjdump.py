#!/usr/bin/env python3
"""Compare `opgate inspect`'s reading of binaries with NVIDIA's cuobjdump, file by file.

For each file: the `--list-elf` and `--list-ptx` lines must be equal, and (with --resources) every
kernel's registers, static shared memory and stack must equal `cuobjdump --dump-resource-usage`.
Prints one table row per file and a total; exits 1 on any disagreement.

    PYTHONPATH=src python scripts/compare_with_cuobjdump.py [--resources] [--cuobjdump PATH] FILE...
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from opgate.inspect.listing import find_cuobjdump, listing_of, parse_listing, parse_resource_usage, resource_usage_of
from opgate.inspect.model import KIND_PTX, KIND_SASS
from opgate.inspect.sources import inspect_paths

def run_cuobjdump(tool: str, flag: str, path: str, timeout_s: float = 600.0) -> tuple[int, str, str]:
    proc = subprocess.run([tool, flag, path], capture_output=True, text=True, timeout=timeout_s, check=False)
    return proc.returncode, proc.stdout, proc.stderr


@dataclass
class Row:
    path: str
    status: str = "ok"
    elf: str = ""
    ptx: str = ""
    kernels: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def compare_file(tool: str, path: str, resources: bool) -> Row:
    row = Row(path)
    start = time.perf_counter()
    reports = inspect_paths([Path(path)], kernels=resources)
    row.seconds = time.perf_counter() - start
    agree = True
    for kind, flag, attr in ((KIND_SASS, "--list-elf", "elf"), (KIND_PTX, "--list-ptx", "ptx")):
        code, out, err = run_cuobjdump(tool, flag, path)
        if code != 0 and "does not contain device code" in err:
            code, out = 0, ""  # cuobjdump's "no device code" is a listing too: an empty one
        if code != 0:
            setattr(row, attr, "cuobjdump failed")
            row.status = "cuobjdump-refused"
            row.notes.append(err.strip().splitlines()[-1] if err.strip() else f"exit {code}")
            continue
        theirs = parse_listing(out)
        ours = listing_of(reports, kind)
        total = sum(len(v) for v in theirs.values())
        matching = sum(sum(1 for a, b in zip(ours.get(m, []), lines) if a == b) for m, lines in theirs.items())
        same = ours == theirs
        agree &= same
        setattr(row, attr, f"{matching}/{total}" + ("" if same else f" (opgate {sum(len(v) for v in ours.values())})"))
    if resources and row.status == "ok":
        code, out, err = run_cuobjdump(tool, "--dump-resource-usage", path)
        out = out if code == 0 else ""
        theirs_res = parse_resource_usage(out)
        ours_res = [c for r in reports for c in resource_usage_of(r)]
        compared = matched = 0
        if len(theirs_res) != len(ours_res):
            agree = False
            row.notes.append(f"cubins with resources: cuobjdump {len(theirs_res)}, opgate {len(ours_res)}")
        for index, (mine, them) in enumerate(zip(ours_res, theirs_res)):
            for name, usage in mine.items():
                compared += 1
                if them.get(name) == usage:
                    matched += 1
                elif len(row.notes) < 5:
                    row.notes.append(f"cubin {index + 1} {name}: opgate {usage} cuobjdump {them.get(name)}")
        agree &= matched == compared
        row.kernels = f"{matched}/{compared}"
    if not agree and row.status == "ok":
        row.status = "DIFFERENT"
    for report in reports:
        if report.errors or report.fatal:
            row.notes.append(f"opgate errors: {report.fatal or report.errors[0]}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--resources", action="store_true", help="also compare per-kernel resource usage")
    parser.add_argument("--cuobjdump", help="path of cuobjdump (default: PATH, then the nvidia-cuda-cuobjdump wheel)")
    args = parser.parse_args(argv)
    tool = find_cuobjdump(args.cuobjdump)
    if tool is None:
        print("cuobjdump not found: install nvidia-cuda-cuobjdump or pass --cuobjdump", file=sys.stderr)
        return 2
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"cuobjdump: {tool} ({version})\n")
    rows = [compare_file(tool, f, args.resources) for f in args.files]
    header = f"| file | size MB | ELF lines equal | PTX lines equal | kernels equal (REG/STACK/SHARED/LOCAL) | opgate s | result |"
    print(header)
    print("|" + "---|" * 7)
    for row in rows:
        size = Path(row.path).stat().st_size / 1e6
        print(f"| {row.path} | {size:.1f} | {row.elf} | {row.ptx} | {row.kernels or '-'} | {row.seconds:.2f} | {row.status} |")
    for row in rows:
        for note in row.notes:
            print(f"  {Path(row.path).name}: {note}")
    different = [r for r in rows if r.status == "DIFFERENT"]
    print(f"\n{len(rows)} files: {len(rows) - len(different)} agree or were refused by cuobjdump, "
          f"{len(different)} differ")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())

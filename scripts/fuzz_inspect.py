#!/usr/bin/env python3
"""Mutation fuzzer for `opgate inspect`'s parsers: no input may raise or hang.

Seeds are real binaries (the nvcc-built fixtures by default, plus any files given). Each input is a
seed with one or more mutations: bit flips, byte overwrites, truncation, chunk deletion/duplication,
splices from another seed, and rewrites of the size/offset/flag fields of the fatbin container and
entry headers and of the ELF/section headers (found by parsing the seed first). Every input goes
through the whole read path with kernels on: host ELF -> fatbin -> decompression -> cubin -> .nv.info,
plus the standalone fatbin, cubin and PTX readers. An exception escaping, or an input taking longer
than --time-limit, is a failure; failing inputs are saved under --crash-dir.

    PYTHONPATH=src python scripts/fuzz_inspect.py --count 100000 [--seed 1] [FILES...]
"""

from __future__ import annotations

import argparse
import io
import random
import signal
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from opgate.inspect import cubin as cubin_module
from opgate.inspect.cubin import CubinError, read_cubin
from opgate.inspect.fatbin import CONTAINER_HEADER, parse_fatbin
from opgate.inspect.ptx import parse_ptx
from opgate.inspect.sources import _ar_members, _sniff, inspect_archive, inspect_buffer, inspect_wheel

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "inspect"
INTERESTING_U32 = (0, 1, 7, 8, 15, 16, 63, 64, 65, 80, 112, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                   0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
INTERESTING_U64 = INTERESTING_U32 + (1 << 32, (1 << 40), (1 << 63), (1 << 64) - 1)


class InputTimeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise InputTimeout()


@dataclass
class Seed:
    name: str
    data: bytes
    fields: list[tuple[int, int]] = field(default_factory=list)  # (offset, width in bytes) worth rewriting


def landmarks(data: bytes) -> list[tuple[int, int]]:
    """Offsets of header fields in a seed: fatbin containers/entries, ELF header, section headers."""
    spots: list[tuple[int, int]] = []
    if data[:4] == b"\x7fELF" and len(data) >= 64 and data[4] == 2:
        spots += [(16, 2), (18, 2), (40, 8), (48, 4), (58, 2), (60, 2), (62, 2), (7, 1), (8, 1)]
        shoff, = struct.unpack_from("<Q", data, 40)
        shentsize, shnum = struct.unpack_from("<HH", data, 58)
        for index in range(min(shnum, 256)):
            base = shoff + index * shentsize
            if base + 64 <= len(data):
                spots += [(base + 4, 4), (base + 24, 8), (base + 32, 8), (base + 40, 4), (base + 44, 4)]
    parsed = parse_fatbin(data, data.find(b"\x50\xed\x55\xba") if b"\x50\xed\x55\xba" in data else len(data))
    for entry in parsed.entries:
        o = entry.offset
        spots += [(o, 2), (o + 4, 4), (o + 8, 4), (o + 16, 4), (o + 24, 2), (o + 26, 2), (o + 28, 4),
                  (o + 40, 8), (o + 56, 8)]
    start = 0
    while True:
        start = data.find(b"\x50\xed\x55\xba", start)
        if start < 0:
            break
        spots += [(start + 4, 2), (start + 6, 2), (start + 8, 8)]
        start += CONTAINER_HEADER.size
    return [(o, w) for o, w in spots if o + w <= len(data)]


def mutate(rng: random.Random, seed: Seed, seeds: list[Seed]) -> bytes:
    data = bytearray(seed.data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
        if not data:
            break
        op = rng.random()
        if op < 0.30 and seed.fields:  # size-field rewrite
            offset, width = rng.choice(seed.fields)
            if offset + width <= len(data):
                pool = INTERESTING_U64 if width == 8 else INTERESTING_U32
                value = rng.choice(pool + (len(data), rng.getrandbits(8 * width)))
                if rng.random() < 0.3:  # nudge the current value instead
                    current = int.from_bytes(data[offset:offset + width], "little")
                    value = current + rng.choice((-65, -64, -8, -1, 1, 8, 64, 4096))
                value %= 1 << (8 * width)
                data[offset:offset + width] = value.to_bytes(width, "little")
        elif op < 0.55:  # bit flips
            for _ in range(rng.randint(1, 8)):
                position = rng.randrange(len(data))
                data[position] ^= 1 << rng.randrange(8)
        elif op < 0.65:  # byte overwrite
            position = rng.randrange(len(data))
            data[position] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.getrandbits(8)))
        elif op < 0.80:  # truncation
            del data[rng.randrange(len(data)):]
        elif op < 0.87:  # delete a chunk
            a = rng.randrange(len(data))
            del data[a:a + rng.randint(1, 256)]
        elif op < 0.94:  # duplicate a chunk in place (shifts everything after it)
            a = rng.randrange(len(data))
            chunk = data[a:a + rng.randint(1, 256)]
            data[a:a] = chunk
        else:  # splice in bytes from another seed
            other = rng.choice(seeds).data
            a, b = rng.randrange(len(data)), rng.randrange(len(other))
            n = rng.randint(1, 512)
            data[a:a + n] = other[b:b + n]
    return bytes(data)


def exercise(data: bytes) -> None:
    """Run every reader over one input. Parsers must return reports/errors; only CubinError (the
    documented failure of the cubin API) may be raised, by read_cubin itself."""
    kind = _sniff(data[:4096], "fuzz.bin")
    if data[:4] == b"PK\x03\x04":
        inspect_wheel(Path("fuzz.whl"), True, source=io.BytesIO(data))
    elif kind == "ar":
        inspect_archive(data, "fuzz.a", True, len(data))
    elif kind is not None:
        inspect_buffer(data, 0, len(data), "fuzz.bin", None, kind, kernels=True)
    parse_fatbin(data)
    if data[:4] == b"\x7fELF":
        try:
            read_cubin(data, demangle=False)
        except CubinError:
            pass
    if data[:1] == b"/" or b".version" in data[:256]:
        parse_ptx(data.decode("utf-8", "replace"))
    if data[:8] == b"!<arch>\n":
        try:
            list(_ar_members(data, len(data)))
        except ValueError:
            pass


def load_seeds(files: list[Path]) -> list[Seed]:
    seeds = []
    for path in files:
        data = path.read_bytes()
        if len(data) > 4 * 1024 * 1024:
            continue  # big libraries make slow inputs; their fatbin layout is what the fixtures cover
        seeds.append(Seed(path.name, data, landmarks(data)))
    return seeds


def default_seed_files() -> list[Path]:
    suffixes = {".o", ".so", ".a", ".cubin", ".fatbin", ".ptx", ".whl"}
    files = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and (p.suffix in suffixes or p.name == "rdc_app")]
    return files


@dataclass
class FuzzResult:
    inputs: int = 0
    failures: list[str] = field(default_factory=list)
    hangs: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0


def fuzz(count: int, seed_files: list[Path], rng_seed: int = 0, time_limit_s: float = 2.0,
         crash_dir: Path | None = None, progress: bool = False) -> FuzzResult:
    seeds = load_seeds(seed_files)
    if not seeds:
        raise SystemExit("no seed files")
    rng = random.Random(rng_seed)
    result = FuzzResult()
    previous = signal.signal(signal.SIGALRM, _alarm)
    # c++filt runs as a subprocess per cubin; keep the fuzz loop in-process and fast.
    original_demangle = cubin_module.demangle_all
    cubin_module.demangle_all = lambda names, timeout_s=10.0: {n: n for n in names}
    start = time.perf_counter()
    try:
        for index in range(count):
            seed = seeds[index % len(seeds)]
            data = mutate(rng, seed, seeds)
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, time_limit_s)
            try:
                exercise(data)
            except InputTimeout:
                result.hangs += 1
                _save(crash_dir, f"hang-{index}", data)
                result.failures.append(f"input {index} (from {seed.name}): no result within {time_limit_s}s")
            except Exception:
                _save(crash_dir, f"crash-{index}", data)
                result.failures.append(f"input {index} (from {seed.name}): {traceback.format_exc(limit=6)}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            result.slowest_s = max(result.slowest_s, time.perf_counter() - t0)
            result.inputs += 1
            if progress and (index + 1) % 10000 == 0:
                print(f"  {index + 1} inputs, {len(result.failures)} failures, "
                      f"{time.perf_counter() - start:.0f}s", flush=True)
    finally:
        signal.signal(signal.SIGALRM, previous)
        cubin_module.demangle_all = original_demangle
    result.seconds = time.perf_counter() - start
    return result


def _save(crash_dir: Path | None, name: str, data: bytes) -> None:
    if crash_dir is not None:
        crash_dir.mkdir(parents=True, exist_ok=True)
        (crash_dir / name).write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="seed files (default: the test fixtures)")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1, help="random seed (runs are reproducible)")
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds allowed per input")
    parser.add_argument("--crash-dir", type=Path, default=Path("fuzz-crashes"))
    args = parser.parse_args(argv)
    files = args.files or default_seed_files()
    print(f"fuzzing with {len(files)} seed files, {args.count} inputs, seed {args.seed}")
    result = fuzz(args.count, files, args.seed, args.time_limit, args.crash_dir, progress=True)
    for failure in result.failures[:10]:
        print(failure)
    print(f"{result.inputs} inputs in {result.seconds:.1f}s ({result.inputs / result.seconds:.0f}/s), "
          f"slowest {result.slowest_s * 1000:.0f} ms: {len(result.failures) - result.hangs} unhandled exceptions, "
          f"{result.hangs} hangs")
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())

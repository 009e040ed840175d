#!/usr/bin/env python3
"""Record the CUDA driver's occupancy answers and check opgate's calculator against them (run on a GPU host).

    PYTHONPATH=src python scripts/occupancy_driver_cases.py --out tests/data/analyze/h200_occupancy_cases.json

What it does:
1. Reads the device's limits (cuDeviceGetAttribute) and compares them with opgate's data/sm_limits.toml row
   for the device's compute capability.
2. Builds one kernel per register count (8..255) from generated PTX: N values loaded with volatile loads and
   summed in reverse order keep N registers live, and `.maxnreg R` caps the allocation at exactly R (ptxas
   spills the rest; the kernels are never launched). Some kernels also carry static shared memory. Each PTX is
   JIT-linked by the driver to a cubin (cuLink*), so the cubin's .nv.shared.<kernel> section can be compared
   with the driver's CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES; the actual register count comes from
   CU_FUNC_ATTRIBUTE_NUM_REGS, never from the request.
3. Draws random (kernel, block size, dynamic shared memory[, carve-out]) cases and asks
   cuOccupancyMaxActiveBlocksPerMultiprocessor; opgate answers the same case from its own table, and from the
   device's own limits (so a table error and an algorithm error are told apart).
4. Writes everything to --out (JSON) and prints a summary table last.

Exit status: 0 all cases agree and the table matches the device; 1 any disagreement; 2 no usable GPU/driver.
tests/analyze/test_occupancy_driver_cases.py re-checks the recorded cases in CI.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import io
import json
import platform
import random
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

SCHEMA = 1
KB = 1024


# -- PTX kernels with a chosen register count --------------------------------------------------------------------

def kernel_ptx(name: str, registers: int, static_shared: int = 0) -> str:
    """A kernel that needs `registers` registers: `live` values kept live, `.maxnreg` caps the allocation.

    Below 24 registers ptxas raises .maxnreg to its floor of 24, so small counts use fewer live values and no cap
    (the allocation is then about live + 6). The driver's NUM_REGS attribute is the truth either way.
    """
    if registers >= 24:
        maxnreg, live = registers, registers + 8
    else:
        maxnreg, live = 0, max(1, registers - 6)
    lines = [".version 6.0", ".target sm_70", ".address_size 64", ""]
    if static_shared:
        lines.append(f".shared .align 16 .b8 {name}_smem[{static_shared}];")
    lines.append(f".visible .entry {name}(.param .u64 p_in, .param .u64 p_out)")
    if maxnreg:
        lines.append(f".maxnreg {maxnreg}")
    lines += [
        "{",
        "  .reg .b32 %r<4>;",
        f"  .reg .f32 %f<{live + 2}>;",
        "  .reg .b64 %rd<10>;",
        "  ld.param.u64 %rd1, [p_in];",
        "  ld.param.u64 %rd2, [p_out];",
        "  cvta.to.global.u64 %rd3, %rd1;",
        "  cvta.to.global.u64 %rd4, %rd2;",
        "  mov.u32 %r1, %tid.x;",
        "  mul.wide.u32 %rd5, %r1, 4;",
        "  add.s64 %rd6, %rd3, %rd5;",
    ]
    # Volatile loads keep their order; the sum starts from the last one loaded, so every value stays live.
    lines += [f"  ld.volatile.global.f32 %f{i}, [%rd6+{i * 4096}];" for i in range(live)]
    if live == 1:
        lines.append(f"  mov.f32 %f{live}, %f0;")
    else:
        lines.append(f"  add.f32 %f{live}, %f{live - 1}, %f{live - 2};")
        lines += [f"  add.f32 %f{live}, %f{live}, %f{i};" for i in range(live - 3, -1, -1)]
    if static_shared:
        lines += [
            f"  mov.u64 %rd7, {name}_smem;",
            "  add.s64 %rd8, %rd7, %rd5;",
            f"  st.volatile.shared.f32 [%rd8], %f{live};",
            f"  ld.volatile.shared.f32 %f{live + 1}, [%rd7+{static_shared - 4}];",
            f"  add.f32 %f{live}, %f{live}, %f{live + 1};",
        ]
    lines += ["  add.s64 %rd9, %rd4, %rd5;", f"  st.global.f32 [%rd9], %f{live};", "  ret;", "}", ""]
    return "\n".join(lines)


def cubin_shared_section(cubin: bytes, kernel: str) -> int:
    """Size of the cubin's .nv.shared.<kernel> section (0 when the kernel has none)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    section = elf.get_section_by_name(f".nv.shared.{kernel}")
    return 0 if section is None else int(section["sh_size"])


# -- the driver ----------------------------------------------------------------------------------------------------

class DriverError(RuntimeError):
    pass


def _check(result: Any, what: str) -> Any:
    """cuda-bindings calls return (CUresult, value...): raise on an error, return the value(s)."""
    from cuda.bindings import driver

    if not isinstance(result, tuple):
        result = (result,)
    status = result[0]
    if status != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(status)
        raise DriverError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


DEVICE_ATTRIBUTES = {
    "compute_capability_major": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "compute_capability_minor": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
    "max_threads_per_block": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "max_threads_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR",
    "regs_per_block": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK",
    "regs_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
    "warp_size": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
    "smem_per_block": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
    "smem_per_sm": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "smem_per_block_optin": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "reserved_smem_per_block": "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK",
    "sm_count": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
}
# device attribute -> opgate SmLimits field
TABLE_FIELDS = {
    "max_threads_per_block": "max_threads_per_block",
    "max_threads_per_sm": "max_threads_per_sm",
    "max_blocks_per_sm": "max_blocks_per_sm",
    "regs_per_block": "max_regs_per_block",
    "regs_per_sm": "regs_per_sm",
    "warp_size": "warp_size",
    "smem_per_block": "smem_per_block_default",
    "smem_per_sm": "smem_per_sm",
    "smem_per_block_optin": "smem_per_block_optin",
    "reserved_smem_per_block": "reserved_smem_per_block",
}


@dataclass
class BuiltKernel:
    index: int
    name: str
    requested_registers: int
    registers: int
    static_shared: int  # CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    cubin_shared_section: int | None  # .nv.shared.<name> size in the JIT-linked cubin (None: not available)
    max_threads_per_block: int
    max_dynamic_shared: int
    function: Any = None


class Device:
    def __init__(self, ordinal: int) -> None:
        from cuda.bindings import driver

        self.driver = driver
        _check(driver.cuInit(0), "cuInit")
        self.device = _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        raw_name = _check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.name = raw_name.split(b"\0", 1)[0].decode() if isinstance(raw_name, bytes) else str(raw_name)
        self.driver_version = _check(driver.cuDriverGetVersion(), "cuDriverGetVersion")
        self.attributes = {
            key: int(_check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, enum), self.device),
                            f"cuDeviceGetAttribute({enum})"))
            for key, enum in DEVICE_ATTRIBUTES.items()
        }
        self.modules: list[Any] = []

    @property
    def cc(self) -> tuple[int, int]:
        return self.attributes["compute_capability_major"], self.attributes["compute_capability_minor"]

    def _link_to_cubin(self, ptx: bytes, name: str) -> bytes:
        driver = self.driver
        state = _check(driver.cuLinkCreate(0, [], []), "cuLinkCreate")
        try:
            _check(driver.cuLinkAddData(state, driver.CUjitInputType.CU_JIT_INPUT_PTX, ptx, len(ptx),
                                        name.encode(), 0, [], []), "cuLinkAddData")
            pointer, size = _check(driver.cuLinkComplete(state), "cuLinkComplete")
            return ctypes.string_at(int(pointer), int(size))  # copy before cuLinkDestroy frees it
        finally:
            driver.cuLinkDestroy(state)

    def build(self, index: int, registers: int, static_shared: int) -> BuiltKernel:
        driver = self.driver
        name = f"occ_r{registers}_s{static_shared}"
        ptx = kernel_ptx(name, registers, static_shared).encode() + b"\0"
        section: int | None = None
        try:
            cubin = self._link_to_cubin(ptx, name)
            section = cubin_shared_section(cubin, name)
            module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData(cubin)")
        except Exception:  # the cubin path is extra evidence; the PTX path is enough for occupancy
            module = _check(driver.cuModuleLoadData(ptx), "cuModuleLoadData(ptx)")
        self.modules.append(module)
        function = _check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
        attribute = driver.CUfunction_attribute
        regs = int(_check(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "NUM_REGS"))
        static = int(_check(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                            "SHARED_SIZE_BYTES"))
        max_threads = int(_check(driver.cuFuncGetAttribute(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                           function), "MAX_THREADS_PER_BLOCK"))
        max_dynamic = self.attributes["smem_per_block_optin"] - static
        _check(driver.cuFuncSetAttribute(function, attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         max_dynamic), "set MAX_DYNAMIC_SHARED_SIZE_BYTES")
        return BuiltKernel(index, name, registers, regs, static, section, max_threads, max_dynamic, function)

    def max_active_blocks(self, kernel: BuiltKernel, block_size: int, dynamic_shared: int,
                          carveout: int | None) -> int:
        driver = self.driver
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        _check(driver.cuFuncSetAttribute(kernel.function, attribute, -1 if carveout is None else carveout),
               "set PREFERRED_SHARED_MEMORY_CARVEOUT")
        blocks = _check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel.function, block_size,
                                                                            dynamic_shared),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return int(blocks)

    def close(self) -> None:
        for module in self.modules:
            self.driver.cuModuleUnload(module)
        self.driver.cuDevicePrimaryCtxRelease(self.device)


# -- the cases ----------------------------------------------------------------------------------------------------

def register_plan(rng: random.Random) -> list[tuple[int, int]]:
    """(registers, static shared bytes) of the kernels to build: every 8 from 8 to 255, odd counts, extremes."""
    counts = sorted(set(range(8, 256, 8)) | {16, 24, 25, 31, 33, 40, 63, 65, 96, 127, 129, 168, 200, 232, 255}
                    | {rng.randint(24, 255) for _ in range(16)})
    plan = [(r, 0) for r in counts]
    plan += [(r, s) for r, s in ((32, 4 * KB), (64, 16 * KB), (40, 48 * KB), (128, 1 * KB), (24, 100))]
    return plan


def draw_cases(rng: random.Random, kernels: list[BuiltKernel], count: int, carveout_count: int,
               optin: int) -> list[dict[str, Any]]:
    cases = []
    for number in range(count + carveout_count):
        kernel = rng.choice(kernels)
        block = rng.choice([rng.randint(1, 1024), 32 * rng.randint(1, 32), rng.choice([32, 64, 128, 256, 512, 1024])])
        room = optin - kernel.static_shared
        dynamic = rng.choice([0, 0, rng.randint(0, 8 * KB), rng.randint(0, 48 * KB), rng.randint(0, max(0, room))])
        dynamic = min(dynamic, room)
        carveout = rng.choice([0, 10, 25, 33, 50, 66, 75, 100, rng.randint(0, 100)]) if number >= count else None
        cases.append({"kernel": kernel.index, "threads_per_block": block, "dynamic_shared_bytes": dynamic,
                      "carveout_percent": carveout})
    return cases


def device_limits(table_limits: Any, attributes: dict[str, int]) -> Any:
    """opgate's SmLimits with every field the device reports replaced by the device's value."""
    return replace(table_limits, **{field: attributes[key] for key, field in TABLE_FIELDS.items()},
                   max_warps_per_sm=attributes["max_threads_per_sm"] // attributes["warp_size"])


def opgate_blocks(kernel: dict[str, Any], case: dict[str, Any], limits: Any) -> int:
    from opgate.core.occupancy import KernelLaunch, calculate

    launch = KernelLaunch(
        threads_per_block=case["threads_per_block"],
        registers_per_thread=kernel["registers"],
        static_shared_bytes=kernel["static_shared"],
        dynamic_shared_bytes=case["dynamic_shared_bytes"],
        max_dynamic_shared_bytes=kernel["max_dynamic_shared"],
        carveout_percent=case["carveout_percent"],
    )
    return calculate(launch, limits).active_blocks_per_sm


def summary_table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 40)
    return "\n".join([line, *(f"{k.ljust(width)}  {v}" for k, v in rows), line])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests/data/analyze/h200_occupancy_cases.json",
                        help="JSON file to write (default: %(default)s)")
    parser.add_argument("--cases", type=int, default=600, help="random cases with the default carve-out (%(default)s)")
    parser.add_argument("--carveout-cases", type=int, default=120,
                        help="extra random cases with an explicit carve-out preference (%(default)s)")
    parser.add_argument("--seed", type=int, default=20260517, help="random seed (%(default)s)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device ordinal (%(default)s)")
    args = parser.parse_args(argv)

    try:
        from opgate.core.limits import sm_limits
        from opgate.analyze.portability import occupancy_static_shared
        from opgate.model.errors import InputError
    except ImportError as exc:
        print(f"cannot import opgate from {REPO / 'src'}: {exc}", file=sys.stderr)
        return 2
    try:
        device = Device(args.device)
    except Exception as exc:
        print(f"no usable CUDA device/driver: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    rng = random.Random(args.seed)
    cc_text = f"{device.cc[0]}.{device.cc[1]}"
    try:
        table = sm_limits(device.cc)
    except InputError as exc:
        print(f"opgate has no SM limits for CC {cc_text}: {exc}", file=sys.stderr)
        return 1
    table_mismatches = {
        key: {"device": device.attributes[key], "opgate": getattr(table, field)}
        for key, field in TABLE_FIELDS.items() if device.attributes[key] != getattr(table, field)
    }
    from_device = device_limits(table, device.attributes)

    kernels: list[BuiltKernel] = []
    build_errors: list[str] = []
    for registers, static in register_plan(rng):
        try:
            kernels.append(device.build(len(kernels), registers, static))
        except Exception as exc:
            build_errors.append(f"r={registers} s={static}: {type(exc).__name__}: {exc}")
    if not kernels:
        print("no kernel could be built:\n" + "\n".join(build_errors), file=sys.stderr)
        return 2

    kernel_records = [{
        "index": k.index, "name": k.name, "requested_registers": k.requested_registers, "registers": k.registers,
        "static_shared": k.static_shared, "cubin_shared_section": k.cubin_shared_section,
        "max_threads_per_block": k.max_threads_per_block, "max_dynamic_shared": k.max_dynamic_shared,
    } for k in kernels]
    cases = draw_cases(rng, kernels, args.cases, args.carveout_cases, device.attributes["smem_per_block_optin"])
    query_errors = 0
    for case in cases:
        kernel = kernels[case["kernel"]]
        record = kernel_records[case["kernel"]]
        try:
            case["driver_blocks"] = device.max_active_blocks(kernel, case["threads_per_block"],
                                                             case["dynamic_shared_bytes"], case["carveout_percent"])
        except DriverError as exc:
            case["driver_blocks"] = None
            case["driver_error"] = str(exc)
            query_errors += 1
        case["opgate_blocks"] = opgate_blocks(record, case, table)
        case["opgate_blocks_device_limits"] = opgate_blocks(record, case, from_device)
        # A driver that refuses the query (e.g. a block larger than the kernel can launch) agrees with 0 blocks.
        answer = 0 if case["driver_blocks"] is None else case["driver_blocks"]
        case["agree"] = answer == case["opgate_blocks"]
    device.close()

    section_checks = [k for k in kernel_records if k["cubin_shared_section"] is not None]
    section_mismatches = [
        k for k in section_checks
        if occupancy_static_shared(k["cubin_shared_section"], device.cc[0] * 10 + device.cc[1], table)
        != k["static_shared"]
    ]
    default_cases = [c for c in cases if c["carveout_percent"] is None]
    carveout_cases = [c for c in cases if c["carveout_percent"] is not None]
    disagreements = [c for c in cases if not c["agree"]]
    algorithm_disagreements = [c for c in cases
                               if (c["driver_blocks"] or 0) != c["opgate_blocks_device_limits"]]

    def agreement(group: list[dict[str, Any]]) -> str:
        agreed = sum(1 for c in group if c["agree"])
        refused = sum(1 for c in group if c["driver_blocks"] is None)
        return f"{agreed}/{len(group)} agree" + (f" ({refused} refused by the driver, counted as 0 blocks)"
                                                 if refused else "")

    summary = {
        "cases": len(cases),
        "default_carveout": agreement(default_cases),
        "explicit_carveout": agreement(carveout_cases),
        "disagreements": len(disagreements),
        "disagreements_with_device_limits": len(algorithm_disagreements),
        "table_mismatches": table_mismatches,
        "cubin_section_checks": len(section_checks),
        "cubin_section_mismatches": len(section_mismatches),
        "kernels_built": len(kernels),
        "kernel_build_errors": build_errors,
        "distinct_register_counts": sorted({k.registers for k in kernels}),
    }
    document = {
        "schema": SCHEMA,
        "generated_by": "scripts/occupancy_driver_cases.py",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "python": platform.python_version()},
        "device": {"name": device.name, "ordinal": args.device, "compute_capability": cc_text,
                   "driver_version": device.driver_version, **device.attributes},
        "seed": args.seed,
        "summary": summary,
        "kernels": kernel_records,
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(args.out)

    for case in disagreements[:20]:
        kernel = kernel_records[case["kernel"]]
        print(f"DISAGREE: regs={kernel['registers']} static={kernel['static_shared']} "
              f"threads={case['threads_per_block']} dynamic={case['dynamic_shared_bytes']} "
              f"carveout={case['carveout_percent']}: driver {case['driver_blocks']}, opgate {case['opgate_blocks']}, "
              f"opgate with device limits {case['opgate_blocks_device_limits']}")
    for kernel in section_mismatches[:10]:
        print(f"CUBIN SECTION: {kernel['name']}: .nv.shared section {kernel['cubin_shared_section']} B, driver static "
              f"{kernel['static_shared']} B, opgate maps it to "
              f"{occupancy_static_shared(kernel['cubin_shared_section'], device.cc[0] * 10 + device.cc[1], table)} B")
    rows = [
        ("device", f"{device.name} (CC {cc_text}, driver {device.driver_version}, {device.attributes['sm_count']} SMs)"),
        ("kernels built", f"{len(kernels)} ({len(summary['distinct_register_counts'])} distinct register counts, "
                          f"{len(build_errors)} build errors)"),
        ("cases, default carve-out", summary["default_carveout"]),
        ("cases, explicit carve-out", summary["explicit_carveout"]),
        ("opgate vs driver, device limits", f"{len(algorithm_disagreements)} disagreements"),
        ("sm_limits.toml vs device", "matches" if not table_mismatches else f"MISMATCH {table_mismatches}"),
        ("cubin .nv.shared vs driver static", f"{len(section_checks) - len(section_mismatches)}/{len(section_checks)} "
                                              "as opgate maps them"),
        ("driver refusals (0 blocks)", str(query_errors)),
        ("written", str(args.out)),
    ]
    print(summary_table(rows))
    ok = not disagreements and not table_mismatches and not section_mismatches
    print("RESULT: " + ("all cases agree" if ok else "DISAGREEMENTS (see above and the JSON file)"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(3)

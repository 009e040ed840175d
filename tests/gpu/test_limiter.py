"""`opgate explain` / opgate.gpu.judge.limiter (CPU tests).

Three kinds of input:
- the recorded H200 profile already in tests/data/ncu (verify's ncu stage, --metrics, details layout);
- the H200 profiles of the four planted kernels (tests/data/toolchain/planted_limiters.cu) that
  scripts/gpu/toolchain.sh records: tests/data/ncu/h200/planted_<kernel>.{raw.csv,details.csv,ncu-rep}; those
  tests skip, saying so, until the files are committed;
- small CSV texts written here in ncu's two layouts to pin each rule of the diagnosis. They are constructed
  inputs of the pure rule, not measurements, and nothing here reports them as such.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.model.errors import InputError
from opgate.gpu.judge.limiter import Ceilings, diagnose, load_profiles, read_ncu_csv, stall_reasons

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"
H200 = DATA / "h200"
PLANTED = {"barrier_bound": "barrier", "latency_bound": "latency", "register_bound": "occupancy",
           "bank_conflicts": "bank-conflicts"}

IDENTITY = ['"ID"', '"Process ID"', '"Process Name"', '"Host Name"', '"Kernel Name"', '"Context"', '"Stream"',
            '"Block Size"', '"Grid Size"', '"Device"', '"CC"']


def raw_csv(metrics: dict[str, tuple[str, str]], kernel: str = "k(float *)") -> str:
    """ncu's --page raw layout: a header of metric columns, a units row, then one row per launch."""
    names = list(metrics)
    header = ",".join(IDENTITY + [f'"{n}"' for n in names])
    units = ",".join(['""'] * len(IDENTITY) + [f'"{metrics[n][0]}"' for n in names])
    row = ",".join(['"0"', '"1"', '"app"', '"127.0.0.1"', f'"{kernel}"', '"1"', '"7"', '"(256, 1, 1)"',
                    '"(264, 1, 1)"', '"0"', '"9.0"'] + [f'"{metrics[n][1]}"' for n in names])
    return f"==PROF== Disconnected from process 1\n{header}\n{units}\n{row}\n"


def stalls(total: float, **reasons: float) -> dict[str, tuple[str, str]]:
    found = {"smsp__average_warp_latency_per_inst_issued.ratio": ("cycle", str(total)),
             "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio": ("inst", "1")}
    for reason, cycles in reasons.items():
        found[f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"] = ("inst", str(cycles))
    return found


FULL_OCCUPANCY = {"sm__maximum_warps_per_active_cycle_pct": ("%", "100"),
                  "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "93.5"),
                  "launch__occupancy_limit_registers": ("block", "8"), "launch__occupancy_limit_shared_mem": ("block", "32"),
                  "launch__occupancy_limit_warps": ("block", "8"), "launch__occupancy_limit_blocks": ("block", "32"),
                  "launch__registers_per_thread": ("register/thread", "22")}


def one(text: str, ceilings: Ceilings | None = None):
    (profile,) = read_ncu_csv(text)
    return diagnose(profile, ceilings)


def test_recorded_h200_gelu_profile_has_no_stalls_and_says_so():
    (profile,) = load_profiles(DATA / "gelu_triton_h200.csv")
    assert profile.kernel == "_gelu_kernel" and profile.get("dram__bytes.sum") == 271872
    d = diagnose(profile, Ceilings(hbm_bytes_per_s=4.8e12, hbm_source="NVIDIA H200 datasheet"))
    assert d.limiter == "unknown" and "no warp-state metrics" in d.line
    # 64 blocks of 128 threads on 132 SMs: 6% of the 100% theoretical occupancy is reached
    assert "achieved occupancy is 6% of theoretical" in d.line
    figures = {name: value for name, value, _ in d.figures}
    assert figures["DRAM bandwidth achieved"] == round(271872 / 3200e-9 / 1e12, 4)
    assert figures["roofline floor"] == round(271872 / 4.8e12 * 1e6, 3)
    assert "achieved fp32" not in figures  # no FLOP counters in this profile: no FLOP figure invented


def test_raw_layout_units_row_and_barrier_rule():
    text = raw_csv({**stalls(20.0, barrier=9.2, long_scoreboard=2.0, wait=1.5), **FULL_OCCUPANCY,
                    "gpu__time_duration.sum": ("usecond", "12.5"), "dram__bytes.sum": ("Mbyte", "1.5")})
    (profile,) = read_ncu_csv(text)
    assert profile.get("gpu__time_duration.sum") == 12500.0 and profile.get("dram__bytes.sum") == 1.5e6
    assert [s.reason for s in stall_reasons(profile)][:2] == ["barrier", "long_scoreboard"]
    d = diagnose(profile)
    assert d.limiter == "barrier"
    assert d.line.startswith("46% of warp cycles stalled at a barrier: blocks wait for their slowest warp")


def test_register_limited_occupancy_rule():
    text = raw_csv({**stalls(30.0, wait=14.0, long_scoreboard=6.0),
                    "sm__maximum_warps_per_active_cycle_pct": ("%", "12.5"),
                    "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "12.2"),
                    "launch__occupancy_limit_registers": ("block", "1"), "launch__occupancy_limit_shared_mem": ("block", "32"),
                    "launch__occupancy_limit_warps": ("block", "8"), "launch__occupancy_limit_blocks": ("block", "32"),
                    "launch__registers_per_thread": ("register/thread", "174")})
    d = one(text)
    assert d.limiter == "occupancy"
    assert d.line.startswith("occupancy 12% theoretical, 12% achieved, limited by registers (174/thread) to 1 block(s)/SM")
    assert "__launch_bounds__" in d.remedy


def test_bank_conflict_rule_from_wavefronts():
    text = raw_csv({**stalls(40.0, short_scoreboard=12.0, mio_throttle=18.0), **FULL_OCCUPANCY,
                    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": ("", "33,554,432"),
                    "smsp__inst_executed_op_shared_ld.sum": ("inst", "1,081,344")})
    d = one(text)
    assert d.limiter == "bank-conflicts" and "31.0 wavefronts per shared-memory instruction" in d.line


def test_latency_rule_needs_idle_dram():
    busy = dict(FULL_OCCUPANCY, **stalls(50.0, long_scoreboard=40.0))
    assert one(raw_csv({**busy, "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "4.1"),
                        "lts__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "7.5"),
                        "lts__t_sector_hit_rate.pct": ("%", "98.7")})).limiter == "latency"
    streaming = one(raw_csv({**busy, "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "91.0"),
                             "dram__bytes.sum": ("Gbyte", "1.0"), "gpu__time_duration.sum": ("msecond", "0.25")}),
                    Ceilings(hbm_bytes_per_s=4.3e12, hbm_source="HBM read measured on this card by doctor.hbm_bandwidth"))
    assert streaming.limiter == "dram-bandwidth"
    assert "4.00 TB/s = 93% of 4.30 TB/s (HBM read measured on this card" in streaming.line


def test_details_layout_human_names_are_mapped():
    text = ('"ID","Kernel Name","Block Size","Grid Size","Section Name","Metric Name","Metric Unit","Metric Value"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","Occupancy","Theoretical Occupancy","%","12.50"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","Occupancy","Achieved Occupancy","%","12.31"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","Occupancy","Block Limit Registers","block","1"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","Occupancy","Block Limit Warps","block","8"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","Launch Statistics","Registers Per Thread","register/thread","174"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","GPU Speed Of Light Throughput","Duration","usecond","80.19"\n'
            '"3","k","(256, 1, 1)","(1, 1, 1)","GPU Speed Of Light Throughput","Device","","NVIDIA H200"\n')
    (profile,) = read_ncu_csv(text)
    assert profile.get("gpu__time_duration.sum") == pytest.approx(80190.0)
    d = diagnose(profile)
    assert d.limiter == "occupancy" and "limited by registers (174/thread)" in d.line


def test_bad_inputs_are_one_line_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_profiles(tmp_path / "missing.csv")
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no kernel launches"):
        load_profiles(tmp_path / "notes.csv")


def test_explain_cli(tmp_path, opgate_env):
    base = [sys.executable, "-m", "opgate", "explain"]
    ok = subprocess.run([*base, str(DATA / "gelu_triton_h200.csv"), "--gpu", "h200", "--json", str(tmp_path / "e.json")],
                        capture_output=True, text=True, env=opgate_env, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "_gelu_kernel (launch 0)" in ok.stdout
    from opgate.reporting.json_report import read_json

    report = read_json(tmp_path / "e.json")  # the shared, versioned RunReport layout
    (launch,) = report.results
    assert launch.extra["limiter"] == "unknown" and report.verb == "explain"
    assert any(f.name == "HBM ceiling" and f.unit.startswith("TB/s") for f in launch.figures)
    bad = subprocess.run([*base, str(tmp_path / "nope.ncu-rep")], capture_output=True, text=True, env=opgate_env,
                         timeout=120)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_measured_l2_ceiling_joins_the_hbm_row(tmp_path, monkeypatch):
    from opgate.gpu.judge.ceilings import MeasuredCeilings, load_ceilings, save_ceilings, save_l2_ceiling
    from opgate.gpu.judge.limiter import ceilings_for

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path))
    import time

    save_ceilings("NVIDIA H200", MeasuredCeilings("NVIDIA H200", 4.2e12, time.time(), "doctor.hbm_bandwidth"))
    save_l2_ceiling("NVIDIA H200", 9.9e12, "doctor.l2_bandwidth", 4.1e12)
    row = load_ceilings("NVIDIA H200")
    assert row.hbm_read_bytes_per_s == 4.2e12 and row.l2_read_bytes_per_s == 9.9e12
    save_ceilings("NVIDIA H200", MeasuredCeilings("NVIDIA H200", 4.3e12, time.time(), "doctor.hbm_bandwidth"))
    assert load_ceilings("NVIDIA H200").l2_read_bytes_per_s == 9.9e12  # a later HBM run keeps the L2 figure
    c = ceilings_for("NVIDIA H200")
    assert c.hbm_bytes_per_s == 4.3e12 and c.l2_bytes_per_s == 9.9e12 and "measured on this card" in c.l2_source


# -- the planted kernels, profiled on the H200 by scripts/gpu/toolchain.sh --------------------------------------

def _recorded(name: str) -> Path:
    path = H200 / name
    if not path.is_file():
        pytest.skip(f"{path.relative_to(DATA.parents[2])} not recorded yet: scripts/gpu/toolchain.sh on an H200 "
                    "writes it (in $OUT/toolchain.tar.gz)")
    return path


@pytest.mark.parametrize("kernel", sorted(PLANTED))
def test_planted_kernel_gets_its_limiter_named(kernel):
    profiles = load_profiles(_recorded(f"planted_{kernel}.raw.csv"))
    (profile,) = [p for p in profiles if kernel in p.kernel]
    d = diagnose(profile)
    assert d.limiter == PLANTED[kernel], d.line
    if kernel == "register_bound":
        assert d.occupancy.limiter == "registers" and d.occupancy.theoretical_pct <= 25


@pytest.mark.parametrize("kernel", sorted(PLANTED))
def test_planted_details_page_agrees_on_occupancy(kernel):
    (raw,) = [p for p in load_profiles(_recorded(f"planted_{kernel}.raw.csv")) if kernel in p.kernel]
    (details,) = [p for p in load_profiles(_recorded(f"planted_{kernel}.details.csv")) if kernel in p.kernel]
    a, b = diagnose(raw).occupancy, diagnose(details).occupancy
    assert a.theoretical_pct == pytest.approx(b.theoretical_pct, abs=0.6)
    assert a.achieved_pct == pytest.approx(b.achieved_pct, abs=0.6)


def test_planted_report_imports_through_ncu():
    report = _recorded("planted_barrier_bound.ncu-rep")
    if shutil.which("ncu") is None:
        pytest.skip("ncu not on PATH: .ncu-rep reports are read through `ncu --import`")
    (profile,) = load_profiles(report)
    assert diagnose(profile).limiter == "barrier"


def test_verify_ncu_stage_counters_feed_the_diagnosis():
    """verify's ncu stage reads the limiter's metrics too (details layout of `--metrics`) and names the limiter."""
    from opgate.gpu.judge.limiter import limiter_profile
    from opgate.gpu.probes.ncu import parse_ncu_csv

    head = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
            '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')
    rows = [("smsp__average_warp_latency_per_inst_issued.ratio", "cycle", "20"),
            ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "inst", "9.2"),
            ("smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "inst", "1"),
            ("sm__maximum_warps_per_active_cycle_pct", "%", "100"),
            ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "95"),
            ("dram__bytes.sum", "byte", "1,048,576"), ("gpu__time_duration.sum", "ns", "9,000")]
    text = head + "".join(f'"0","1","py","h","k","1","7","(1024, 1, 1)","(264, 1, 1)","0","9.0","Command line '
                          f'profiler metrics","{n}","{u}","{v}"\n' for n, u, v in rows)
    (counters,) = parse_ncu_csv(text)
    d = diagnose(limiter_profile(counters))
    assert d.limiter == "barrier" and d.memory.dram_bytes == 1048576 and d.memory.duration_ns == 9000


def test_ncu_rep_without_ncu_says_what_to_do(tmp_path):
    from opgate.gpu.probes.ncu import NcuNotFound, find_ncu

    try:
        pytest.skip(f"ncu is installed here ({find_ncu()}): the report would be imported")
    except NcuNotFound:
        pass
    report = tmp_path / "taken_elsewhere.ncu-rep"
    report.write_bytes(b"\x00")
    with pytest.raises(InputError, match="needs Nsight Compute.*ncu --import REPORT --csv --page raw"):
        load_profiles(report)


def test_roofline_chart_is_drawn_only_from_counted_flops(tmp_path):
    pytest.importorskip("matplotlib")
    from opgate.gpu.explain import write_roofline_chart

    counted = raw_csv({"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", "1,000,000,000"),
                       "dram__bytes.sum": ("Mbyte", "100"), "lts__t_bytes.sum": ("Mbyte", "400"),
                       "gpu__time_duration.sum": ("usecond", "500")})
    d = one(counted, Ceilings(hbm_bytes_per_s=4.8e12, l2_bytes_per_s=1.1e13, peak_flops={"fp32": 6.7e13}))
    assert d.roofline.intensity("hbm") == 20.0 and d.roofline.intensity("l2") == 5.0
    assert d.roofline.flops_per_s == pytest.approx(4e12)
    png = write_roofline_chart([d], tmp_path / "roofline.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (gelu,) = load_profiles(DATA / "gelu_triton_h200.csv")
    assert write_roofline_chart([diagnose(gelu)], tmp_path / "none.png") is None


@pytest.fixture(scope="module")
def planted_object(tmp_path_factory) -> Path:
    nvcc = shutil.which("nvcc") or next(
        (str(p) for p in Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu13/bin/nvcc")), None)
    if nvcc is None:
        pytest.skip("nvcc not found (PATH or the nvidia-cuda-nvcc wheel): the planted kernels are not built here")
    out = tmp_path_factory.mktemp("planted") / "planted_limiters.o"
    proc = subprocess.run([nvcc, "-O3", "-arch=sm_90", "-c", "-o", str(out),
                           str(DATA.parent / "toolchain" / "planted_limiters.cu")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_planted_kernels_carry_their_static_limiters(planted_object):
    """What can be checked without a GPU: the register-bound kernel really leaves one block per SM on an H200,
    and the others do not (opgate inspect reads the registers, opgate's occupancy model does the rest)."""
    from opgate.core.limits import sm_limits
    from opgate.core.occupancy import KernelLaunch, calculate
    from opgate.inspect.sources import inspect_paths

    (report,) = inspect_paths([planted_object], kernels=True)
    kernels = {k.demangled.split("(")[0]: k for k in report.kernels}
    threads = {"barrier_bound": 1024, "latency_bound": 256, "register_bound": 256, "bank_conflicts": 256}
    occupancy = {}
    for name, block in threads.items():
        k = kernels[name]
        assert k.local_bytes == 0 and not k.stack_frame_bytes, f"{name} spills"
        result = calculate(KernelLaunch(threads_per_block=block, registers_per_thread=k.registers,
                                        static_shared_bytes=k.static_shared_bytes), sm_limits("9.0"))
        occupancy[name] = (result.occupancy, result.limiting_factors)
    assert kernels["register_bound"].registers >= 160
    assert occupancy["register_bound"][0] == 0.125 and "registers" in occupancy["register_bound"][1]
    assert all(occupancy[n][0] == 1.0 for n in ("barrier_bound", "latency_bound", "bank_conflicts"))
    assert kernels["bank_conflicts"].static_shared_bytes >= 32 * 32 * 4

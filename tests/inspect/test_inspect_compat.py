"""Fleet verdicts on the nvcc-built fixtures: SASS rules (plain, `a`, `f`), PTX JIT and driver limits."""

from __future__ import annotations

import pytest

from inspect_helpers import FIXTURES
from opgate.model.errors import InputError
from opgate.inspect.compat import (
    JIT,
    NATIVE,
    NO_DEVICE_CODE,
    UNSUPPORTED,
    driver_capability,
    judge,
    load_fleet,
    min_driver_for_ptx,
    parse_targets,
)
from opgate.inspect.sources import inspect_paths


def verdict(name: str, target: str):
    (report,) = [r for r in inspect_paths([FIXTURES / name]) if r.entries]
    (parsed,) = parse_targets(target)
    return judge(report, parsed)


@pytest.mark.parametrize("name,target,status", [
    # multi.o: SASS sm_75, sm_80, sm_90 + PTX compute_90 (ISA 9.0)
    ("multi.o", "t4", NATIVE),
    ("multi.o", "a100", NATIVE),
    ("multi.o", "a10", NATIVE),  # sm_80 SASS runs on 8.6: same major, higher minor
    ("multi.o", "l4", NATIVE),
    ("multi.o", "h100", NATIVE),
    ("multi.o", "b200", JIT),  # no sm_100 SASS; compute_90 PTX JITs upward
    ("multi.o", "b200@580.65.06", JIT),
    ("multi.o", "b200@570.124.06", UNSUPPORTED),  # CUDA 12.8 driver: PTX ISA 8.7 < 9.0
    # sm_90a: arch-specific SASS and PTX serve exactly sm_90
    ("sm90a.o", "h100", NATIVE),
    ("sm90a.o", "h200", NATIVE),
    ("sm90a.o", "b200", UNSUPPORTED),
    ("sm90a.o", "l4", UNSUPPORTED),
    # blackwell.o: sm_100f, sm_120a, sm_103 SASS + compute_120a PTX
    ("blackwell.o", "b200", NATIVE),  # sm_100f
    ("blackwell.o", "sm_103", NATIVE),  # sm_103 and the 10.x family of sm_100f
    ("blackwell.o", "rtx5090", NATIVE),  # sm_120a on exactly 12.0
    ("blackwell.o", "sm_121", UNSUPPORTED),  # `a` SASS and PTX do not serve 12.1
    ("blackwell.o", "h100", UNSUPPORTED),
    # PTX only (compute_80, ISA 9.0)
    ("ptx_only.o", "a100@580.65.06", JIT),
    ("ptx_only.o", "h100@590.44.01", JIT),
    ("ptx_only.o", "a100@535.104.05", UNSUPPORTED),
    ("ptx_only.o", "t4", UNSUPPORTED),  # virtual arch 8.0 > 7.5
    # SASS only
    ("sass_only.o", "a10", NATIVE),
    ("sass_only.o", "l4", NATIVE),
    ("sass_only.o", "a100", UNSUPPORTED),  # sm_86 SASS does not run on 8.0
    ("sass_only.o", "h100", UNSUPPORTED),
    # Triton's sm_90a cubin
    ("triton_cache", "h100", NATIVE),
    ("triton_cache", "b200", UNSUPPORTED),
    # a standalone PTX file
    ("kernels.ptx", "rtx4090", JIT),
])
def test_verdicts(name, target, status):
    result = verdict(name, target)
    assert result.status == status, result.reason


def test_native_verdict_names_the_serving_sass():
    result = verdict("multi.o", "a10")
    assert result.sass == ("sm_80",)
    assert "runs on a10" in result.reason


def test_jit_verdict_warns_about_first_launch_and_driver_floor():
    result = verdict("multi.o", "b200")
    assert "first launch" in result.reason
    assert "580.65.06" in result.reason  # the CUDA 13.0 driver needed for PTX ISA 9.0
    assert result.ptx == ("compute_90 (PTX 9.0)",)


def test_ptx_newer_than_the_driver_is_flagged_even_when_sass_serves():
    result = verdict("multi.o", "h100@535.104.05")
    assert result.status == NATIVE
    assert any("PTX ISA 9.0 is newer than driver 535.104.05" in w for w in result.warnings)


def test_compression_newer_than_the_driver_is_flagged():
    result = verdict("compress_all.o", "h100@545.23.06")
    assert result.status == NATIVE
    assert any("zstd-compressed" in w and "550.54.14" in w for w in result.warnings)


def test_relocatable_only_entries_are_judged_for_objects_but_ignored_in_linked_binaries():
    assert verdict("rdc.o", "h100").status == NATIVE
    # The device-linked image holds sm_80 SASS only (cuobjdump --list-ptx lists no PTX either); the
    # compute_80 PTX sits in __nv_relfatbin, which the runtime does not load.
    result = verdict("rdc_app", "sm_90")
    assert result.status == UNSUPPORTED and "has sm_80" in result.reason
    assert verdict("rdc_app", "a100").status == NATIVE


def test_file_without_device_code(tmp_path):
    import zipfile

    wheel = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("plain/__init__.py", "")
    (report,) = inspect_paths([wheel])
    assert judge(report, parse_targets("h100")[0]).status == NO_DEVICE_CODE


@pytest.mark.parametrize("driver,cuda,isa", [
    ("450.51.05", "11.0", "7.0"),
    ("470.82.01", "11.4", "7.4"),
    ("535.104.05", "12.2", "8.2"),
    ("560.35.03", "12.6", "8.5"),
    ("570.124.06", "12.8", "8.7"),
    ("580.65.06", "13.0", "9.0"),
    ("595.58.03", "13.2", "9.2"),
])
def test_driver_to_ptx_isa(driver, cuda, isa):
    capability = driver_capability(driver)
    assert (capability.cuda, capability.max_ptx_isa) == (cuda, isa)


def test_driver_older_than_every_release():
    assert driver_capability("418.39").cuda is None


def test_min_driver_for_ptx():
    assert min_driver_for_ptx("9.0") == ("13.0", "580.65.06")
    assert min_driver_for_ptx("8.6") == ("12.8", "570.26")  # 12.7 has no public driver row: next release


def test_parse_targets():
    targets = parse_targets("h100, sm_89 ,a100@535.104.05")
    assert [(t.label, t.sm, t.driver) for t in targets] == [("h100", 90, None), ("sm_89", 89, None),
                                                            ("a100", 80, "535.104.05")]


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    ("h900", "not in opgate's catalogue"),
    ("h100@latest", "driver version"),
])
def test_bad_targets(text, message):
    with pytest.raises(InputError, match=message):
        parse_targets(text)


def test_fleet_file(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text('[[gpu]]\nmodel = "h100"\ndriver = "550.54.15"\nname = "prod-h100"\ncount = 64\n'
                    '[[gpu]]\nmodel = "sm_89"\n')
    targets = load_fleet(path)
    assert [(t.label, t.sm, t.driver, t.count) for t in targets] == [("prod-h100", 90, "550.54.15", 64),
                                                                    ("sm_89", 89, None, None)]


@pytest.mark.parametrize("text,message", [
    ("model = 'h100'", "no \\[\\[gpu\\]\\] tables"),
    ("[[gpu]]\ndriver = '550.54.15'\n", "missing model"),
    ("[[gpu]]\nmodel = 'h100'\ncolour = 'red'\n", "unknown key"),
    ("[[gpu]]\nmodel = 'h100'\ndriver = 550\n", "driver must be a string"),
    ("[[gpu\n", "not valid TOML"),
])
def test_bad_fleet_files(tmp_path, text, message):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_fleet(path)

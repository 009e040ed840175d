"""One warm worker serves every spec file of a run (engine.stages.OperatorPlan.worker_key_for): each spec stays
loaded, and what one file's import switches in torch's numerics does not reach another file's checks."""

from __future__ import annotations

import os
import textwrap
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SPEC = """
import torch
import opgate
{switch}

def _ref(x):
    return x * 2

{name} = opgate.Operator("{name}", reference=_ref, inputs=[opgate.TensorSpec("x", ("N",))], dims={{"N": [4]}},
                        dtypes=["float32"])

@{name}.implementation("torch")
def _impl(x):
    return x * 2
"""


def _spec(folder: Path, name: str, switch: str = "") -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(SPEC.format(name=name, switch=switch)))
    return path


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from opgate.verify import loaded_specs

    monkeypatch.setattr(loaded_specs, "_LOADED", {})
    monkeypatch.setattr(loaded_specs, "_BEFORE_ANY", {})
    before = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    yield loaded_specs
    torch.backends.cuda.matmul.allow_tf32 = before[0]
    torch.set_float32_matmul_precision(before[1])


def test_each_spec_keeps_its_own_torch_switches(tmp_path: Path, fresh_cache) -> None:  # type: ignore[no-untyped-def]
    plain = _spec(tmp_path, "plain_op")
    tf32 = _spec(tmp_path, "tf32_op", "torch.backends.cuda.matmul.allow_tf32 = True\n"
                                      "torch.set_float32_matmul_precision('medium')")
    baseline = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    assert baseline == (False, "highest")  # torch's defaults; the test means nothing otherwise

    assert [op.name for op in fresh_cache.loaded_operators(str(tf32))] == ["tf32_op"]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()) == (True, "medium")

    ops = fresh_cache.loaded_operators(str(plain))
    assert ops[0].name == "plain_op"
    assert (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()) == baseline

    again = fresh_cache.loaded_operators(str(tf32))  # from the cache: not imported again, its switches back
    assert again[0].name == "tf32_op" and len(fresh_cache._LOADED) == 2
    assert (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()) == (True, "medium")
    assert fresh_cache.loaded_operators(str(plain)) is ops


def test_a_changed_spec_file_is_imported_again(tmp_path: Path, fresh_cache) -> None:  # type: ignore[no-untyped-def]
    path = _spec(tmp_path, "first_op")
    first = fresh_cache.loaded_operators(str(path))
    assert fresh_cache.loaded_operators(str(path)) is first
    path.write_text(path.read_text().replace('"first_op"', '"renamed_op"') + "\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert fresh_cache.loaded_operators(str(path))[0].name == "renamed_op"


GROUPS_CHILD = '''
import sys
from pathlib import Path
from opgate.engine.specload import import_spec_guarded, worker_group

folder = Path(sys.argv[1])
for name in ("rich_a", "rich_b", "hyp", "plain", "replacing", "plain_after"):
    import_spec_guarded(folder / f"{name}.py")
    print(name, worker_group(folder / f"{name}.py").replace(str(folder), "DIR"))
'''

LIBRARY_SPEC = """
import torch
import opgate
{imports}

{name} = opgate.Operator("{name}", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={{"N": [4]}}, dtypes=["float32"])
"""


def test_spec_files_share_workers_by_library_and_a_kernel_replacing_one_gets_its_own(tmp_path: Path) -> None:
    """Workers are shared by the spec files of one library (the installed packages a spec refers to), never across
    libraries, and not by a spec whose import replaced one of torch's GPU kernels for an aten operator (FlagGems):
    that changes what torch runs for every later check in the process. In a child: the registration is global."""
    import subprocess
    import sys

    from tests_verify_support import SRC

    imports = {"rich_a": "import rich", "rich_b": "from rich.text import Text", "hyp": "import hypothesis",
               "plain": "", "plain_after": "",
               "replacing": "_lib = torch.library.Library('aten', 'IMPL')\n"
                            "_lib.impl('_test_serialization_subcmul', lambda a, b, alpha=1: a - alpha * b, 'CUDA')"}
    for name, lines in imports.items():
        (tmp_path / f"{name}.py").write_text(LIBRARY_SPEC.format(name=name, imports=lines))
    child = subprocess.run([sys.executable, "-c", GROUPS_CHILD, str(tmp_path)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert child.returncode == 0, child.stderr
    groups = dict(line.split(" ", 1) for line in child.stdout.strip().splitlines())
    assert groups["rich_a"] == groups["rich_b"] == "rich"
    assert groups["hyp"] == "hypothesis"
    assert groups["plain"] == "-"
    assert groups["replacing"] == "file:DIR/replacing.py"
    assert groups["plain_after"] == "file:DIR/plain_after.py"  # a run with a replacing spec: no library, no sharing


def test_a_global_whose_attribute_lookup_raises_names_no_library(tmp_path: Path) -> None:
    from opgate.engine.specload import _installed_packages_named_by

    class Proxy:
        def __getattribute__(self, name: str) -> object:
            raise RuntimeError("a lazy proxy that cannot resolve here")

    module = types.ModuleType("spec_like")
    module.proxy = Proxy()
    module.rich = __import__("rich")
    assert _installed_packages_named_by(module) == ["rich"]


def test_an_operator_is_found_by_name_and_a_wrong_name_lists_the_spec_s(tmp_path: Path) -> None:
    from opgate.model.errors import InputError
    from opgate.verify.loaded_specs import loaded_operator

    spec = tmp_path / "named_spec.py"
    spec.write_text(SPEC.format(switch="", name="doubled"))
    assert loaded_operator(str(spec), "doubled").name == "doubled"
    with pytest.raises(InputError, match=r"has no operator 'tripled'; it has doubled$"):
        loaded_operator(str(spec), "tripled")

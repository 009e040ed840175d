"""What a verify run's warm workers run before their first check (verify/engine.py prestarts them by target name):
the imports the checks need, the user's spec (verify/loaded_specs.py), the backend's warm-up and a CUDA context.
Its own module, so that the spec cache imports no check (the warm-up imports verify.check and verify.runtime)."""

from __future__ import annotations

from typing import Any

from opgate.verify.loaded_specs import loaded_operators


class WarmUpCheck:
    """What a prestarted warm worker runs while the parent calibrates (verify/engine.py): the imports the checks
    need, the user's spec and its backend's warm-up (Backend.warm_up); its result is not reported, and a warm-up
    that fails only costs the first check its head start."""

    check_id = "verify.warm_up"
    title = "warm-up"

    def run(self, ctx: Any) -> Any:
        from opgate.model.results import CheckResult, Outcome
        import opgate.verify.check  # noqa: F401  (the numerics check and what it imports)
        import opgate.verify.runtime  # noqa: F401

        ops = loaded_operators(str(ctx.options["spec_file"]))
        for op in ops:
            if op.flops is None:
                # The runtime check counts the reference's work with FlopCounterMode on meta tensors (core/work.py);
                # the first count in a process costs 1.5 s here, more beside other workers: paid now, at the
                # declared size.
                from opgate.core.work import operator_work

                try:
                    operator_work(op, op.dtypes[0], op.default_dims())
                except Exception:  # the runtime check reports it, in its own words
                    pass
                break
        name = ctx.options.get("backend")
        if name:
            from opgate.verify.backends import backend

            backend(str(name)).warm_up()
        return CheckResult(self.check_id, self.title, Outcome.PASSED, "warm")


class SpareWarmUpCheck:
    """What a spare warm worker runs before the parent has read the spec (verify/engine.py): the imports every
    check of a GPU host needs and a CUDA context, so the runtime checks start as soon as the spec is loaded."""

    check_id = "verify.spare_warm_up"
    title = "spare warm-up"

    def run(self, ctx: Any) -> Any:
        import importlib.util

        from opgate.model.results import CheckResult, Outcome
        import opgate.verify.check  # noqa: F401
        import opgate.verify.runtime  # noqa: F401
        import torch

        if importlib.util.find_spec("triton") is not None:
            import triton  # noqa: F401
        if torch.cuda.is_available():
            torch.cuda.init()
        return CheckResult(self.check_id, self.title, Outcome.PASSED, "warm")

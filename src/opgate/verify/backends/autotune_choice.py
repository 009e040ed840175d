"""Which config an autotuned Triton kernel runs while a GPU numerics check judges it.

Triton's Autotuner compiles and benchmarks every config its pruning leaves at each new key before the first call.
On fla's kernels (18 configs per width, keyed by shape) that was most of a GPU numerics check: 126 compiles in 68 s
of `fla_token_shift`'s 126 s on the H200. Correctness does not depend on speed, and the config the autotuner keeps
is the fastest on this GPU at this moment; another GPU, or the same one under load, keeps another. So inside
`rotating_configs()` each new key runs one config, chosen by a stable hash of the kernel's name and the key: no
benchmark, a replay of a case runs the config the case ran, and a plan's cases spread over the configs (more of
them judged than the one the autotuner would keep). A config this GPU cannot run (out of shared memory or
registers, a compile-time assertion) is skipped, as the autotuner skips it, and the next one runs.

The rotation leaves out, at a key, the configs whose block holds more than `ELEMENTS_PER_THREAD_LIMIT` elements per
thread there (the largest power-of-two block size among the config's and the call's constexprs, over num_warps x 32
threads), unless every config does; then the configs nearest the limit run. Such a config is slow to compile and no
autotuner keeps it: on the H200 a 65536-wide row in one warp (2048 elements a thread) took 118 s of a 125 s
fla_logsumexp check, 8192 elements in one warp (256 a thread) 27-44 s a case; the compile time grows faster than the
elements a thread holds (benchmarks/compile_per_thread.py). The report lists the configs left out, per kernel.

Only Triton's own Autotuner.run is steered, whichever class reaches it: a subclass whose `run` ends in
`super().run` (fla's CachedAutotuner, which first looks for a shipped config file; 200 compiles in 121 s of one
fla l2norm check on the H200 while it was left alone) is steered there; one with a `run` of its own that never
calls Triton's (FlagGems' LibTuner, which stores every timing in a persistent database, where a config chosen here
would be stored as if it had been timed) autotunes as it does. Outside that scope (the runtime stage's warm-ups and
timings, in the same warm worker) Triton autotunes as usual:
the keys the scope chose are taken out of the autotuners' caches when it ends. `OPGATE_AUTOTUNE=benchmark` keeps
Triton's own autotuning in the numerics too.

The runtime stage's warm-ups and timings autotune too, as Triton does, benchmarking each config at the timing size,
but over the configs within the same per-thread limit (`configs_within_limit()`; all of them where none is).
`OPGATE_RUNTIME_AUTOTUNE=all` has them autotune every config. The configs over the limit cost the compiles, not the
speed: on the 2-core CPU machine fla's swish_fwd_kernel at the library's timing width (D = 11008) compiled its 30
configs for sm_90 in 9.4 s, 6.0 s of it in the 3 over 64 elements a thread (benchmarks/autotune_configs_compile.py).
On one H100, fla's activations (18 runtime checks), each way from empty caches in one call, in both orders (fifty-first
session, scripts/gpu/autotune_ab.sh): the run took 50 and 44 s within the limit against 84 and 82 s over every config,
its warm-ups compiled for 106 and 79 s against 350 and 330 s, and all 18 medians agreed within 0.7%. Given every
config, Triton's autotuner kept one within the limit at each of the 18 keys where it benchmarked all 30, in both calls
(scripts/gpu/autotune_winners.py).
The whole library with it, on another H100 host: the warm-ups compiled for 423 s against 1,100 s on the fiftieth
session's, and the 25 runtime checks whose autotuning left configs out timed within 3% of that session's or faster
(fla_logsumexp in float16 and bfloat16: 88 against 184 and 172 us; which config that session's autotuner kept, with
every config to choose from beside the run's other work, was not recorded).
"""

from __future__ import annotations

import contextlib
import functools
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator

AUTOTUNE_ENV = "OPGATE_AUTOTUNE"
RUNTIME_AUTOTUNE_ENV = "OPGATE_RUNTIME_AUTOTUNE"  # "all": every config in the runtime stage (default: within-limit)
# At most this many elements of a block per thread at a key (module docstring): 64 keeps a 2048-wide block in one warp
# and a 65536-wide row in 32 warps. On one CPU core (benchmarks/compile_per_thread.py) an 8192-element block compiled
# in 0.35 s at 64 a thread, 1.2 s at 128 and 4.9 s at 256; a 65536-wide row in 0.17 s at 64, 9.6 s at 512 and 182 s
# at 2048.
ELEMENTS_PER_THREAD_LIMIT = 64
# What a runtime result says of the scope its config was chosen in (verify/runtime.py with_autotuning)
RUNTIME_SCOPE = (f"Triton's autotuning over the configs within {ELEMENTS_PER_THREAD_LIMIT} elements a thread "
                 f"({RUNTIME_AUTOTUNE_ENV}=all: over every config)")
NOTE = ("autotuned kernels run one config per key, chosen by a stable hash of the kernel and the key (no "
        "benchmark; a replay runs the same config), so a plan's cases spread over the configs; a config this GPU "
        f"cannot run is skipped as the autotuner skips it; a config whose block holds over {ELEMENTS_PER_THREAD_LIMIT} "
        "elements a thread at a key is not chosen there unless every config does (slow to compile, kept by no "
        "autotuner: 'over_thread_limit' counts the keys each was left out at); "
        f"{AUTOTUNE_ENV}=benchmark keeps Triton's autotuning")


@dataclass
class _Scope:
    """What the patched Autotuner does while a numerics check runs."""

    active: bool = False
    # "rotate" (rotating_configs: one config per key, no benchmark) or "within limit" (configs_within_limit: Triton
    # benchmarks the configs within the per-thread limit, and its choices stay cached)
    mode: str = "rotate"
    added: list[tuple[Any, Any]] = field(default_factory=list)  # (tuner, key) entries made inside the scope
    summary: dict[str, Any] = field(default_factory=dict)  # kernel -> {"configs": n, "ran": {key: config}}
    used: dict[str, str] = field(default_factory=dict)  # kernel -> the config of its last call (take_used)
    retrying: dict[int, set[str]] = field(default_factory=dict)  # tuner -> configs that failed in the call under way
    inside_run: set[int] = field(default_factory=set)  # tuners whose call is inside Triton's own Autotuner.run


_SCOPE = _Scope()


def tuning_key(tuner: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The key Triton's Autotuner.run caches a choice under: the `key` arguments' values, then every tensor
    argument's dtype (triton/runtime/autotuner.py)."""
    named = {k: v for k, v in {**(tuner.nargs or {}), **kwargs}.items() if k in tuner.arg_names}
    key: list[Any] = [named[k] for k in tuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def kernel_name(tuner: Any) -> str:
    return str(getattr(getattr(tuner, "base_fn", None), "__name__", "kernel"))


def describe(config: Any) -> str:
    """A config as a user writes it: its meta-parameters, num_warps and num_stages (Config's str adds defaults)."""
    parts = [f"{k}={v}" for k, v in (getattr(config, "kwargs", None) or {}).items()]
    parts += [f"{name}={getattr(config, name)}" for name in ("num_warps", "num_stages") if hasattr(config, name)]
    return ", ".join(parts) or str(config)


def take_used() -> dict[str, str]:
    """The config each autotuned kernel ran at its last call since the previous take (a case's, in a numerics
    check): what a failing case's reason names, so the config can be set outside opgate."""
    used, _SCOPE.used = _SCOPE.used, {}
    return used


def _constexpr_names(tuner: Any) -> frozenset[str]:
    """The parameters annotated `tl.constexpr` in the Python function under the tuner: Autotuner, Heuristics,
    JITFunction and the interpreter's InterpretedFunction each keep what they wrap in `.fn`."""
    import inspect

    fn = getattr(tuner, "fn", None)
    for _ in range(8):
        if inspect.isfunction(fn):
            return frozenset(name for name, param in inspect.signature(fn).parameters.items()
                             if "constexpr" in str(param.annotation))
        fn = getattr(fn, "fn", None)
    return frozenset()


def heuristic_values(tuner: Any, named: dict[str, Any], config: Any) -> dict[str, Any]:
    """The meta-parameters that `@triton.heuristics` under the tuner would compute for this call and config (attorch's
    whole-row kernels: BLOCK_SIZE_SPATIAL = next_power_of_2(spatial_dim)), as Heuristics.run computes them: from the
    call's arguments by name and the config's. A heuristic that raises here is left out (it raises at the launch)."""
    values: dict[str, Any] = {}
    args = {**named, **(getattr(config, "all_kwargs", lambda: getattr(config, "kwargs", {}))() or {})}
    fn = getattr(tuner, "fn", None)
    for _ in range(8):
        heuristics = getattr(fn, "values", None)
        if isinstance(heuristics, dict) and hasattr(fn, "arg_names"):
            for name, heuristic in heuristics.items():
                try:
                    values[name] = args[name] = heuristic(dict(args))
                except Exception:  # noqa: BLE001 (the user's code: its error belongs to the launch)
                    continue
        fn = getattr(fn, "fn", None)
    return values


def _power_of_two(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1 and value & (value - 1) == 0


def elements_per_thread(config: Any, call_constexprs: dict[str, Any]) -> float:
    """The largest power-of-two block size among the config's meta-parameters and the call's constexprs, over the
    config's threads: what one thread holds of that block. Dimensions passed as constexprs (fla's D) are rarely
    powers of two; a block a heuristic under the autotuner computes is among `call_constexprs` (heuristic_values)."""
    values = [*(getattr(config, "kwargs", None) or {}).values(), *call_constexprs.values()]
    block = max((v for v in values if _power_of_two(v)), default=1)
    warps = getattr(config, "num_warps", None) or 4
    return block / (warps * warp_threads())


@functools.lru_cache(maxsize=1)
def warp_threads() -> int:
    """Threads in a warp of the GPU Triton compiles for: 32 on NVIDIA, 64 on most AMD GPUs; 32 without a driver."""
    try:
        from triton.runtime import driver

        return int(getattr(driver.active.get_current_target(), "warp_size", 32) or 32)
    except Exception:  # no GPU driver (the interpreter on a CPU host): NVIDIA's
        return 32


def within_limit(tuner: Any, kwargs: dict[str, Any], configs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the configs within the elements-per-thread limit at this call, or those nearest it when none is; the others,
    fewest elements a thread first)."""
    constexprs = _constexpr_names(tuner)
    named = {**(tuner.nargs or {}), **kwargs}
    call = {k: v for k, v in named.items() if k in constexprs}
    load = [(c, elements_per_thread(c, {**call, **heuristic_values(tuner, named, c)})) for c in configs]
    bound = max(ELEMENTS_PER_THREAD_LIMIT, min(held for _, held in load))
    eligible = [c for c, held in load if held <= bound]
    over = [c for c, held in sorted(load, key=lambda pair: pair[1]) if held > bound]
    return eligible, over


def _note_left_out(entry: dict[str, Any], over: list[Any]) -> None:
    """Count, per config, the keys it was left out at (the report's 'over_thread_limit')."""
    left_out = entry.setdefault("over_thread_limit", {}) if over else {}
    for skipped in over:
        left_out[describe(skipped)] = left_out.get(describe(skipped), 0) + 1


def choose(tuner: Any, kwargs: dict[str, Any], configs: list[Any]) -> Any:
    """One of `configs` for this call's key: a stable rotation by the kernel's name and the key over the configs
    within the elements-per-thread limit (or, when none is, those nearest it), skipping configs that already failed
    to compile or launch at this key; the others follow, cheapest first, should every one of those fail."""
    key = tuning_key(tuner, kwargs)
    name = kernel_name(tuner)
    eligible, over = within_limit(tuner, kwargs, configs)
    start = zlib.crc32(f"{name}{key!r}".encode()) % len(eligible)
    ordered = eligible[start:] + eligible[:start] + over
    failed = _SCOPE.retrying.get(id(tuner), set())
    config = next((c for c in ordered if str(c) not in failed), ordered[0])
    entry = _SCOPE.summary.setdefault(name, {"configs": len(tuner.configs), "ran": {}})
    if len(entry["ran"]) < 64:  # a long plan lists the first 64 keys; each failing case names its own config
        entry["ran"][repr(key)] = describe(config)
    _note_left_out(entry, over)
    return config


def benchmarked_within_limit(tuner: Any, kwargs: dict[str, Any], configs: list[Any]) -> list[Any]:
    """The configs Triton's autotuner benchmarks at this key inside configs_within_limit(), noted in the summary."""
    eligible, over = within_limit(tuner, kwargs, configs)
    entry = _SCOPE.summary.setdefault(kernel_name(tuner), {"configs": len(tuner.configs), "benchmarked": {}})
    if len(entry["benchmarked"]) < 64:
        entry["benchmarked"][repr(tuning_key(tuner, kwargs))] = len(eligible)
    _note_left_out(entry, over)
    return eligible


def _resource_errors() -> tuple[type[BaseException], ...]:
    """The errors Triton's autotuner treats as 'this config cannot run here' (Autotuner._bench)."""
    errors: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        from triton.runtime.errors import OutOfResources

        errors.append(OutOfResources)
    with contextlib.suppress(ImportError):
        from triton.compiler.errors import CompileTimeAssertionFailure

        errors.append(CompileTimeAssertionFailure)
    with contextlib.suppress(ImportError):
        from triton.runtime.errors import PTXASError  # type: ignore[attr-defined]

        errors.append(PTXASError)
    return tuple(errors)


def install() -> bool:
    """Patch triton's Autotuner once per process so that `rotating_configs()` can steer it; False without Triton.
    Outside the scope every patched method does exactly what Triton's does."""
    try:
        from triton.runtime import autotuner
    except ImportError:
        return False
    tuner_class = autotuner.Autotuner
    if getattr(tuner_class, "_opgate_rotation", False):
        return True
    original_prune, original_bench, original_run = tuner_class.prune_configs, tuner_class._bench, tuner_class.run
    resource_errors = _resource_errors()

    def steered(tuner: Any) -> bool:
        # Only inside Triton's own Autotuner.run (module docstring): a run of a subclass's own that never reaches it
        # (FlagGems' LibTuner) prunes and benchmarks for its database, untouched.
        return _SCOPE.active and id(tuner) in _SCOPE.inside_run

    def prune_configs(self: Any, kwargs: Any, *args: Any, **more: Any) -> Any:
        configs = original_prune(self, kwargs, *args, **more)
        if not steered(self) or len(configs) <= 1:
            return configs
        if _SCOPE.mode != "rotate":
            return benchmarked_within_limit(self, kwargs, list(configs))
        return [choose(self, kwargs, list(configs))]

    def bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
        # A Triton without the one-config shortcut benchmarks the single pruned config: no need, it is the choice.
        if steered(self) and _SCOPE.mode == "rotate":
            return [0.0, 0.0, 0.0]
        return original_bench(self, *args, config=config, **meta)

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _SCOPE.active:
            return original_run(self, *args, **kwargs)
        if _SCOPE.mode != "rotate":  # Triton's own autotuning over fewer configs: its errors are its own
            _SCOPE.inside_run.add(id(self))
            try:
                return original_run(self, *args, **kwargs)
            finally:
                _SCOPE.inside_run.discard(id(self))
        # configs that failed in this call; once one runs, the key is cached with it and never chosen again
        failed_here = _SCOPE.retrying.setdefault(id(self), set())
        _SCOPE.inside_run.add(id(self))
        try:
            for _attempt in range(len(self.configs)):
                before = set(self.cache)
                try:
                    result = original_run(self, *args, **kwargs)
                except resource_errors:
                    added = [key for key in self.cache if key not in before]
                    if not added:  # the choice was made outside the scope: the error is the kernel's to report
                        raise
                    failed_here.update(str(self.cache.pop(key)) for key in added)
                    continue
                _SCOPE.added.extend((self, key) for key in self.cache if key not in before)
                _SCOPE.used[kernel_name(self)] = describe(self.best_config)
                return result
            return original_run(self, *args, **kwargs)  # every config failed here: let the last error surface
        finally:
            _SCOPE.retrying.pop(id(self), None)
            _SCOPE.inside_run.discard(id(self))

    tuner_class.prune_configs = prune_configs  # type: ignore[method-assign]
    tuner_class._bench = bench  # type: ignore[method-assign]
    tuner_class.run = run  # type: ignore[method-assign]
    tuner_class._opgate_rotation = True  # type: ignore[attr-defined]
    return True


def wanted() -> bool:
    return os.environ.get(AUTOTUNE_ENV, "").strip().lower() not in ("benchmark", "triton", "0", "off")


@contextlib.contextmanager
def _scope(mode: str) -> Iterator[dict[str, Any]]:
    """The patched Autotuner steered in `mode` while inside; nested in another scope, or without Triton, nothing
    changes and the summary is empty. Every mode's bookkeeping is cleared on exit; the rotation's choices too."""
    if _SCOPE.active or not install():
        yield {}
        return
    _SCOPE.active, _SCOPE.mode = True, mode
    _SCOPE.summary = {}
    try:
        yield _SCOPE.summary
    finally:
        _SCOPE.active, _SCOPE.mode = False, "rotate"
        for tuner, key in _SCOPE.added:  # only the rotation records its choices, to take them back
            tuner.cache.pop(key, None)
        _SCOPE.added.clear()
        _SCOPE.used.clear()
        _SCOPE.retrying.clear()
        _SCOPE.inside_run.clear()


@contextlib.contextmanager
def rotating_configs() -> Iterator[dict[str, Any]]:
    """Inside: autotuned kernels run one config per key (module docstring); yields the summary (kernel -> its
    config count and the config each key ran) for the report's facts. On exit the autotuners forget the keys
    chosen inside, so a timing check in the same process autotunes them as Triton does."""
    with _scope("rotate") as summary:
        yield summary


def within_limit_wanted() -> bool:
    """Whether the runtime stage autotunes in configs_within_limit(): unless OPGATE_RUNTIME_AUTOTUNE=all asks for
    Triton's autotuning over every config ("within-limit", or unset: within the limit); another value is an
    InputError."""
    from opgate.engine.settings import choice

    return choice(RUNTIME_AUTOTUNE_ENV, ("all", "within-limit")) != "all"


@contextlib.contextmanager
def configs_within_limit() -> Iterator[dict[str, Any]]:
    """Inside: Triton's autotuner benchmarks only the configs within ELEMENTS_PER_THREAD_LIMIT at each new key (all
    of them where none is), and keeps its choice cached, as it keeps every choice; yields the summary (kernel -> its
    config count, how many were benchmarked at each key, the configs left out). Nested in another scope, or without
    Triton, it changes nothing."""
    with _scope("within limit") as summary:
        yield summary

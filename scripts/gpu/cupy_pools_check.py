"""H200: the sanitized child's CuPy hook on a real CuPy (engine/import_hooks.after_import, verify/runtime.py): after
disable_allocator_caches(), importing CuPy turns its device and pinned pools off, so an allocation leaves the pool
empty; CuPy's own resource reads still work through its loader. Prints one JSON line; exit 1 when a pool is on."""

import json
import sys

from opgate.verify.runtime import disable_allocator_caches

disable_allocator_caches()
import cupy  # noqa: E402  (the hook fires here)

array = cupy.arange(1 << 20, dtype=cupy.float32)
total = float(array.sum())
pool = cupy.get_default_memory_pool()
facts = {"cupy": cupy.__version__, "sum": total, "pool_used_bytes": int(pool.used_bytes()),
         "pool_total_bytes": int(pool.total_bytes()),
         "pinned_free_blocks": cupy.get_default_pinned_memory_pool().n_free_blocks()}
print(json.dumps(facts))
sys.exit(0 if facts["pool_used_bytes"] == 0 and facts["pool_total_bytes"] == 0 else 1)

"""The QoS worker with verify's latency-sensitive request: `python -m opgate.verify.qos_worker MODE [options]`.

Modes, options and the one timing path are opgate.gpu.probes.qos_worker's; this module registers the `operator`
request there (one call of a user's implementation from an `opgate verify` spec file at its perf_dims). That request
needs verify's implementation loader and inputs, which the probe layer does not import, so it lives here;
`operator_subject` is the QosSubject that selects it and names this module as the worker to run.
"""

from __future__ import annotations

import argparse
import sys

from opgate.gpu.probes import qos_worker
from opgate.gpu.probes.qos import QosSubject
from opgate.gpu.probes.qos_worker import LatencyRequest

WORKER_MODULE = "opgate.verify.qos_worker"


def operator_subject(spec_file: str, op: str, impl: str, dtype: str, seed: int = 0) -> QosSubject:
    """One call of implementation `impl` of operator `op` (spec file `spec_file`) in `dtype` at its perf_dims."""
    return QosSubject(f"{op} {impl} {dtype} at its perf_dims", "operator",
                      ("--subject", "operator", "--spec-file", str(spec_file), "--op", op, "--impl", impl,
                       "--dtype", dtype, "--seed", str(seed)), worker_module=WORKER_MODULE)


def operator_request(args: argparse.Namespace, priority: int | None) -> LatencyRequest:
    """One call of the user's implementation at the operator's perf_dims, on a torch stream (of `priority`)."""
    import torch

    from opgate.verify.runtime import cuda_inputs, load_implementation
    from opgate.verify.tasks import ImplementationRef

    torch.cuda.set_device(args.device)
    op, implementation = load_implementation(ImplementationRef(args.spec_file, args.op, args.impl))
    dims = op.timing_dims()
    inputs = cuda_inputs(op, dims, args.dtype, args.seed)
    torch.cuda.synchronize()  # the inputs were made on the default stream; the calls run on another
    owner = None
    if priority is None:
        stream = torch.cuda.Stream()
    else:
        # torch's stream pool has a fixed few priority levels, possibly fewer than the device's range: a CuPy
        # stream of exactly `priority`, wrapped, is the stream the probe kernel gets in this mode.
        cupy, _ = qos_worker._setup(args.device)
        owner = cupy.cuda.Stream(non_blocking=True, priority=priority)
        stream = torch.cuda.ExternalStream(owner.ptr)
    fn = implementation.fn

    def submit() -> None:
        with torch.cuda.stream(stream):
            fn(*inputs)

    return LatencyRequest(submit, stream.synchronize,
                          {"subject": "operator", "op": op.name, "impl": implementation.name, "dtype": args.dtype,
                           "dims": dims, "stream_priority": int(stream.priority)}, keep_alive=(owner,))


qos_worker.register_request("operator", operator_request)
build_parser = qos_worker.build_parser

if __name__ == "__main__":
    sys.exit(qos_worker.main(sys.argv[1:]))

"""A stand-in for tests/data/gpu/gpu_recovery_worker.py that speaks its JSON-lines protocol without a GPU, so the
supervisor's detection/restart/timing logic can be tested on CPU. Not a measurement: nothing here
pretends to be one. PROTOCOL_WORKER_FAULT picks how a "poison" request ends:
  sticky  answer like a worker whose CUDA context is lost, then exit 17 (what the real worker does)
  die     exit without answering (a crash)
  hang    stop answering (a hung driver call)
"""

import json
import os
import sys
import time

mode = os.environ.get("PROTOCOL_WORKER_FAULT", "sticky")


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


say({"op": "hello", "ok": True, "pid": os.getpid(), "device": "protocol stand-in"})
for line in sys.stdin:
    request = json.loads(line)
    op = request["op"]
    if op == "compute":
        say({"op": op, "ok": True, "correct": True, "rel_error": 0.0})
    elif op == "poison":
        if mode == "sticky":
            say({"op": op, "ok": False, "faulted": True, "cuda_error": 700, "cuda_error_name": "cudaErrorIllegalAddress",
                 "sticky": True})
            os._exit(17)
        if mode == "die":
            os._exit(9)
        time.sleep(3600)
    elif op == "exit":
        say({"op": op, "ok": True})
        break

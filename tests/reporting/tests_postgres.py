"""A throw-away PostgreSQL server for one test: Debian's server binaries, a cluster in a temporary folder owned
by the `postgres` user, listening only on a Unix socket there."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    command = list(args)
    if os.geteuid() == 0:  # initdb refuses to run as root
        command = ["runuser", "-u", "postgres", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args[:1])} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return done


@contextmanager
def temporary_postgres() -> Iterator[str]:
    """Yields a SQLAlchemy URL of a fresh, empty database; stops the server and removes the cluster after."""
    root = Path(tempfile.mkdtemp(prefix="opgate-pg-"))  # under /tmp: pytest's own tmp folders are root-only
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for path in (root, sock):
            os.chown(path, user.pw_uid, user.pw_gid)
    _as_postgres(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    port = "55433"
    _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                 f"-c listen_addresses='' -k {sock} -p {port} -c fsync=off", "start")
    try:
        _as_postgres(str(BIN / "createdb") if (BIN / "createdb").exists() else shutil.which("createdb") or "createdb",
                     "-h", str(sock), "-p", port, "-U", "postgres", "opgate")
        yield f"postgresql+psycopg2://postgres@/opgate?host={sock}&port={port}"
    finally:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

"""Run history: `--history DB` appends each run; `opgate history DB` lists runs and a figure's trend.

Through SQLAlchemy Core, so a path is a SQLite file and a URL (postgresql://user@host/db) is that database,
with the same two tables: `opgate_runs` (one row per run, the whole schema-2 report kept as JSON) and
`opgate_figures` (one row per numeric figure: key, labels, value, unit), which is what trends read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from opgate.model.errors import InputError
from opgate.model.results import RunReport


@dataclass(frozen=True)
class RunRow:
    run_id: int
    verb: str
    subject: str
    host: str
    gpu: str
    started_at: str
    exit_code: int
    counts: str


@dataclass(frozen=True)
class TrendPoint:
    run_id: int
    started_at: str
    labels: str
    value: float
    unit: str


def database_url(db: str) -> str:
    """A SQLAlchemy URL for a path (SQLite) or a URL given as is."""
    if "://" in db:
        return db
    path = Path(db).expanduser()
    if path.parent and not path.parent.exists():
        raise InputError(f"history database {db}: folder {path.parent} does not exist; create it or pick another path")
    return f"sqlite:///{path.resolve()}"


def _tables():  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    meta = sa.MetaData()
    runs = sa.Table(
        "opgate_runs", meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("verb", sa.String(32), nullable=False, index=True),
        sa.Column("subject", sa.String(512), nullable=False, index=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu", sa.String(255), nullable=False),
        sa.Column("started_at", sa.String(64), nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("tool_version", sa.String(64), nullable=False),
        sa.Column("counts", sa.String(255), nullable=False),
        sa.Column("report_json", sa.Text, nullable=False),
    )
    figures = sa.Table(
        "opgate_figures", meta,
        sa.Column("run_id", sa.Integer, sa.ForeignKey("opgate_runs.id"), nullable=False, index=True),
        sa.Column("check_id", sa.String(512), nullable=False),
        sa.Column("key", sa.String(255), nullable=False, index=True),
        sa.Column("labels", sa.String(1024), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("unit", sa.String(64), nullable=False),
    )
    return meta, runs, figures


def _read_only_url(db: str) -> str:
    """The URL a command that only reads opens: a SQLite file must exist and is opened read-only (a typo must not
    leave an empty database behind, nor opgate's tables in another application's file)."""
    if "://" in db:
        return db
    path = Path(db).expanduser()
    if not path.is_file():
        raise InputError(f"history database {db} does not exist; runs are stored in it by "
                         f"'opgate ... --history {db}'")
    return f"sqlite:///file:{path.resolve()}?mode=ro&uri=true"


def _check_schema(engine, db: str, meta, read_only: bool) -> None:  # type: ignore[no-untyped-def]
    """Refuse a database whose opgate tables are missing (read-only) or have other columns than opgate's."""
    import sqlalchemy as sa

    inspector = sa.inspect(engine)
    present = set(inspector.get_table_names())
    for table in meta.sorted_tables:
        if table.name not in present:
            if read_only:
                raise InputError(f"history database {db} has no {table.name} table: it is not one 'opgate ... "
                                 "--history' wrote; give the database your runs were stored in")
            continue
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        missing = sorted(set(table.columns.keys()) - columns)
        if missing:
            raise InputError(f"history database {db}: table {table.name} lacks the column(s) {', '.join(missing)} "
                             "opgate stores; it belongs to another program or an older opgate: use a new file")


def check_history_target(db: str) -> None:
    """Before any work: the folder of a --history SQLite path exists; an existing file, or a database URL, opens
    (read-only for a file) and its opgate tables, if any, have opgate's columns. Nothing is created here: a run
    that then fails must not leave a database behind, and an unreachable server found only after every check ran
    ended the run with exit 2 beside a JSON report saying 0."""
    database_url(db)
    if "://" not in db and not Path(db).expanduser().is_file():
        return  # a new SQLite file: created when the run is stored
    sa = _sqlalchemy()
    try:
        arguments = {"connect_timeout": 10} if db.startswith("postgresql") else {}
        engine = sa.create_engine(_read_only_url(db), connect_args=arguments)
        with engine.connect():
            pass
        _check_schema(engine, db, _tables()[0], read_only=False)
    except InputError:
        raise
    except Exception as exc:  # not a SQLite file, a missing driver, a server that is not there
        raise _cannot_open(db, exc) from None
    engine.dispose()


def _sqlalchemy():  # type: ignore[no-untyped-def]
    try:
        import sqlalchemy
    except ImportError:
        raise InputError("--history needs SQLAlchemy; install opgate with the reports extra: "
                         "pip install 'opgate[reports]'") from None
    return sqlalchemy


def _cannot_open(db: str, exc: Exception) -> InputError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return InputError(f"history database {db!r} cannot be opened ({type(exc).__name__}: {first}); pass a SQLite "
                      "path or a reachable database URL")


def _engine(db: str, read_only: bool = False):  # type: ignore[no-untyped-def]
    """(engine, runs, figures); `read_only`: for the commands that only read (history, diff --against-last), which
    never create a database or a table."""
    sa = _sqlalchemy()
    try:
        engine = sa.create_engine(_read_only_url(db) if read_only else database_url(db))
        meta, runs, figures = _tables()
        _check_schema(engine, db, meta, read_only)
        if not read_only:
            meta.create_all(engine)
    except InputError:
        raise
    except Exception as exc:  # a bad URL, a missing driver, a server that is not there: the user's input
        raise _cannot_open(db, exc) from None
    return engine, runs, figures


def subject_of(report: RunReport) -> str:
    """What a run judged, so runs of the same thing compare: its verb's history subject (the spec file, the
    binaries: opgate.reporting.renderers), else the host."""
    from opgate.reporting.renderers import renderers_for

    own = renderers_for(report.verb).history_subject
    if own is not None:
        return own(report)
    return str(report.host.get("hostname", "")) if report.host else ""


def gpu_of(report: RunReport) -> str:
    """The GPU a run measured on, when the report says (doctor's inventory, verify's runtime stage)."""
    for result in report.results:
        if isinstance(result.extra, dict) and isinstance(result.extra.get("gpu"), str):
            return result.extra["gpu"]
        for figure in result.figures:
            named = figure.key == "gpu.name" or (  # a report written before figures were keyed at the source
                not figure.key and figure.name.endswith(" name") and figure.name.startswith("GPU"))
            if named and isinstance(figure.value, str):
                return figure.value
    return "none"


def append_run(db: str, report: RunReport) -> int:
    """Store one run; returns its id."""
    from opgate.reporting.metrics import report_metrics
    from opgate.reporting.schema import encode_report

    engine, runs, figures = _engine(db)
    document = encode_report(report)
    counts = ", ".join(f"{n} {k}" for k, n in report.counts().items() if n)
    with engine.begin() as conn:
        run_id = conn.execute(runs.insert().values(
            verb=report.verb, subject=subject_of(report)[:512], host=str(report.host.get("hostname", ""))[:255],
            gpu=gpu_of(report)[:255], started_at=report.started_at, duration_s=float(report.duration_s),
            exit_code=int(report.exit_code), tool_version=report.tool_version, counts=counts,
            report_json=json.dumps(document, default=str),
        )).inserted_primary_key[0]
        rows = [{"run_id": run_id, "check_id": result.check_id[:512], "key": metric.key[:255],
                 "labels": metric.label_text()[:1024], "value": float(metric.value), "unit": metric.unit[:64]}
                for result, metric in report_metrics(report.results)
                if metric.kind in ("number", "numstr") and metric.value is not None]
        if rows:
            conn.execute(figures.insert(), rows)
    engine.dispose()
    return int(run_id)


def list_runs(db: str, verb: str | None = None, subject: str | None = None, limit: int = 50) -> list[RunRow]:
    import sqlalchemy as sa

    engine, runs, _ = _engine(db, read_only=True)
    query = sa.select(runs.c.id, runs.c.verb, runs.c.subject, runs.c.host, runs.c.gpu, runs.c.started_at,
                      runs.c.exit_code, runs.c.counts).order_by(runs.c.id.desc()).limit(limit)
    if verb:
        query = query.where(runs.c.verb == verb)
    if subject:
        query = query.where(runs.c.subject.contains(subject))
    with engine.connect() as conn:
        rows = [RunRow(*row) for row in conn.execute(query)]
    engine.dispose()
    return list(reversed(rows))


def figure_trend(db: str, key: str, labels: str | None = None, verb: str | None = None,
                 subject: str | None = None) -> list[TrendPoint]:
    """Every stored value of one figure key (optionally only labels containing `labels`), oldest first."""
    import sqlalchemy as sa

    engine, runs, figures = _engine(db, read_only=True)
    query = (sa.select(figures.c.run_id, runs.c.started_at, figures.c.labels, figures.c.value, figures.c.unit)
             .join(runs, runs.c.id == figures.c.run_id).where(figures.c.key == key)
             .order_by(figures.c.run_id, figures.c.labels))
    if labels:
        query = query.where(figures.c.labels.contains(labels))
    if verb:
        query = query.where(runs.c.verb == verb)
    if subject:
        query = query.where(runs.c.subject.contains(subject))
    with engine.connect() as conn:
        points = [TrendPoint(*row) for row in conn.execute(query)]
    engine.dispose()
    return points


def last_run_like(db: str, report: RunReport) -> tuple[int, RunReport] | None:
    """The latest stored run of the same verb and subject (started before `report`, or any if it is not stored)."""
    import sqlalchemy as sa

    from opgate.reporting.schema import decode_report

    engine, runs, _ = _engine(db, read_only=True)
    query = (sa.select(runs.c.id, runs.c.report_json, runs.c.started_at)
             .where(runs.c.verb == report.verb, runs.c.subject == subject_of(report)[:512])
             .order_by(runs.c.id.desc()))
    with engine.connect() as conn:
        rows = list(conn.execute(query))
    engine.dispose()
    for run_id, document, started_at in rows:
        stored = decode_report(json.loads(document))
        if stored.started_at == report.started_at and stored.duration_s == round(report.duration_s, 6):
            continue  # the same run, appended with --history: compare with the one before it
        return int(run_id), stored
    return None


def render_runs(rows: Sequence[RunRow]) -> list[str]:
    lines = [f"{'run':>5}  {'verb':8} {'started':25} {'exit':>4}  {'host':16} {'gpu':24} subject / counts"]
    for r in rows:
        lines.append(f"{r.run_id:>5}  {r.verb:8} {r.started_at:25} {r.exit_code:>4}  {r.host[:16]:16} "
                     f"{r.gpu[:24]:24} {r.subject}  ({r.counts})")
    return lines


def render_trend(key: str, points: Sequence[TrendPoint]) -> list[str]:
    if not points:
        return [f"no stored values of {key!r}"]
    lines = [f"trend of {key}:"]
    first: dict[str, float] = {}
    for p in points:
        base = first.setdefault(p.labels, p.value)
        change = "" if base == 0 else f" ({(p.value - base) / abs(base):+.1%} vs first)"
        lines.append(f"  run {p.run_id:>4}  {p.started_at:25} {{{p.labels}}}  {p.value:.6g} {p.unit}{change}")
    return lines


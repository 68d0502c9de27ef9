"""What insert vacuums of a big history partition cost, with Postgres's default threshold and
with a fixed one (issue 43: the last note's proposal, measured and not shipped).

    python bench/vacuum_batches.py --base 3500000 --grow 1000000

For each regime, a copy of a history partition (``--source``, with all its indexes; autovacuum
off) is built afresh in the history bench's database with the same first ``--base`` rows, vacuumed
and analyzed; then the same next ``--grow`` rows are inserted, ``--chunk`` source pages at a time,
and the table is vacuumed as autovacuum would:

- **default**: when the inserts since the last vacuum pass 1,000 + 0.2 x the table's rows (the
  defaults of ``autovacuum_vacuum_insert_threshold`` and ``_scale_factor``; Postgres counts the
  rows at the last vacuum, close enough here);
- **fixed**: every 50,000 inserts (scale factor 0);

and once more at the end, so that each regime ends with every row vacuumed. Before each vacuum a
CHECKPOINT: at a production rate (60 jobs/s), 50,000 rows take 14 minutes and a checkpoint (every 5
at most) falls between two vacuums, so a vacuum's first touch of a page writes its full image, as
in production. Each vacuum runs as autovacuum does (no parallel workers), without autovacuum's
cost delay, so its elapsed time is its work, not its pacing. Prints each regime's vacuums, the
largest one's seconds and WAL, and the totals. The copy is dropped at the end.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

DEFAULT_THRESHOLD = 1000
DEFAULT_SCALE = 0.2
FIXED = 50_000  # awa_django.worker.retention.VACUUM_INSERTS
PROBE = "vacuum_probe"


@dataclass
class Regime:
    name: str
    vacuums: list[tuple[float, int]] = field(default_factory=list)  # (seconds, WAL bytes)

    def due(self, inserted: int, rows: int) -> bool:
        if self.name == "fixed":
            return inserted >= FIXED
        return inserted >= DEFAULT_THRESHOLD + DEFAULT_SCALE * rows


def wal(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def vacuum(conn: psycopg.Connection) -> tuple[float, int]:
    conn.execute("CHECKPOINT")
    before = wal(conn)
    started = time.perf_counter()
    conn.execute(sql.SQL("VACUUM (PARALLEL 0) {}").format(sql.Identifier(PROBE)))
    return time.perf_counter() - started, wal(conn) - before


def copy_pages(conn: psycopg.Connection, source: str, first: int, pages: int) -> int:
    """Copy the source's rows on pages [first, first + pages) into the probe (a TID range scan);
    return how many."""
    cursor = conn.execute(
        sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE ctid >= %s::tid AND ctid < %s::tid").format(
            sql.Identifier(PROBE), sql.Identifier(source)
        ),
        [f"({first},0)", f"({first + pages},0)"],
    )
    return cursor.rowcount


def grow(
    conn: psycopg.Connection, source: str, page: int, rows: int, size: int, regime: Regime, chunk: int
) -> tuple[int, int]:
    """Insert about ``rows`` rows from the source's pages from ``page`` on, vacuuming when the
    regime's threshold is passed; return the next page and the table's rows."""
    since = done = 0
    while done < rows:
        copied = copy_pages(conn, source, page, chunk)
        assert copied, f"{source} has no rows past page {page}: give a smaller --base or --grow"
        page += chunk
        done += copied
        since += copied
        size += copied
        if regime.due(since, size):
            regime.vacuums.append(vacuum(conn))
            since = 0
    return page, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default="postgresql://postgres@/awa_bench_history_5m?host=.pgdata")
    parser.add_argument("--source", default=None, help="the partition to copy (default: the largest completed one)")
    parser.add_argument("--base", type=int, default=3_500_000)
    parser.add_argument("--grow", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=300, help="source pages per insert (about 30 rows a page)")
    args = parser.parse_args()

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        source = args.source
        if source is None:
            row = conn.execute(
                "SELECT relname FROM pg_class WHERE relname LIKE 'awa_job_done_c_%%' AND relkind = 'r' "
                "ORDER BY reltuples DESC LIMIT 1"
            ).fetchone()
            assert row is not None, "no completed history partition: run bench/history.py compare first"
            source = str(row[0])
        table = sql.Identifier(PROBE)
        try:
            regimes = [Regime("default"), Regime("fixed")]
            for regime in regimes:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                conn.execute(
                    sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL) WITH (autovacuum_enabled = false)").format(
                        table, sql.Identifier(source)
                    )
                )
                started = time.perf_counter()
                page = size = 0
                while size < args.base:
                    size += copy_pages(conn, source, page, 10_000)
                    page += 10_000
                conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
                print(
                    f"{regime.name}: {size:,} rows of {source}, copied and vacuumed "
                    f"in {time.perf_counter() - started:.0f} s"
                )
                page, size = grow(conn, source, page, args.grow, size, regime, args.chunk)
                regime.vacuums.append(vacuum(conn))  # the end: every row vacuumed, in both regimes
            print(f"\n{args.grow:,} rows inserted per regime; {size:,} rows at the end; the last vacuum is the end's\n")
            print("| regime | vacuums | largest: s | largest: WAL MB | total: s | total: WAL MB |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for regime in regimes:
                largest = max(regime.vacuums)
                print(
                    f"| {regime.name} | {len(regime.vacuums)} | {largest[0]:.2f} | {largest[1] / 1e6:.0f} "
                    f"| {sum(v[0] for v in regime.vacuums):.2f} | {sum(v[1] for v in regime.vacuums) / 1e6:.0f} |"
                )
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))


if __name__ == "__main__":
    main()

"""Run one operation of one system, inside that system's virtualenv; write the result as JSON.

    python -m bench.driver --system procrastinate --op drain --db-url URL --params '{...}' \
        --workdir DIR --out result.json

Started by bench/run.py in its own process group (so a timeout kills the workers too). The
result is {"ok": {...figures}} or {"skipped": reason} or {"error": message}.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", required=True)
    parser.add_argument("--op", required=True)
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from bench.systems import SYSTEMS
    from bench.systems.base import UnsupportedError

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["DATABASE_URL"] = args.db_url
    result: dict[str, object]
    system = None
    try:
        params = json.loads(args.params)
        # Settings the runner passes to the system's own project (and, inherited, to its workers):
        # the pooler rows set BENCH_AWA_POOLER and BENCH_AWA_LISTEN_DATABASE_URL this way.
        os.environ.update({str(k): str(v) for k, v in params.get("env", {}).items()})
        module = importlib.import_module(str(SYSTEMS[args.system]["module"]))
        system = module.make(args.db_url, workdir)
        if params.get("harness_url"):
            # The system under test goes through --db-url (e.g. a PgBouncer); the harness's own
            # counting and verification take this direct connection, so they do not load the pooler.
            system.harness_url = str(params["harness_url"])
        if args.op == "setup":
            system.setup()
            result = {"ok": {"versions": system.versions(), "notes": list(system.notes)}}
        else:
            from bench.metrics import METRICS

            result = {"ok": METRICS[args.op](system, params)}
    except UnsupportedError as exc:
        result = {"skipped": str(exc)}
    except Exception as exc:  # reported in the table, with the traceback in the JSON
        result = {"error": f"{type(exc).__name__}: {exc}".strip(), "traceback": traceback.format_exc()}
    finally:
        if system is not None:
            try:
                system.close()
            except Exception:  # closing must not hide the result
                pass
    Path(args.out).write_text(json.dumps(result, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

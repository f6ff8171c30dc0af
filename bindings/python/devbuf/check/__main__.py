"""python -m devbuf.check: run the conformance kit from the command line.

    python -m devbuf.check numpy pyarrow          built-in targets
    python -m devbuf.check mylib.module:factory    your factory (spec -> array)
    python -m devbuf.check --consumer mylib:from_dlpack --protocol dlpack
    python -m devbuf.check --json numpy            machine-readable
    python -m devbuf.check --list-rules

    python -m devbuf.check --json cupy torch       CUDA arrays (a GPU; scripts/gpu-check.sh)

Exit status: 0 when nothing failed, 1 on a failure, 2 on a usage error, and
2 when nothing could be checked because a named library is missing (or, for
cupy and torch, reaches no GPU).
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from . import RULES, TARGETS, Report, consumer, producer, run_target, target
from ._factories import Unavailable

# Targets whose import may take long (JAX compiles its CPU client): probed in
# a subprocess first, skipped cleanly past the timeout.
SLOW_IMPORTS: Dict[str, str] = {"jax": "jax.numpy"}


def _resolve(spec: str) -> Any:
    # (module:callable names the user's own factory or consumer: a foreign object)
    mod, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"devbuf.check: {spec!r}: expected a built-in target "
                         f"({', '.join(TARGETS)}) or module:callable")
    try:
        obj = importlib.import_module(mod)
    except ImportError as e:
        raise SystemExit(f"devbuf.check: cannot import {mod!r}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"devbuf.check: {mod!r} has no {attr!r}") from None
    return obj


def _probe_import(module: str, timeout: float) -> Optional[str]:
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"import {module} took over {timeout:g} s"
    if r.returncode:
        return f"import {module} failed: {r.stderr.strip().splitlines()[-1:]}"
    return None if time.monotonic() - t0 < timeout else f"import {module} too slow"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devbuf.check", description=(__doc__ or "").split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help="built-in target or module:factory")
    ap.add_argument("--consumer", action="append", default=[], metavar="MODULE:FN",
                    help="check a consumer fn(producer) -> array (repeatable)")
    ap.add_argument("--protocol", choices=("dlpack", "buffer"), default="dlpack",
                    help="what --consumer consumes (default dlpack)")
    ap.add_argument("--no-consumers", action="store_true",
                    help="built-in targets: producer checks only")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--verbose", "-v", action="store_true", help="every rule's text")
    ap.add_argument("--list-rules", action="store_true", help="the rules and their citations")
    ap.add_argument("--import-timeout", type=float, default=180.0,
                    help="seconds a slow library (jax) may take to import before it is "
                    "skipped (default 180)")
    a = ap.parse_args(argv)
    if a.list_rules:
        for ru in RULES.values():
            print(f"{ru.id:24} {ru.role:8} {ru.text}\n{'':33}{ru.citation}")
        return 0
    if not a.targets and not a.consumer:
        ap.print_usage(sys.stderr)
        print("devbuf.check: name a target (e.g. numpy) or module:factory", file=sys.stderr)
        return 2
    reports: List[Report] = []
    skipped: Dict[str, str] = {}
    missing: List[str] = []
    for name in a.targets:
        if ":" not in name:
            if name not in TARGETS:
                print(f"devbuf.check: no built-in target {name!r}; built in: "
                      f"{', '.join(TARGETS)}; or pass module:factory", file=sys.stderr)
                return 2
            why = _probe_import(SLOW_IMPORTS[name], a.import_timeout) \
                if name in SLOW_IMPORTS else None
            if why is None:
                try:
                    t = target(name)
                except Unavailable as e:
                    why = str(e)
                    missing.append(name)
                except ImportError as e:
                    why = f"not installed: {e}"
                    missing.append(name)
            if why is not None:
                skipped[name] = why
                if not a.json:
                    print(f"# devbuf.check: {name} skipped: {why}")
                continue
            new = run_target(t, consumers=not a.no_consumers)
            for r in new:
                r.notes.insert(0, f"{t.name} {t.version}" + (f" ({t.note})" if t.note else ""))
        else:
            new = [producer(_resolve(name), name=name)]
        reports += new
        if not a.json:
            for r in new:
                print(r.format(verbose=a.verbose) + "\n")
    for spec in a.consumer:
        r = consumer(_resolve(spec), a.protocol, name=spec)
        reports.append(r)
        if not a.json:
            print(r.format(verbose=a.verbose) + "\n")
    if missing and not reports:
        # Nothing was checked: a pass (exit 0) would say the library conforms.
        for name in missing:
            print(f"devbuf.check: {name}: {skipped[name]}; nothing was checked", file=sys.stderr)
        if a.json:
            json.dump({"ok": False, "skipped": skipped, "reports": []}, sys.stdout, indent=1)
            print()
        return 2
    ok = all(r.ok for r in reports)
    if a.json:
        json.dump({"ok": ok, "skipped": skipped, "reports": [r.as_dict() for r in reports]},
                  sys.stdout, indent=1)
        print()
    else:
        failed = sum(len(r.failures) for r in reports)
        print(f"# devbuf.check: {len(reports)} reports, {failed} failing rules"
              + (f", skipped: {', '.join(skipped)}" if skipped else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

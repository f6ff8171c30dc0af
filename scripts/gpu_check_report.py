#!/usr/bin/env python3
"""The two Python halves of scripts/gpu-check.sh, standard library only (the
GPU machines have no PyPI):

    gpu_check_report.py env PATH [--fake-lib LIB]
        print the machine's GPU, driver, CUDA and package versions; write them
        as JSON to PATH. Packages are read from their metadata, not imported
        (importing torch and JAX costs seconds and may touch the GPU).

    gpu_check_report.py kit LIB JSON
        run the conformance kit on a built-in CUDA target (`python -m
        devbuf.check LIB --json`, in this process so that the step's time limit
        ends all of it): the JSON to JSON, a summary on stdout. Exit 0 when the
        kit ran, whatever the library's results (its failing rules are findings
        to triage, not a broken check); else the kit's status (2: the library
        or its GPU is missing). This one needs devbuf (the built bindings).

    gpu_check_report.py report --work DIR --out DIR --mode real|fake --elapsed S
        gather the steps' logs and results (steps.tsv, env.json, interop.xml,
        bench_cuda.json/.md, bench_cuda_interop.json, kit_LIB.json in --work)
        into at most 8 files in --out, no folders: gpu-check.md, gpu-check.json,
        log.md, bench_cuda.md, bench_cuda.json, bench_cuda_interop.json,
        interop_tests.json, conformance_kit.json. Prints the summary.
"""
import argparse
import ctypes
import datetime
import importlib.metadata as md
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

PACKAGES = ["torch", "cupy-cuda13x", "cupy-cuda12x", "cupy", "jax", "jaxlib", "jax-cuda13-plugin",
            "jax-cuda12-plugin", "numpy", "ml_dtypes", "cuda-core", "cuda-bindings", "pytest"]
LOG_LINES = 400  # per step in log.md: the tail, where failures are
KIT_LIBS = ("cupy", "torch")  # devbuf.check's CUDA targets, one step (kit_LIB) each


def run(cmd, timeout=20):
    """stdout of cmd, or None when it is missing or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def driver_version(lib):
    """cuDriverGetVersion of the libcuda the plugin would load, as "13.0"."""
    try:
        cu = ctypes.CDLL(lib or "libcuda.so.1")
        v = ctypes.c_int(0)
        if cu.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return None
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"
    except (OSError, AttributeError) as e:
        return f"unavailable: {e}"


def env_info(path, fake_lib):
    info = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "mode": "fake" if fake_lib else "real",
            "kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": f"{platform.python_version()} ({sys.executable})"}
    q = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pcie.link.gen.max,"
             "pcie.link.width.max", "--format=csv,noheader"])
    info["gpus"] = [dict(zip(["name", "driver", "memory", "pcie_gen_max", "pcie_width_max"],
                             [f.strip() for f in line.split(",")]))
                    for line in (q or "").splitlines() if line.strip()]
    smi = run(["nvidia-smi"]) or ""
    m = re.search(r"CUDA Version:\s*([\d.]+)", smi)
    info["nvidia_smi_cuda"] = m.group(1) if m else None
    if not info["gpus"]:
        info["gpus_note"] = ("nvidia-smi not found" if shutil.which("nvidia-smi") is None
                             else "nvidia-smi listed no GPU")
    info["libcuda"] = fake_lib or "libcuda.so.1"
    info["cuDriverGetVersion"] = driver_version(fake_lib)
    nv = run(["nvcc", "--version"])
    m = re.search(r"release ([^\s,]+), (V[\w.]+)", nv or "")
    info["nvcc"] = f"{m.group(1)} ({m.group(2)})" if m else (nv and nv.splitlines()[-1])
    info["cmake"] = (run(["cmake", "--version"]) or "").split("\n")[0] or None
    info["ninja"] = run(["ninja", "--version"])
    info["cc"] = (run(["cc", "--version"]) or "").split("\n")[0] or None
    pk = {}
    for p in PACKAGES:
        try:
            pk[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    info["packages"] = pk
    pathlib.Path(path).write_text(json.dumps(info, indent=2) + "\n")
    for k, v in info.items():
        if k == "gpus":
            for i, g in enumerate(v):
                print(f"GPU {i}: {g.get('name')}, driver {g.get('driver')}, {g.get('memory')}, "
                      f"PCIe gen {g.get('pcie_gen_max')} x{g.get('pcie_width_max')}")
        elif k == "packages":
            print("packages: " + (", ".join(f"{a} {b}" for a, b in v.items()) or "none of interest"))
        else:
            print(f"{k}: {v}")


# ---- report ------------------------------------------------------------------------------

def read_json(p):
    try:
        return json.loads(pathlib.Path(p).read_text())
    except (OSError, ValueError):
        return None


def read_lines(p):
    try:
        return [line for line in pathlib.Path(p).read_text().splitlines() if line.strip()]
    except OSError:
        return []


def junit(path):
    """Test outcomes from pytest's JUnit XML (xunit1, with record_property)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    tests = []
    for tc in root.iter("testcase"):
        t = {"name": tc.get("name"), "seconds": float(tc.get("time") or 0), "outcome": "passed"}
        for kind in ("failure", "error", "skipped"):
            el = tc.find(kind)
            if el is not None:
                t["outcome"] = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                msg = el.get("message") or ""
                t["message"] = msg if kind == "skipped" else (msg + "\n" + (el.text or ""))[:4000]
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        if props:
            t["recorded"] = props
        tests.append(t)
    return tests


def steps(work):
    out = []
    try:
        lines = pathlib.Path(work, "steps.tsv").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        name, status, secs, note = (line.split("\t") + ["", "", ""])[:4]
        out.append({"step": name, "status": status, "seconds": int(secs or 0), "note": note})
    return out


def interop_md(tests):
    if tests is None:
        return ["No results (the interop tests did not run; see Steps)."]
    counts = {}
    for t in tests:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    lines = [", ".join(f"{n} {k}" for k, n in sorted(counts.items())), "",
             "| test | outcome | note |", "|---|---|---|"]
    for t in tests:
        note = t.get("message", "").split("\n")[0]
        if t.get("recorded"):
            note = "; ".join(f"{k}: {v}" for k, v in t["recorded"].items()) + (
                f"; {note}" if note else "")
        lines.append(f"| `{t['name']}` | {t['outcome']} | {note.replace('|', '/')[:300]} |")
    return lines


def goals(bench):
    if not bench:
        return []
    out = []
    for key in ("goals_d2h", "goals_alloc"):
        for k, v in (bench.get(key) or {}).items():
            if k != "at_bytes":
                out.append(f"{key[6:]} {k}: {'met' if v else 'NOT met'}")
    return out


# ---- the conformance kit on CUDA arrays ----------------------------------------------------

def kit_rows(d):
    """(report, pass, fail, skip, failing rules) per report of a devbuf.check --json document."""
    rows = []
    for rep in d.get("reports") or []:
        c = rep.get("counts") or {}
        bad = [r["rule"] for r in rep.get("results") or [] if r.get("status") == "fail"]
        rows.append((f"{rep.get('role')}: `{rep.get('target')}`", c.get("pass", 0),
                     c.get("fail", 0), c.get("skip", 0), bad))
    return rows


def kit(a):
    import contextlib
    from devbuf.check.__main__ import main as kit_main
    with open(a.json, "w") as f, contextlib.redirect_stdout(f):
        rc = kit_main([a.lib, "--json"])
    d = read_json(a.json)
    if d is None:
        print(f"devbuf.check {a.lib}: no JSON came out (exit status {rc})")
        return rc or 1
    for why in (d.get("skipped") or {}).values():
        print(f"devbuf.check {a.lib}: skipped: {why}")
    for name, p, f, sk, bad in kit_rows(d):
        print(f"{name}: {p} pass, {f} fail, {sk} skip" + (f"; failing: {', '.join(bad)}"
                                                           if bad else ""))
    return 0 if rc in (0, 1) else rc


def kit_md(work, st):
    lines = ["## Conformance kit on CUDA arrays (devbuf.check)", "",
             "`python -m devbuf.check LIB --json` for " + ", ".join(KIT_LIBS) + ": the "
             "library's CUDA arrays, values read back through devbuf.cuda. A failing rule is a "
             "finding to triage in docs/conformance-report.md, not a failed step.", "",
             "| library | report | pass | fail | skip | failing rules |", "|---|---|---|---|---|---|"]
    docs = {}
    for lib in KIT_LIBS:
        d = docs[lib] = read_json(work / f"kit_{lib}.json")
        s = next((s for s in st if s["step"] == f"kit_{lib}"), None)
        rows = kit_rows(d) if d else []
        for name, p, f, sk, bad in rows:
            lines.append(f"| {lib} | {name} | {p} | {f} | {sk} | "
                         f"{', '.join(f'`{b}`' for b in bad) or 'none'} |")
        for why in ((d or {}).get("skipped") or {}).values():
            lines.append(f"| {lib} | skipped: {why} | | | | |")
        if not rows and not (d or {}).get("skipped"):
            why = f"{s['status']}: {s['note']}" if s else "the step did not run"
            lines.append(f"| {lib} | no results ({why}) | | | | |")
    return lines, docs


def report(a):
    work, out = pathlib.Path(a.work), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = read_json(work / "env.json") or {}
    st = steps(work)
    tests = junit(work / "interop.xml")
    bench = read_json(work / "bench_cuda.json")
    ibench = read_json(work / "bench_cuda_interop.json")
    failed = [s["step"] for s in st if s["status"] in ("fail", "timeout", "out_of_time")]
    fake = a.mode == "fake"

    head = ["# devbuf.cuda GPU check" + (" (dry run over the fake libcuda)" if fake else ""), ""]
    if fake:
        head += ["**Dry run**: devbuf.cuda ran over `tests/gpu/fake_cuda.c`. Its figures measure "
                 "host memcpy, not a GPU, and the framework tests skip: this run only shows that "
                 "the check itself works. The real run is still owed.", ""]
    gpus = env.get("gpus") or []
    gpu = "; ".join(f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})" for g in gpus)
    head += [f"- Date (UTC): {env.get('date_utc', '?')}; whole run {a.elapsed}s",
             f"- GPU: {gpu or env.get('gpus_note', 'none')}",
             f"- CUDA: driver API {env.get('cuDriverGetVersion')} ({env.get('libcuda')}); "
             f"nvidia-smi CUDA {env.get('nvidia_smi_cuda')}; nvcc {env.get('nvcc')}",
             f"- Host: {env.get('kernel')} {env.get('machine')}, {env.get('cpus')} CPUs; "
             f"{env.get('cc')}; {env.get('cmake')}; ninja {env.get('ninja')}",
             f"- Python: {env.get('python')}",
             "- Packages: " + (", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items())
                               or "none of interest"),
             f"- Command: `scripts/gpu-check.sh{' --fake' if fake else ''}`",
             f"- Result: {'FAILED: ' + ', '.join(failed) if failed else 'no step failed'}"]
    notes = read_lines(work / "notes.txt")
    head += [f"- Note: {n}" for n in notes] + [""]
    lines = head + ["## Steps", "", "| step | status | seconds | note |", "|---|---|---:|---|"]
    lines += [f"| {s['step']} | {s['status']} | {s['seconds']} | {s['note']} |" for s in st]
    lines += ["", "## Interop tests (tests/python/test_gpu_interop.py)", ""] + interop_md(tests)
    lines += ["", "## bench_cuda", ""]
    g = goals(bench)
    if g and not fake:
        lines += ["Goals: " + "; ".join(g) + ".", ""]
    bmd = work / "bench_cuda.md"
    lines += [bmd.read_text().replace("## CUDA", "### Run").strip() if bmd.exists()
              else "No results (see Steps).", ""]
    imd = work / "bench_cuda_interop.log"
    lines += [imd.read_text().replace("## ", "## Python: ").strip() if imd.exists()
              else "## Python: devbuf.view / from_dlpack of a PyTorch CUDA tensor\n\nNo results.", ""]
    klines, kdocs = kit_md(work, st)
    lines += klines + [""]
    (out / "gpu-check.md").write_text("\n".join(lines))

    summary = {"mode": a.mode, "elapsed_s": int(a.elapsed), "failed_steps": failed, "notes": notes, "env": env,
               "steps": st, "interop_tests": tests, "bench_cuda": bench,
               "bench_cuda_interop": ibench,
               "conformance_kit": {lib: kit_rows(d) if d else None for lib, d in kdocs.items()},
               "bench_cuda_goals": g if not fake else "not applicable: the fake driver measures host memcpy"}
    (out / "gpu-check.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "interop_tests.json").write_text(json.dumps(tests, indent=2) + "\n")
    (out / "conformance_kit.json").write_text(json.dumps(kdocs, indent=2) + "\n")
    for name in ("bench_cuda.json", "bench_cuda.md", "bench_cuda_interop.json"):
        if (work / name).exists():
            shutil.copyfile(work / name, out / name)

    log = ["# gpu-check: each step's output", "",
           f"The last {LOG_LINES} lines of each; the whole logs stayed in {work}.", ""]
    for s in st:
        p = work / f"{s['step']}.log"
        text = p.read_text(errors="replace").splitlines() if p.exists() else []
        log += [f"## {s['step']} ({s['status']}, {s['seconds']}s)", "", "```"]
        log += text[-LOG_LINES:] if text else [f"({s['note'] or 'no output'})"]
        log += ["```", ""]
    (out / "log.md").write_text("\n".join(log))
    print("\n".join(head[2 if not fake else 4:]))
    print("| step | status | seconds | note |")
    for s in st:
        print(f"| {s['step']} | {s['status']} | {s['seconds']} | {s['note']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env")
    e.add_argument("path")
    e.add_argument("--fake-lib", default="")
    r = sub.add_parser("report")
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--mode", choices=["real", "fake"], required=True)
    r.add_argument("--elapsed", default="0")
    k = sub.add_parser("kit")
    k.add_argument("lib", choices=KIT_LIBS)
    k.add_argument("json")
    a = ap.parse_args()
    if a.cmd == "env":
        env_info(a.path, a.fake_lib)
    elif a.cmd == "kit":
        sys.exit(kit(a))
    else:
        report(a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Run every benchmark and regenerate docs/benchmarks.md (and its plots).

    scripts/bench.sh            # = .venv/bin/python benchmarks/run_all.py
    scripts/bench.sh --quick    # fewer repetitions, smaller sizes

Each benchmark measures its own baseline in the same run and prints a ratio, so
the figures compare within one run on one machine; absolute numbers on a shared
2-CPU VM are noisy. Sections whose benchmark cannot run here (the CUDA one
without a GPU) are carried over from the current file unchanged, with a note.
Plots are written as SVG (no plotting library needed) to docs/img/.
"""
import argparse
import datetime
import html
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
IMG = os.path.join(ROOT, "docs", "img")
PY = sys.executable


def bench_list(build, quick, tmp):
    q = ["--quick"] if quick else []
    j = lambda name: os.path.join(tmp, name + ".json")  # noqa: E731
    return [
        # (section title, script, argv, output style, json path or None)
        ("Copy bandwidth", "benchmarks/copy/bench_copy.py", q + ["--json", j("copy")], "md", j("copy")),
        ("Copy into the caller's memory (out=)", "benchmarks/copy/bench_copy_out.py",
         q + ["--json", j("copy_out")], "md", None),
        ("Format strings", "benchmarks/format/bench_format.py",
         q + ["--lib", os.path.join(build, "lib", "libdevbuf.so")], "md", None),
        ("devbuf-info", "benchmarks/info/bench_info.py",
         ["--build", build] + (["--runs", "11"] if quick else []), "md", None),
        ("Python bindings", "benchmarks/python/bench_view.py", q + ["--json", j("view")], "text", j("view")),
        # The matrix builds of scripts/test-matrix.sh (scripts/bench.sh makes them).
        ("CPython versions", "benchmarks/python/bench_versions.py", q + ["--json", j("versions")],
         "md", None),
        ("Interop", "benchmarks/interop/bench_dlpack.py", q + ["--json", j("dlpack")], "md", j("dlpack")),
        # Needs nanobind from PyPI once (pip --target into the build directory) and g++;
        # without them the section says it was skipped.
        ("nanobind side by side", "benchmarks/nanobind/bench_nanobind.py", q + ["--json", j("nanobind")],
         "md", None),
        ("Pickle protocol 5", "benchmarks/pickle/bench_pickle.py", q + ["--json", j("pickle")], "text", j("pickle")),
        ("Python plugins (libffi)", "benchmarks/ffi/bench_closure.py", q + ["--json", j("ffi")], "md", j("ffi")),
    ]


# Sections that other commands write (by hand from their output), kept as
# they are with a note saying where they come from.
EXTERNAL = {
    "The device extension inside CPython": "CPYREF_BENCH=1 scripts/cpython-reference.sh",
    "The capability gate inside CPython 3.13 and 3.13t": "CPYREF_BENCH=1 scripts/cpython-reference.sh",
    "Free-threaded CPython": "FT_BENCH=1 FT_STEPS=bench scripts/python-ft.sh",
}


def machine():
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(open("/proc/meminfo").readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()[0]
    return (f"{model}, {os.cpu_count()} CPUs{mem}; Linux {platform.release()}; "
            f"Python {platform.python_version()}; load average {load:.1f} at start")


def old_sections(text):
    """Split an existing benchmarks.md into {title: body} (headings inside code fences are text)."""
    out, title, body, fence = {}, None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            if title is not None:
                out[title] = "\n".join(body).strip("\n") + "\n"
            title, body = line[3:].strip(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        out[title] = "\n".join(body).strip("\n") + "\n"
    return out


def strip_heading(text, title):
    """Drop a benchmark's own '## title' line; its '# machine' line becomes an
    italic note, since a level-1 heading inside a section would break the page."""
    lines = text.strip("\n").splitlines()
    if lines and lines[0].startswith("## "):
        lines = lines[1:]
    lines = [f"*{ln[2:].strip()}*" if ln.startswith("# ") else ln for ln in lines]
    return "\n".join(lines).strip("\n") + "\n"


# ---- SVG plots -----------------------------------------------------------------------

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def svg_lines(path, title, xlabels, series, ylabel):
    """A line chart: series = {name: [y per x]} on a categorical x axis."""
    W, H, L, R, T, B = 720, 360, 60, 190, 40, 50
    ymax = max([max(v) for v in series.values() if v] + [1e-9]) * 1.1
    pw, ph = W - L - R, H - T - B
    x = lambda i: L + (pw * i / max(1, len(xlabels) - 1))  # noqa: E731
    y = lambda v: T + ph - ph * v / ymax  # noqa: E731
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
         f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="black"/>',
         f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" text-anchor="middle">{html.escape(ylabel)}</text>']
    for k in range(5):
        v = ymax * k / 4
        s.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{L + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for i, lab in enumerate(xlabels):
        s.append(f'<text x="{x(i):.1f}" y="{T + ph + 18}" text-anchor="middle">{html.escape(lab)}</text>')
    for n, (name, vals) in enumerate(series.items()):
        c = COLORS[n % len(COLORS)]
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
        s.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        for i, v in enumerate(vals):
            s.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{c}"/>')
        s.append(f'<rect x="{W - R + 12}" y="{T + 16 * n}" width="12" height="3" fill="{c}"/>')
        s.append(f'<text x="{W - R + 30}" y="{T + 16 * n + 5}">{html.escape(name)}</text>')
    s.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(s))


def svg_bars(path, title, items, xlabel):
    """A horizontal bar chart: items = [(label, value)]."""
    W, L, R, T, rowh = 760, 330, 70, 40, 22
    H = T + rowh * len(items) + 40
    vmax = max([v for _, v in items] + [1e-9]) * 1.05
    pw = W - L - R
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{html.escape(title)}</text>']
    for i, (lab, v) in enumerate(items):
        yy = T + i * rowh
        w = pw * v / vmax
        c = COLORS[0] if not lab.startswith("baseline") else "#999"
        s.append(f'<text x="{L - 8}" y="{yy + 14}" text-anchor="end">{html.escape(lab)}</text>')
        s.append(f'<rect x="{L}" y="{yy + 3}" width="{w:.1f}" height="{rowh - 6}" fill="{c}"/>')
        s.append(f'<text x="{L + w + 5:.1f}" y="{yy + 14}">{v:.0f}</text>')
    s.append(f'<text x="{L + pw / 2}" y="{H - 10}" text-anchor="middle">{html.escape(xlabel)}</text>')
    s.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(s))


def plots(results):
    os.makedirs(IMG, exist_ok=True)
    made = {}
    c = results.get("Copy bandwidth")
    if c:
        labels = [f"{n // 1024} KiB" if n < 2**20 else f"{n // 2**20} MiB" for n in c["sizes"]]
        series = {"memcpy (baseline)": c["memcpy_gbs"]}
        for d, v in c["h2d_gbs"].items():
            series[f"{d} host->device"] = v
        for d, v in c["d2h_gbs"].items():
            series[f"{d} device->host"] = v
        svg_lines(os.path.join(IMG, "copy_bandwidth.svg"), "Copy bandwidth against size",
                  labels, series, "GB/s")
        made["Copy bandwidth"] = "img/copy_bandwidth.svg"
    items = []
    v = results.get("Python bindings")
    if v:
        for k, val in v.get("python_ns", {}).items():
            items.append((("baseline: " if "devbuf" not in k else "") + k, val))
    d = results.get("Interop")
    if d:
        for k, val in d.get("ns", {}).items():
            items.append((("baseline: " if not k.startswith(("devbuf", "table")) and "(devbuf)" not in k else "") + k, val))
    f = results.get("Python plugins (libffi)")
    if f and isinstance(f.get("ns"), dict):
        for k, val in f["ns"].items():
            items.append((k, val))
    if items:
        svg_bars(os.path.join(IMG, "per_call_overheads.svg"), "Per-call overheads (ns, lower is better)",
                 items, "nanoseconds per call (grey: baselines measured in the same run)")
        made["Per-call overheads"] = "img/per_call_overheads.svg"
    return made


def main():
    ap = argparse.ArgumentParser(description="run every benchmark, regenerate docs/benchmarks.md")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--build", default=os.environ.get("DEVBUF_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default=DOC)
    a = ap.parse_args()
    old = old_sections(open(a.out).read()) if os.path.exists(a.out) else {}
    env = dict(os.environ, DEVBUF_BUILD_DIR=a.build,
               PYTHONPATH=os.path.join(a.build, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sections, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for title, script, argv, style, jpath in bench_list(a.build, a.quick, tmp):
            cmd = [PY, script] + argv
            # Paths under the checkout are shown relative to it (a reader's checkout is elsewhere).
            shown = " ".join([".venv/bin/python", script] + [
                os.path.relpath(x, ROOT) if x.startswith(ROOT + os.sep) else x
                for x in argv if not x.startswith(tmp) and not (x == "--json")])
            if not os.path.exists(os.path.join(ROOT, script)):
                print(f"[bench] {title}: {script} does not exist yet, skipped", file=sys.stderr)
                continue
            print(f"[bench] {title}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                body = (f"**This run failed** (exit {p.returncode}); its output:\n\n```text\n"
                        f"{(p.stdout + p.stderr)[-3000:]}\n```\n")
            else:
                out = strip_heading(p.stdout, title)
                body = out if style == "md" else f"```text\n{out}```\n"
                if jpath and os.path.exists(jpath):
                    results[title] = json.load(open(jpath))
            sections.append((title, f"Command: `{shown}`\n\n{body}"))
    made = plots(results)
    now = datetime.date.today().isoformat()
    text = [
        "# Benchmarks",
        "",
        "Generated by `scripts/bench.sh` (`benchmarks/run_all.py`); do not edit by hand: rerun it.",
        f"Run of {now} on {machine()}.",
        "",
        "Every figure sits beside a baseline measured in the same run, and the ratio is what to",
        "read: these machines are shared and noisy. Tests never assert on timing.",
        "",
    ]
    if made:
        text += ["## Plots", ""]
        for name, rel in made.items():
            text += [f"![{name}]({rel})", ""]
    for title, body in sections:
        text += [f"## {title}", "", body.rstrip(), ""]
    ran = {t for t, _ in sections}
    for title, body in old.items():
        if title in ran or title == "Plots":
            continue
        if body.startswith("*Not rerun") or body.startswith("*Made by"):  # drop the previous note
            body = body.split("\n\n", 1)[1] if "\n\n" in body else ""
        if title in EXTERNAL:
            note = (f"*Made by `{EXTERNAL[title]}`, not by this script (it builds two "
                    "interpreters); carried over from the previous file:*")
        else:
            note = (f"*Not rerun by the run of {now} (needs hardware this machine lacks); "
                    "carried over from the previous file:*")
        text += [f"## {title}", "", note, "", body.rstrip(), ""]
    with open(a.out, "w") as fh:
        fh.write("\n".join(text).rstrip() + "\n")
    print(f"[bench] wrote {os.path.relpath(a.out, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()

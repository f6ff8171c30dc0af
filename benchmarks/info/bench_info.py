#!/usr/bin/env python3
"""Whole-process wall time of devbuf-info, against baselines measured in the
same run (goal: < 50 ms with every plugin present and no GPU).

    bench_info.py [--build DIR] [--runs N] [--write-doc docs/benchmarks.md]

Each command is spawned (posix_spawn, stdout and stderr to /dev/null) and
timed from spawn to reap; the commands are interleaved round-robin so that
they share the machine's noise, after a few warm-up rounds (page cache,
dynamic loader). Baselines: /bin/true (the cost of starting any process from
here) and `clinfo -l` (the OpenCL tool we mean to beat; it initialises the
same PoCL platform our opencl plugin probes).

Prints a Markdown section; --write-doc replaces the "## devbuf-info" section
of the given file (or appends it), leaving the rest of the file alone.
"""
import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_PLUGINS = ("cpu", "sim", "opencl", "cuda", "hip", "level_zero")


def spawn_time(argv, env):
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1),
                                           (os.POSIX_SPAWN_DUP2, devnull, 2)])
        _, status, ru = os.wait4(pid, 0)
        dt = time.perf_counter() - t0
    finally:
        os.close(devnull)
    return dt * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, os.waitstatus_to_exitcode(status)


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d CPU(s), Linux %s, no GPU" % (cpu, os.cpu_count() or 0, platform.release())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build directory holding bin/devbuf-info (default: build)")
    ap.add_argument("--runs", type=int, default=51, help="timed runs per command")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--write-doc", metavar="FILE")
    a = ap.parse_args()

    info = os.path.join(os.path.abspath(a.build), "bin", "devbuf-info")
    if not os.access(info, os.X_OK):
        sys.exit("bench_info: %s not found; build first (cmake --build %s)" % (info, a.build))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DEVBUF_") and k not in ("NO_COLOR", "COLUMNS")}

    # Every plugin present? (The figure is meaningless with half of them.)
    import json
    doc = json.loads(subprocess.run([info, "--json"], env=env, capture_output=True,
                                    text=True).stdout)
    names = sorted(p["name"] for p in doc["plugins"] if p["name"])
    missing = [p for p in ALL_PLUGINS if p not in names]
    devices = [d["device"] for d in doc["devices"]]

    cmds = [
        ("/bin/true", ["/bin/true"], env),
        ("devbuf-info", [info], env),
        ("devbuf-info --json", [info, "--json"], env),
        ("devbuf-info -l", [info, "-l"], env),
        ("devbuf-info --in-process", [info, "--in-process"], env),
        ("devbuf-info --no-probe", [info, "--no-probe"], env),
        ("devbuf-info, no plugins", [info],
         dict(env, DEVBUF_NO_DEFAULT_PLUGINS="1")),
    ]
    # One plugin at a time, to see where the time goes.
    plugdir = None
    for e in doc["search_path"]:
        if e["source"] in ("build tree", "install") and e["exists"]:
            plugdir = e["path"]
    single = []
    for name in ALL_PLUGINS:
        f = os.path.join(plugdir or "", "devbuf_plugin_%s.so" % name)
        if plugdir and os.path.exists(f):
            label = "only %s" % name
            single.append(label)
            cmds.append((label, [info], dict(env, DEVBUF_NO_DEFAULT_PLUGINS="1",
                                             DEVBUF_PLUGINS=f)))
    clinfo = shutil.which("clinfo")
    if clinfo:
        cmds.append(("clinfo -l", [clinfo, "-l"], env))

    times = {name: [] for name, _, _ in cmds}
    cpu = {name: [] for name, _, _ in cmds}
    codes = {}
    load0 = os.getloadavg()[0]
    for r in range(a.warmup + a.runs):
        for name, argv, e in cmds:
            ms, cms, rc = spawn_time(argv, e)
            codes[name] = rc
            if r >= a.warmup:
                times[name].append(ms)
                cpu[name].append(cms)
    load1 = os.getloadavg()[0]

    def med(name):
        return statistics.median(times[name])

    def p90(name):
        t = sorted(times[name])
        return t[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))]

    base = med("devbuf-info")
    lines = []
    lines.append("## devbuf-info")
    lines.append("")
    lines.append("Whole-process wall time of `devbuf-info` (spawn to exit, output to "
                 "/dev/null), median of %d runs after %d warm-up rounds, commands "
                 "interleaved. Goal: under 50 ms with every plugin present and no "
                 "GPU." % (a.runs, a.warmup))
    lines.append("")
    lines.append("- Command: `.venv/bin/python benchmarks/info/bench_info.py --build %s "
                 "--runs %d --write-doc docs/benchmarks.md`" %
                 (os.path.relpath(a.build, ROOT), a.runs))
    lines.append("- Machine: %s; 1-minute load average %.1f before, %.1f after (other "
                 "work on the machine inflates wall times; CPU time, user + system of the "
                 "process, is steadier)" % (machine(), load0, load1))
    lines.append("- Date: %s" % a.date)
    lines.append("- Plugins found: %s%s; devices: %s" %
                 (", ".join(names), " (MISSING: %s)" % ", ".join(missing) if missing else "",
                  ", ".join(devices) or "none"))
    lines.append("")
    lines.append("| command | wall median ms | wall p90 ms | CPU median ms | wall vs devbuf-info "
                 "| exit |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for name, _, _ in cmds:
        if name in single:
            continue
        lines.append("| `%s` | %.1f | %.1f | %.1f | %.2fx | %d |" %
                     (name, med(name), p90(name), statistics.median(cpu[name]),
                      med(name) / base, codes[name]))
    lines.append("")
    if single:
        lines.append("Where the time goes: `devbuf-info` with one plugin at a time "
                     "(`DEVBUF_NO_DEFAULT_PLUGINS=1 DEVBUF_PLUGINS=<plugin>`):")
        lines.append("")
        lines.append("| plugin | wall median ms | CPU median ms |")
        lines.append("|---|---:|---:|")
        for name in single:
            lines.append("| %s | %.1f | %.1f |" % (name[5:], med(name),
                                                   statistics.median(cpu[name])))
        lines.append("")
    verdict = "meets" if base < 50 else "MISSES"
    lines.append("Result: `devbuf-info` takes %.1f ms (%s the 50 ms goal); `--json` %.1f ms. "
                 "Process start alone (`/bin/true`) is %.1f ms, so devbuf-info itself costs "
                 "about %.1f ms%s." %
                 (base, verdict, med("devbuf-info --json"), med("/bin/true"),
                  base - med("/bin/true"),
                  ("; `clinfo -l` takes %.1f ms, i.e. devbuf-info is %.2fx clinfo -l "
                   "while probing six plugins (PoCL included)" %
                   (med("clinfo -l"), base / med("clinfo -l"))) if clinfo else ""))
    if single:
        # By wall time: a probe child still exiting when devbuf-info ends is not
        # reaped, so its CPU is not in the rusage (see below).
        by = sorted(single, key=lambda n: -med(n))
        top = ", ".join("%s %.1f ms" % (n[5:], med(n)) for n in by[:2])
        lines.append("The time is the drivers' start-up, not the tool: the costliest probes "
                     "(wall) are %s, the rest take about as long as starting a process. "
                     "`--no-probe` (no driver started) takes %.1f ms. Plugins are probed in "
                     "parallel child processes (the default; `--in-process` probes one "
                     "after another on the calling thread), so with idle cores the wall "
                     "time approaches the slowest probe rather than their sum. The default "
                     "does not wait for a probe child's exit once its result is in, "
                     "so the CPU column of the forked runs leaves out the children still "
                     "exiting when devbuf-info ends (a child's CPU is counted only when it is "
                     "reaped); `--in-process` shows the whole: %.1f ms CPU for %.1f ms wall."
                     % (top, med("devbuf-info --no-probe"),
                        statistics.median(cpu["devbuf-info --in-process"]),
                        med("devbuf-info --in-process")))
    if clinfo:
        r = base / med("clinfo -l")
        lines.append("")
        lines.append("Goal: `devbuf-info` at most 1.2x `clinfo -l`, same run: %.2fx, %s."
                     % (r, "met" if r <= 1.2 else "MISSED by %.0f%%" % ((r / 1.2 - 1) * 100)))
    text = "\n".join(lines) + "\n"
    print(text)

    if a.write_doc:
        path = a.write_doc
        old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
        start = old.find("\n## devbuf-info\n")
        if old.startswith("## devbuf-info\n"):
            start = 0
        if start < 0:
            new = old.rstrip("\n") + "\n\n" + text
        else:
            s = start + (1 if old[start] == "\n" else 0)
            end = old.find("\n## ", s + 1)
            new = old[:s] + text + (old[end:] if end >= 0 else "")
        with open(path, "w") as f:
            f.write(new)
        print("bench_info: wrote the devbuf-info section of %s" % path)
    # A missed goal is reported above, never as a failure: timings are noisy.
    return 0


if __name__ == "__main__":
    sys.exit(main())

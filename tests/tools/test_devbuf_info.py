#!/usr/bin/env python3
"""Drive the devbuf-info binary as a user would, one case per ctest test.

    test_devbuf_info.py --bin PATH --broken-dir DIR --schema FILE CASE

Every case builds the environment it needs from scratch (the DEVBUF_* plugin
variables, NO_COLOR, COLUMNS), runs the tool, and checks its exit status,
its text and its --json document. Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

SKIP = 77
ANSI = re.compile(r"\x1b\[[0-9;]*m")

args = None


class Failure(Exception):
    pass


def check(cond, what, output=None):
    if not cond:
        msg = "FAIL: " + what
        if output is not None:
            msg += "\n---- output ----\n" + output + "\n----------------"
        raise Failure(msg)


def broken(name):
    return os.path.join(args.broken_dir, "devbuf_plugin_%s.so" % name)


def run(argv, env=None, timeout=30):
    """Run devbuf-info with only the variables we choose (plus PATH/HOME)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("DEVBUF_") and k not in ("NO_COLOR", "COLUMNS")}
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([args.bin] + argv, env=e, capture_output=True, text=True,
                       timeout=timeout)
    p.elapsed = time.monotonic() - t0
    p.both = p.stdout + p.stderr
    return p


def run_json(argv, env=None, timeout=30):
    p = run(["--json"] + argv, env, timeout)
    try:
        doc = json.loads(p.stdout)
    except ValueError as exc:
        raise Failure("FAIL: --json output is not JSON (%s)\n%s%s" % (exc, p.stdout, p.stderr))
    return p, doc


def validate(doc):
    import jsonschema  # pinned in requirements.txt
    with open(args.schema) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc),
                    key=lambda e: list(e.path))
    check(not errors, "schema violations:\n" + "\n".join(
        "  %s: %s" % ("/".join(map(str, e.path)), e.message) for e in errors[:10]))


def squash(s):
    return re.sub(r"\s+", "", s)


# Environments -------------------------------------------------------------------

DEFAULT = {}  # the build tree's own plugins


def corpus_env():
    """Every broken plugin plus the build tree's plugins."""
    return {"DEVBUF_PLUGIN_PATH": args.broken_dir}


EMPTY = {"DEVBUF_NO_DEFAULT_PLUGINS": "1", "DEVBUF_PLUGIN_PATH": "", "DEVBUF_PLUGINS": ""}


# Cases ----------------------------------------------------------------------------

def case_json_schema():
    docs = []
    p, doc = run_json([], DEFAULT)
    docs.append(("default", p, doc))
    p, doc = run_json(["--isolate", "--timeout", "1"], corpus_env())
    docs.append(("corpus --isolate", p, doc))
    p, doc = run_json([], EMPTY)
    docs.append(("empty", p, doc))
    for name, p, doc in docs:
        validate(doc)
        check(doc["schema"] == "devbuf-info/1", name + ": schema tag")
        check(doc["exit_code"] == p.returncode,
              "%s: exit_code %s in JSON but the process exited %d" %
              (name, doc["exit_code"], p.returncode))
    # The corpus document covers every status the schema knows about.
    statuses = {pl["status"] for pl in docs[1][2]["plugins"]}
    for s in ("ok", "no_device", "load_failed", "crashed", "timed_out"):
        check(s in statuses, "corpus run has a plugin with status %r (got %s)" % (s, statuses))
    # A document is also valid for the other schema branch? It must not be.
    bad = dict(docs[0][2])
    del bad["devices"]
    try:
        validate(bad)
    except Failure:
        pass
    else:
        raise Failure("FAIL: the schema accepted a document without 'devices'")


def case_json_consistent():
    p, doc = run_json([], DEFAULT)
    check(p.returncode in (0, 1), "exit status 0 or 1", p.both)
    names = [pl["name"] for pl in doc["plugins"]]
    check("cpu" in names, "the build tree's cpu plugin is listed: %s" % names)
    cpu = next(pl for pl in doc["plugins"] if pl["name"] == "cpu")
    check(cpu["status"] == "ok" and cpu["device_count"] >= 1, "cpu plugin ok with a device")
    check(cpu["abi"] == doc["runtime"]["abi"], "cpu plugin ABI == runtime ABI")
    devs = {d["device"]: d for d in doc["devices"]}
    check("cpu:0" in devs, "device cpu:0 listed: %s" % list(devs))
    d = devs["cpu:0"]
    check(d["host_accessible"] is True, "cpu:0 is host-accessible")
    check(isinstance(d["total_memory"], int) and d["total_memory"] > 0,
          "cpu:0 total memory is a raw positive number of bytes")
    # Every device's plugin is ok and its count matches.
    for pl in doc["plugins"]:
        n = sum(1 for x in doc["devices"] if x["plugin_index"] == pl["index"])
        if pl["status"] == "ok":
            check(n == min(pl["device_count"], 64), "%s: %d device rows, count %s" %
                  (pl["name"], n, pl["device_count"]))
        else:
            check(n == 0, "%s (%s) has no device rows" % (pl["name"], pl["status"]))
        if pl["status"] == "no_device":
            check(pl["probe"]["message"], "%s: no_device comes with a reason" % pl["name"])
    # Identifiers point at their plugin.
    for ident in doc["identifiers"]:
        pl = doc["plugins"][ident["plugin_index"]]
        check(ident["identifier"] in pl["identifiers"], "identifier %s owned by %s" %
              (ident["identifier"], pl["name"]))
    # The search path used is the build tree's.
    check(doc["default_directory_searched"] is True, "default directory searched")
    check(any(e["source"] in ("build tree", "install") and e["exists"]
              for e in doc["search_path"]), "search path has the build tree")
    check(all(v is None for v in doc["environment"].values()), "no DEVBUF_* variable set")
    # The text listing states the same facts.
    t = run([], DEFAULT)
    check(t.returncode == p.returncode, "text and JSON exit statuses agree")
    for pl in doc["plugins"]:
        check(pl["name"] in t.stdout, "plugin %s in the table" % pl["name"], t.stdout)
    for dv in doc["devices"]:
        check(dv["device"] in t.stdout, "device %s in the table" % dv["device"], t.stdout)
    for ns in doc["dtype_namespaces"]:
        check(ns["id"] in t.stdout, "dtype namespace %s in the table" % ns["id"], t.stdout)


def case_isolate_crash():
    env = {"DEVBUF_PLUGINS": broken("crash_probe")}
    p = run(["--isolate"], env)
    check(p.returncode == 1, "exit status 1 when a probe crashes (got %d)" % p.returncode, p.both)
    check("crashed: SIGSEGV" in p.stdout, "the table names SIGSEGV", p.both)
    # The listing completed: later sections and the other plugins are there.
    check("Dtype namespaces" in p.stdout, "listing completed", p.stdout)
    check("cpu:0" in p.stdout, "the cpu device is still listed", p.stdout)
    q, doc = run_json(["--isolate"], env)
    validate(doc)
    crashed = [pl for pl in doc["plugins"] if pl["status"] == "crashed"]
    check(len(crashed) == 1, "one crashed plugin in JSON")
    check(crashed[0]["probe"]["signal"] == "SIGSEGV", "JSON signal is SIGSEGV")
    check(crashed[0]["probe"]["signal_number"] == 11, "JSON signal number 11")
    check(q.returncode == 1 and doc["exit_code"] == 1, "JSON run exits 1")
    lst = run(["-l", "--isolate"], env)
    check(lst.returncode == 1 and "crashed: SIGSEGV" in lst.stdout, "-l names SIGSEGV", lst.both)


def case_inprocess_crash():
    """A plugin that crashes in this process (here its probe, with
    --in-process; without it, its entry symbol or init) leaves a message that
    says what happened and what to try, even with stdout redirected."""
    # Only this plugin: PoCL's LLVM (in the OpenCL plugin) installs a SIGSEGV
    # handler that returns, which lets a raise()d signal pass.
    env = dict(EMPTY, DEVBUF_PLUGINS=broken("crash_probe"))
    p = run(["--in-process"], env)
    check(p.returncode < 0 or p.returncode > 128, "dies of the signal (got %d)" % p.returncode, p.both)
    check("devbuf-info: a plugin crashed" in p.stderr and "Run without --in-process" in p.stderr,
          "stderr says a plugin crashed and what to try", p.both)


def case_isolate_hang():
    env = {"DEVBUF_PLUGINS": broken("hang_probe")}
    p = run(["--isolate", "--timeout", "1"], env, timeout=20)
    check(p.returncode == 1, "exit status 1 when a probe hangs (got %d)" % p.returncode, p.both)
    check("timed out after 1 s" in p.stdout, "says timed out after 1 s", p.both)
    check("cpu:0" in p.stdout and "Dtype namespaces" in p.stdout, "listing completed", p.stdout)
    check(p.elapsed < 6, "bounded by the timeout (took %.1f s)" % p.elapsed)
    # Two hanging plugins still cost one timeout, not two: probes run at once.
    env2 = {"DEVBUF_PLUGINS": broken("hang_probe") + ":" + broken("crash_probe")}
    q, doc = run_json(["--isolate", "--timeout", "1.5"], env2, timeout=20)
    validate(doc)
    st = {pl["name"]: pl for pl in doc["plugins"]}
    check(st["broken19"]["status"] == "timed_out", "hang plugin timed_out")
    check(st["broken19"]["probe"]["timeout_s"] == 1.5, "timeout recorded")
    check(st["broken18"]["status"] == "crashed", "crash plugin crashed")
    check(q.elapsed < 6, "one shared deadline (took %.1f s)" % q.elapsed)


def case_bad_arguments():
    cases = [
        (["--bogus"], "unknown option '--bogus'"),
        (["-z"], "unknown option -z"),
        (["--timeout", "abc", "--isolate"], "--timeout: 'abc'"),
        (["--timeout", "0", "--isolate"], "--timeout: '0'"),
        (["--plugin"], "needs an argument"),
        (["--plugin", ""], "--plugin needs a file path"),
        (["--list", "--json"], "cannot be combined"),
        (["--color", "sometimes"], "--color: 'sometimes'"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["format"], "missing the format STRING"),
        (["format", "i", "extra"], "one STRING only"),
        (["--mode", "struct"], "--mode applies only to the format command"),
        (["--mode", "fortran", "format", "i"], "--mode: 'fortran'"),
    ]
    for argv, msg in cases:
        p = run(argv, EMPTY)
        check(p.returncode == 2, "%s: exit status 2 (got %d)" % (argv, p.returncode), p.both)
        check(msg in p.stderr, "%s: stderr says %r" % (argv, msg), p.both)
        check("--help" in p.stderr, "%s: points at --help" % argv, p.both)
        check(p.stdout == "", "%s: nothing on stdout" % argv, p.stdout)


def case_empty_path():
    p = run([], EMPTY)
    check(p.returncode == 0, "nothing found is not a failure (got %d)" % p.returncode, p.both)
    out = p.stdout
    check("Plugins: 0 found" in out, "says no plugin found", out)
    check("Why no plugin was found" in out, "explains why", out)
    check(squash("DEVBUF_NO_DEFAULT_PLUGINS=1 turned off the default plugin directory")
          in squash(out), "names the variable", out)
    check("Devices: 0" in out, "no devices", out)
    # A missing directory and an empty one are each named.
    env = dict(EMPTY, DEVBUF_PLUGIN_PATH="/nonexistent/devbuf-dir:" + os.path.dirname(args.bin))
    q = run([], env)
    flat = squash(q.stdout)
    check(squash("/nonexistent/devbuf-dir (from DEVBUF_PLUGIN_PATH) does not exist") in flat,
          "missing directory named", q.stdout)
    check(squash(os.path.dirname(args.bin) + " (from DEVBUF_PLUGIN_PATH) holds no file named "
                 "devbuf_plugin_*.so") in flat, "empty directory named", q.stdout)
    r, doc = run_json([], EMPTY)
    validate(doc)
    check(doc["plugins"] == [] and doc["devices"] == [] and doc["identifiers"] == [],
          "JSON lists nothing")
    check(doc["default_directory_searched"] is False, "JSON: default directory off")
    check(doc["environment"]["DEVBUF_NO_DEFAULT_PLUGINS"] == "1", "JSON: variable recorded")
    lst = run(["-l"], EMPTY)
    check(lst.returncode == 0 and "no plugins found" in lst.stdout, "-l says so", lst.both)


def case_text_layout():
    # The text and the JSON run must meet the same reasons: a probe timeout
    # long enough that only the corpus's hanging plugins reach it (the real
    # OpenCL plugin's probe, PoCL under ASan on a loaded machine, took over
    # 1 s once, so the two runs told it apart).
    p = run(["--isolate", "--timeout", "5"], corpus_env())
    check(p.returncode == 1, "corpus run exits 1 (some plugins fail to load)", p.both)
    check(not ANSI.search(p.stdout), "no colour when stdout is not a terminal")
    for line in p.stdout.splitlines():
        check(len(line) <= 80, "line within 80 columns (%d): %r" % (len(line), line))
    # Reasons are never dropped: every load error and probe reason appears,
    # possibly wrapped (compare without whitespace) and without the leading
    # file path the row already shows.
    _, doc = run_json(["--isolate", "--timeout", "5"], corpus_env())
    flat = squash(p.stdout)
    for pl in doc["plugins"]:
        for reason in ((pl["load_error"] or {}).get("message"), pl["probe"]["message"]):
            if not reason:
                continue
            reason = re.sub("^" + re.escape(pl["path"]) + r"( \([^)]*\))?: ", "", reason)
            tail = squash(reason)[-60:]
            check(tail in flat, "reason of %s shown: %r" % (pl["path"], reason), p.stdout)
    # Colour: forced on, it appears; NO_COLOR does not override an explicit request.
    c = run(["--color=always"], DEFAULT)
    check(ANSI.search(c.stdout), "--color=always colours", c.stdout)
    n = run(["--color", "auto"], dict(DEFAULT, NO_COLOR="1"))
    check(not ANSI.search(n.stdout), "NO_COLOR: no colour")
    # A wider terminal (COLUMNS) is honoured, a narrow one clamped at 60.
    w = run(["--isolate", "--timeout", "1"], dict(corpus_env(), COLUMNS="120"))
    check(max(len(x) for x in w.stdout.splitlines()) <= 120, "COLUMNS=120 respected")
    check(max(len(x) for x in w.stdout.splitlines()) > 80, "COLUMNS=120 used")


def case_list():
    env = {"DEVBUF_PLUGINS": broken("wrong_major") + ":" + broken("good")}
    p = run(["-l"], env)
    check(p.returncode == 1, "-l exits 1 with a broken plugin", p.both)
    lines = p.stdout.splitlines()
    check(any(l.startswith("cpu ") and "1 device" in l for l in lines), "cpu plugin line", p.stdout)
    check(any(l.strip().startswith("cpu:0: ") for l in lines), "cpu:0 device line", p.stdout)
    check(any(l.strip().startswith("test.kind17:0: test double") for l in lines),
          "good plugin's device line", p.stdout)
    wm = [l for l in lines if l.startswith("(wrong_major)")]
    check(wm and "ABI 2.0" in wm[0] and "failed to load" in wm[0],
          "broken plugin line says why on one line", p.stdout)
    check(len(lines) < 30, "short form is short", p.stdout)


def case_plugin_option():
    p, doc = run_json(["--plugin", broken("good")], EMPTY)
    check(p.returncode == 0, "--plugin good: exit 0", p.both)
    validate(doc)
    check([pl["source"] for pl in doc["plugins"]] == ["explicit"], "one explicit plugin")
    check(doc["options"]["extra_plugins"] == [broken("good")], "recorded in options")
    check([d["device"] for d in doc["devices"]] == ["test.kind17:0"], "its device is listed")
    q = run(["--plugin", "/nonexistent/devbuf_plugin_nope.so", "--plugin", broken("good")], EMPTY)
    check(q.returncode == 1, "--plugin of a missing file: exit 1", q.both)
    check("dlopen" in q.stdout and "devbuf_plugin_nope.so" in q.stdout, "says dlopen failed",
          q.stdout)
    check("test.kind17:0" in q.stdout, "the other --plugin still loads", q.stdout)


def case_verbose():
    p = run(["-v"], DEFAULT)
    check(p.returncode in (0, 1), "verbose runs", p.both)
    check("tried devbuf_plugin_cpu.so" in p.stdout, "every path tried is shown", p.stdout)
    check("source: build tree" in p.stdout or "source: install" in p.stdout, "sources shown",
          p.stdout)
    check("DLPack device" in p.stdout, "device details shown", p.stdout)
    q = run(["-v", "--isolate", "--timeout", "1"], corpus_env())
    # Under -v the reasons keep the runtime's full text, paths included.
    check(broken("wrong_major") in squash(q.stdout), "full paths in -v", q.stdout)
    check("device probing took" in q.stdout, "timing shown", q.stdout)


def case_help_version():
    h = run(["--help"])
    check(h.returncode == 0, "--help exits 0", h.both)
    for word in ("--isolate", "--timeout", "--json", "--plugin", "format STRING", "Exit status",
                 "DEVBUF_PLUGIN_PATH"):
        check(word in h.stdout, "--help mentions %s" % word, h.stdout)
    check(max(len(l) for l in h.stdout.splitlines()) <= 80, "--help fits 80 columns")
    v = run(["--version"])
    check(v.returncode == 0 and re.search(r"devbuf-info \d+\.\d+\.\d+", v.stdout) and
          "plugin ABI" in v.stdout and "devbuf-info/1" in v.stdout, "--version", v.both)


def have_format():
    p = run(["format", "B"], EMPTY)
    return p.returncode != 4


def case_format_good():
    if not have_format():
        print("SKIP: devbuf-info was built without the format-string engine")
        return SKIP
    p = run(["format", "<iT{h:a:2d:b:}"], EMPTY)
    check(p.returncode == 0, "format of a good string exits 0", p.both)
    check("itemsize   22 bytes" in p.stdout, "itemsize 4 + 2 + 16 = 22", p.stdout)
    q, doc = run_json(["format", "<iT{h:a:2d:b:}"], EMPTY)
    validate(doc)
    check(doc["ok"] is True and doc["itemsize"] == 22, "JSON itemsize 22")
    st = doc["fields"][1]
    check(st["kind"] == "struct" and [c["name"] for c in st["children"]] == ["a", "b"],
          "struct members a, b")
    check(st["children"][1]["absolute_offset"] == 6, "b at absolute offset 6")
    # Native alignment: 'c' then 'd' pads to 8.
    r, doc = run_json(["format", "cd"], EMPTY)
    check(doc["itemsize"] == 16 and doc["fields"][1]["offset"] == 8, "@ alignment pads cd to 16")
    # A custom dtype whose first alternative nobody knows: the second is chosen.
    s, doc = run_json(["format", "[nosuchns$x;struct$<hh]"], EMPTY)
    check(s.returncode == 0, "second alternative understood", s.both)
    validate(doc)
    alts = doc["fields"][0]["custom"]["alternatives"]
    check([a["state"] for a in alts] == ["unknown_id", "chosen"], "alt states: %s" % alts)
    check(doc["itemsize"] == 4, "struct$<hh is 4 bytes")
    t = run(["format", "[nosuchns$x;struct$<hh]"], EMPTY)
    check("chosen" in t.stdout and "no namespace 'nosuchns'" in t.stdout,
          "text names the chosen and the unknown alternative", t.stdout)
    # Behind a pointer: no offset in the item.
    v, doc = run_json(["format", "c&T{i:a:}"], EMPTY)
    validate(doc)
    ptr = doc["fields"][1]
    check(ptr["kind"] == "pointer" and ptr["absolute_offset"] == 8, "pointer at 8")
    check(ptr["pointee"]["absolute_offset"] is None, "pointee has no offset in the item")
    u = run(["--mode", "struct", "format", "<iT{h:a:}"], EMPTY)
    check(u.returncode == 3, "struct mode refuses T{} (exit 3)", u.both)


def case_format_bad():
    if not have_format():
        print("SKIP: devbuf-info was built without the format-string engine")
        return SKIP
    p = run(["format", "T{i:a:y}"], EMPTY)
    check(p.returncode == 3, "bad format exits 3 (got %d)" % p.returncode, p.both)
    lines = p.stderr.splitlines()
    # The string, then a caret under the 'y' (byte 6).
    idx = next((i for i, l in enumerate(lines) if l.strip() == "T{i:a:y}"), None)
    check(idx is not None and idx + 1 < len(lines), "the string is echoed", p.stderr)
    col = lines[idx].index("T{i:a:y}") + 6
    check(lines[idx + 1].rstrip().endswith("^") and len(lines[idx + 1].rstrip()) == col + 1,
          "caret under byte 6", p.stderr)
    check("byte 6" in p.stderr, "message names the byte", p.stderr)
    q, doc = run_json(["format", "T{i:a:y}"], EMPTY)
    check(q.returncode == 3, "JSON run exits 3")
    validate(doc)
    check(doc["ok"] is False and doc["error"]["offset"] == 6, "JSON error offset 6")
    r = run(["format", "[nosuchns$x]"], EMPTY)
    check(r.returncode == 3 and "nosuchns" in r.stderr, "unknown dtype id: exit 3, named",
          r.both)


def case_chatty_plugin():
    """A plugin that prints to stdout must not corrupt the output."""
    for argv in ([], ["--isolate"], ["--in-process"]):
        p, doc = run_json(argv + ["--plugin", args.chatty], EMPTY)
        check(p.returncode == 0, "%s: exit 0" % argv, p.both)
        validate(doc)
        check([d["device"] for d in doc["devices"]] == ["test.chatty:0"], "%s: device" % argv)
        check("hello from init" not in p.stdout and "probing (" not in p.stdout, "%s: plugin output kept off stdout" % argv, p.stdout)
        check("chatty: hello from init" in p.stderr, "%s: it went to stderr" % argv, p.stderr)
        check("chatty: probing (write to fd 1)" in p.stderr, "%s: fd 1 writes too" % argv,
              p.stderr)
    t = run(["-l", "--plugin", args.chatty], EMPTY)
    check(t.stdout.startswith("chatty 0.0.1: 1 device"), "-l output clean", t.stdout)


def case_no_probe():
    """--no-probe starts no driver: even a plugin that crashes when probed is safe."""
    env = {"DEVBUF_PLUGINS": broken("crash_probe") + ":" + broken("hang_probe")}
    p, doc = run_json(["--no-probe"], env, timeout=20)
    check(p.returncode == 0, "--no-probe: exit 0 (got %d)" % p.returncode, p.both)
    validate(doc)
    check(doc["options"]["probe"] is False, "options.probe false")
    check(doc["devices"] == [], "no devices listed")
    for pl in doc["plugins"]:
        check(pl["status"] == "not_probed" and pl["probe"]["status"] == "not_probed",
              "%s not probed" % pl["name"])
        check(pl["device_count"] is None, "%s: device_count null" % pl["name"])
    check({"broken18", "broken19", "cpu"} <= {pl["name"] for pl in doc["plugins"]},
          "plugins still listed")
    t = run(["--no-probe"], env, timeout=20)
    check(t.returncode == 0 and "no driver was started" in t.stdout, "text says so", t.both)
    check("test.kind18" in t.stdout, "identifiers still listed", t.stdout)
    b = run(["--no-probe", "--isolate"], env)
    check(b.returncode == 2 and "cannot be combined" in b.stderr, "--no-probe --isolate: usage",
          b.both)


def case_props_refused():
    """Every device refusing device_props is a failed probe, not "ok" with
    exit 0: in the default isolated probe and in-process alike."""
    env = dict(EMPTY, DEVBUF_PLUGINS=broken("props_refused"))
    for mode in ([], ["--in-process"]):
        p, doc = run_json(mode, env)
        validate(doc)
        check(p.returncode == 1 and doc["exit_code"] == 1,
              "%s: exit 1 when every device_props is refused (got %d)" % (mode, p.returncode),
              p.both)
        pl = [x for x in doc["plugins"] if x["name"] == "broken27"]
        check(len(pl) == 1 and pl[0]["status"] == "probe_failed",
              "%s: status probe_failed (got %s)" % (mode, pl and pl[0]["status"]), p.stdout)
        msg = pl[0]["probe"]["message"]
        check("device_props failed for every device (1 of 1), e.g. device 0: " in msg
              and "props: simulated refusal of device 0" in msg, "reason names the refusal", msg)
        t = run(mode, env)
        check(t.returncode == 1 and "simulated refusal" in t.stdout, "text listing too", t.both)


def case_thread_state():
    """A plugin that ties state to its probing thread (a malloc'd alternate
    signal stack, as LLVM installs inside PoCL, and a block held only by
    thread-local storage, as libamdhip64 keeps) is probed cleanly, on every
    CPU. Under AddressSanitizer a probe thread that exited would abort
    ("failed to deallocate ... unable to unmap") or leak; the plain build
    checks the listing, the ASan build (same test) the exit status."""
    for argv in ([], ["--json"], ["-l"], ["-v"], ["--in-process"], ["--in-process", "-l"]):
        p = run(argv + ["--plugin", args.thread_state], EMPTY)
        check(p.returncode == 0, "%s: exit 0 (got %d)" % (argv, p.returncode), p.both)
        check("Sanitizer" not in p.stderr, "%s: no sanitizer report" % argv, p.stderr)
        check("test.thread_state:0" in p.stdout or "thread_state 0.0.1: 1 device" in p.stdout,
              "%s: its device is listed" % argv, p.both)


def case_inprocess_hang():
    """Isolation is the default: a hanging driver costs the deadline, not the
    listing, without --isolate. --in-process probes here, with no limit."""
    env = {"DEVBUF_PLUGINS": broken("hang_probe")}
    p = run(["--timeout", "1"], env, timeout=30)
    check(p.returncode == 1, "exit status 1 when a probe hangs (got %d)" % p.returncode, p.both)
    check("timed out after 1 s" in p.stdout, "says timed out after 1 s", p.both)
    check("cpu:0" in p.stdout and "Dtype namespaces" in p.stdout, "listing completed", p.stdout)
    check(p.elapsed < 20, "bounded by the timeout (took %.1f s)" % p.elapsed)
    q, doc = run_json([], {"DEVBUF_PLUGINS": broken("crash_probe")}, timeout=30)
    validate(doc)
    check(doc["options"]["isolate"] is True, "options.isolate true by default")
    st = {pl["name"]: pl for pl in doc["plugins"]}
    check(st["broken18"]["status"] == "crashed", "a crashing probe is reported by default")
    check(st["cpu"]["status"] == "ok", "the others are still probed")
    r, doc = run_json(["--in-process"], EMPTY)
    check(r.returncode == 0 and doc["options"]["isolate"] is False, "--in-process: JSON says so",
          r.both)
    check([d["device"] for d in doc["devices"]] == [], "--in-process: empty path, no devices")
    t = run(["--in-process"], DEFAULT)
    check(t.returncode == 0 and "--in-process" in t.stdout and "cpu:0" in t.stdout,
          "--in-process text", t.both)
    for argv, msg in ((["--timeout", "2", "--no-probe"], "--no-probe"),
                      (["--timeout", "2", "--in-process"], "cannot be interrupted"),
                      (["--in-process", "--isolate"], "cannot be combined")):
        b = run(argv, env)
        check(b.returncode == 2 and msg in b.stderr, "%s: usage error" % argv, b.both)


def case_ext_functions():
    """-v and --json show a malformed extension function as invalid with the
    reason, as Python does, and a struct_size that cuts the extension-function
    fields off is noted rather than making them vanish."""
    d = os.path.dirname(args.chatty)
    bad, cut = (os.path.join(d, "devbuf_plugin_%s.so" % n) for n in ("ext_bad", "ext_cut"))
    env = dict(EMPTY, DEVBUF_PLUGINS=bad + ":" + cut)
    p, doc = run_json([], env)
    validate(doc)
    by = {pl["name"]: pl for pl in doc["plugins"]}
    ex = {e["name"]: e for e in by["ext_bad"]["ext_functions"]}
    check(ex["answer"]["valid"] is True and ex["answer"]["reason"] is None, "valid entry", p.stdout)
    check(ex["bad_letter"]["valid"] is False and "'x' is not an argument type" in ex["bad_letter"]["reason"],
          "malformed signature marked invalid with the byte", p.stdout)
    check(ex["star_e"]["valid"] is False and "'e' cannot be an out-parameter" in ex["star_e"]["reason"],
          "*e marked invalid", p.stdout)
    check(by["ext_bad"]["table_cut_at"] is None, "full table: nothing cut", p.stdout)
    check(by["ext_cut"]["ext_functions"] == [] and by["ext_cut"]["table_cut_at"] == "ext_functions",
          "cut table named", p.stdout)
    v = run(["-v"], env)
    t = squash(v.stdout)
    check(squash("invalid ext function: #1: 'bad_letter': signature 'i(x)'") in t, "-v: invalid entry", v.stdout)
    check(squash("table: struct_size") in t and squash("ends before 'ext_functions'") in t,
          "-v: cut table noted", v.stdout)


def case_props_layout():
    """A device_props the plugin did not lay out as in C (a Rust struct
    without #[repr(C)]) is refused by the runtime's checks, so the listing
    shows an error and exits 1, not "ok" with a garbage name."""
    env = dict(EMPTY, DEVBUF_PLUGINS=broken("props_not_repr_c"))
    p, doc = run_json([], env)
    validate(doc)
    check(p.returncode == 1, "exit status 1 (got %d)" % p.returncode, p.stdout)
    pl = [x for x in doc["plugins"] if x["name"] == "broken32"][0]
    check(pl["status"] == "probe_failed", "status probe_failed, not ok", p.stdout)
    t = run([], env)
    check("#[repr(C)]" in squash(t.stdout) and "alloc_alignment 0" in t.stdout,
          "the reason names the field and the likely cause", t.stdout)


def case_not_a_table():
    """A table the message calls "not a devbuf plugin table" has no ABI:
    --json says null and the ABI column "-", not half a pointer."""
    env = dict(EMPTY, DEVBUF_PLUGINS=broken("not_repr_c"))
    p, doc = run_json([], env)
    validate(doc)
    pl = [x for x in doc["plugins"] if x["path"].endswith("devbuf_plugin_not_repr_c.so")][0]
    check("not a devbuf plugin table" in pl["load_error"]["message"], "the load error", p.stdout)
    check(pl["abi"] is None, "abi null, not %r" % (pl["abi"],), p.stdout)
    t = run([], env)
    row = [ln.split() for ln in t.stdout.splitlines() if ln.strip().startswith("(not_repr_c)")]
    check(row and row[0][2] == "-", "ABI column '-' (NAME VERSION ABI ...)", t.stdout)


def case_fork_safety():
    """A plugin whose runtime starts threads when it is loaded (Go's, a CUDA
    driver after cuInit) hangs in a process forked after loading it. The
    probes load each plugin afresh in their own process, so it probes "ok",
    every time; a hang in loading is reported as one, with the plugin's name."""
    h = subprocess.run([args.fork_hazard, args.load_thread], capture_output=True, text=True,
                       timeout=30)
    check(h.returncode == 0, "the test plugin reproduces the fork hazard", h.stdout + h.stderr)
    env = dict(EMPTY, DEVBUF_PLUGINS=args.load_thread)
    for i in range(10):
        p, doc = run_json(["--timeout", "10"], env, timeout=40)
        st = {pl["name"]: pl for pl in doc["plugins"]}
        check(p.returncode == 0 and st["load_thread"]["status"] == "ok",
              "run %d of 10: load_thread probes ok (exit %d)" % (i + 1, p.returncode),
              p.stdout + p.stderr)
    validate(doc)
    check([d["device"] for d in doc["devices"]] == ["test.load_thread:0"],
          "its device is listed", p.stdout)
    # The same through --plugin, and in the text listing.
    t = run(["--plugin", args.load_thread], EMPTY)
    check(t.returncode == 0 and "test.load_thread:0" in t.stdout, "--plugin: listed", t.both)
    # A hang while loading names the plugin and the step.
    c = run(["--timeout", "1"], dict(EMPTY, DEVBUF_PLUGINS=broken("hang_probe")), timeout=30)
    check(squash("device_count of broken19 did not return") in squash(c.stdout),
          "a hang names the call and the plugin", c.stdout)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--broken-dir", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--chatty", required=True, help="tests/tools/chatty_plugin.c, built")
    ap.add_argument("--thread-state", required=True,
                    help="tests/tools/chatty_plugin.c built with DEVBUF_TOOLS_THREAD_STATE")
    ap.add_argument("--load-thread", required=True,
                    help="tests/tools/load_thread_plugin.c, built")
    ap.add_argument("--fork-hazard", required=True, help="tests/tools/fork_hazard.c, built")
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    try:
        rc = CASES[args.case]()
    except Failure as exc:
        print(exc)
        return 1
    if rc == SKIP:
        return SKIP
    print("PASS: " + args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())

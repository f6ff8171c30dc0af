"""Smoke test of an installed devbuf package (used by scripts/test-pip-install.sh).

    python pip_smoke.py [IDENTIFIER...]

Imports devbuf, lists the devices and round-trips bytes through each named
identifier (default: cpu and devbuf.sim). Uses only the standard library, so
it runs in a venv that holds nothing but devbuf. Exits non-zero, naming the
step, on any failure.
"""
import os
import sys

import devbuf


def fail(msg):
    sys.stderr.write("pip_smoke: FAIL: %s\n" % msg)
    sys.exit(1)


def main(argv):
    identifiers = argv or ["cpu", "devbuf.sim"]
    # The installed files (extensions, lib/, include/) sit beside the
    # extension; in an editable install the .py files stay in the checkout.
    pkg = os.path.dirname(os.path.abspath(devbuf._devbuf.__file__))
    py = os.path.dirname(os.path.abspath(devbuf.__file__))
    print("devbuf %s from %s%s" % (devbuf.__version__, pkg,
                                   "" if py == pkg else " (Python files from %s)" % py))

    # Every extension module it installed imports: `import devbuf` alone
    # loads only _devbuf, and a C API the interpreter lacks shows up only as
    # `undefined symbol` when the module is loaded.
    import importlib
    import importlib.machinery
    exts = sorted(f for f in os.listdir(pkg)
                  if any(f.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES))
    if not exts:
        fail("no extension module in %s" % pkg)
    for f in exts:
        name = "devbuf." + f.split(".", 1)[0]
        try:
            importlib.import_module(name)
        except ImportError as e:
            fail("the installed %s (%s) does not import: %s" % (name, f, e))
    print("extension modules import: %s" % ", ".join(exts))

    # The runtime found its plugins next to itself: inside the package for a
    # wheel, <prefix>/<libdir>/devbuf/plugins for a CMake install (the caller
    # says so through DEVBUF_SMOKE_PLUGIN_DIR).
    plugin_dir = os.environ.get("DEVBUF_SMOKE_PLUGIN_DIR") or os.path.join(
        pkg, "lib", "devbuf", "plugins")
    loaded = [p for p in devbuf.plugins() if p.loaded]
    names = sorted(p.name for p in loaded)
    print("plugins loaded: %s" % ", ".join(names))
    for must in ("cpu", "sim"):
        rec = [p for p in loaded if p.name == must]
        if not rec:
            fail("plugin %r is not loaded; search path: %r" % (must, devbuf.search_path()))
        if os.path.realpath(os.path.dirname(rec[0].path)) != os.path.realpath(plugin_dir):
            fail("plugin %r came from %s, not from the package's %s"
                 % (must, rec[0].path, plugin_dir))

    devs = devbuf.devices()
    print("devices: %s" % ", ".join("%s:%d" % (d.identifier, d.ordinal) for d in devs))
    seen = {d.identifier for d in devs}

    payload = bytes((i * 131 + 7) & 0xFF for i in range(1 << 16))
    for ident in identifiers:
        if ident not in seen:
            fail("no device %r among %s" % (ident, sorted(seen)))
        buf = devbuf.from_host(payload, device=ident)
        if buf.nbytes != len(payload):
            fail("%s: from_host gave %d bytes, expected %d" % (ident, buf.nbytes, len(payload)))
        back = bytes(memoryview(buf.to_host()))
        if back != payload:
            fail("%s: bytes differ after the round trip" % ident)
        buf.free()
        print("round trip ok: %d bytes through %s" % (len(payload), ident))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

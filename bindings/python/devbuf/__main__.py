"""``python -m devbuf`` and the ``devbuf-config`` command: where an installed
devbuf keeps what other builds need, as ``numpy-config`` and ``pybind11-config``
answer it.

    devbuf-config --cflags          -I<include dir>
    devbuf-config --includedir      devbuf_buffer.h, devbuf_capi.h, devbuf/*.h
    devbuf-config --cmakedir        for -Ddevbuf_DIR=... (find_package(devbuf))
    devbuf-config --pkgconfigdir    for PKG_CONFIG_PATH (devbuf.pc, devbuf-plugin.pc)
    devbuf-config --plugindir       the folder the runtime searches by itself
    devbuf-config --user-plugindir  the per-user folder (docs/install.md)
    devbuf-config --version
    python -m devbuf info [ARGS]    the devbuf-info tool (same as the devbuf-info command)

Paths come from where the runtime really is (the plugin folder it searched),
so the answers hold for a wheel, an editable install and a CMake install.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional


def _libdir() -> Optional[str]:
    """The folder of the libdevbuf this package loads: the parent of its
    own plugin folder (<libdir>/devbuf/plugins), as the runtime found it."""
    from . import _devbuf

    for e in _devbuf.search_path():
        if not e["is_file"] and e["source"] in ("install", "build tree"):
            path: str = e["path"]
            return os.path.dirname(os.path.dirname(os.path.realpath(path)))
    return None


def user_plugin_dir() -> str:
    """``$XDG_DATA_HOME/devbuf/plugins`` (default ``~/.local/share/devbuf/plugins``):
    the place for plugins a user adds by hand, outside the package, so that
    ``pip uninstall devbuf`` leaves nothing behind inside it. Not searched
    unless named in ``DEVBUF_PLUGIN_PATH``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "devbuf", "plugins")


def _answer(what: str) -> str:
    from . import __version__, get_include

    if what == "version":
        return str(__version__)
    if what == "includedir":
        return get_include()
    if what == "cflags":
        return "-I" + get_include()
    if what == "user_plugindir":
        return user_plugin_dir()
    libdir = _libdir()
    if libdir is None:
        raise LookupError("the runtime searched no plugin folder of its own "
                          "(DEVBUF_NO_DEFAULT_PLUGINS is set?), so devbuf's libdir is unknown")
    path = {"plugindir": os.path.join(libdir, "devbuf", "plugins"),
            "cmakedir": os.path.join(libdir, "cmake", "devbuf"),
            "pkgconfigdir": os.path.join(libdir, "pkgconfig")}[what]
    if not os.path.isdir(path):
        raise LookupError("%s is not there: this devbuf (%s) is a build tree, not an install; "
                          "`pip install` it or `cmake --install` it first (docs/install.md)"
                          % (path, libdir))
    return path


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in[:1] == ["info"]:        # python -m devbuf info ...: devbuf-info itself
        from ._info import main as info_main

        return info_main(args_in[1:])
    p = argparse.ArgumentParser(prog="devbuf-config",
                                description="Where an installed devbuf keeps its headers, "
                                            "CMake and pkg-config packages and plugins.",
                                epilog="`python -m devbuf info [ARGS]` runs devbuf-info.")
    for opt, help_ in [("cflags", "compiler flags for devbuf's C headers"),
                       ("includedir", "the folder of devbuf_buffer.h, devbuf_capi.h, devbuf/*.h"),
                       ("cmakedir", "the CMake package folder (-Ddevbuf_DIR=...)"),
                       ("pkgconfigdir", "the pkg-config folder (PKG_CONFIG_PATH)"),
                       ("plugindir", "the plugin folder the runtime searches by itself"),
                       ("user-plugindir", "the per-user plugin folder, for DEVBUF_PLUGIN_PATH"),
                       ("version", "the devbuf version")]:
        p.add_argument("--" + opt, dest="what", action="append_const",
                       const=opt.replace("-", "_"), help=help_)
    args = p.parse_args(args_in)
    if not args.what:
        p.print_help(sys.stderr)
        return 2
    try:
        for what in args.what:
            print(_answer(what))
    except LookupError as e:
        sys.stderr.write("devbuf-config: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``devbuf-info`` command and ``python -m devbuf info``.

The tool itself is native (tools/devbuf-info), installed next to the
libdevbuf this package loads: ``<libdir>/../bin/devbuf-info``. That holds for
a wheel (``devbuf/lib`` and ``devbuf/bin`` inside the package), a CMake
install (``<prefix>/lib``, ``<prefix>/bin``) and a build tree (``build/lib``,
``build/bin``), so one launcher serves all three: the wheel's console script,
the ``.venv/bin/devbuf-info`` that scripts/setup.sh writes for the build tree,
and ``python -m devbuf info``. It replaces the Python process with the tool
(arguments, exit status and signals are the tool's own), adding only the
plugins that Python packages declare in the ``devbuf.plugins`` entry-point
group, as ``--plugin-from "entry point <dist> <ver>=PATH"``, so that the tool
loads and lists them with their origin.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional

__all__ = ["executable", "main"]

_TOOL = "devbuf-info"


def executable() -> Optional[str]:
    """Path of the native ``devbuf-info`` that belongs to this devbuf, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "bin", _TOOL)]      # the wheel's layout
    try:
        from .__main__ import _libdir

        libdir = _libdir()
    except Exception:  # the runtime searched no folder of its own: only the package's bin
        libdir = None
    if libdir is not None:
        prefix = os.path.dirname(libdir)
        candidates.append(os.path.join(prefix, "bin", _TOOL))
        # lib/<multiarch> (Debian's CMAKE_INSTALL_LIBDIR)
        candidates.append(os.path.join(os.path.dirname(prefix), "bin", _TOOL))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    exe = executable()
    if exe is None:
        sys.stderr.write("devbuf-info: the native tool is not installed with this devbuf "
                         "(looked next to its libdevbuf, in <libdir>/../bin, and in the "
                         "package's bin/); build it (tools/devbuf-info) or reinstall devbuf\n")
        return 4
    extra: List[str] = []
    if "format" not in args and "-h" not in args and "--help" not in args:
        try:
            from ._plugins import _launcher_args

            extra = _launcher_args()
        except Exception as e:  # the tool itself must still run
            sys.stderr.write("devbuf-info: plugin entry points not listed: %s\n" % e)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [_TOOL] + extra + args)
    return 4  # not reached: execv raises on failure


if __name__ == "__main__":
    sys.exit(main())

"""Console entry point `devbuf-info` of the devbuf wheel.

The wheel keeps the real, native devbuf-info inside the package
(devbuf/bin/devbuf-info, RPATH $ORIGIN/../lib) so that it always finds the
libdevbuf and the plugins installed with it, whatever the install scheme.
This launcher only replaces the Python process with it: arguments, exit
status and signals are the tool's own. It adds one thing: the plugins that
Python packages declare in the ``devbuf.plugins`` entry-point group, found by
``import devbuf``, passed as ``--plugin-from "entry point <dist> <ver>=PATH"``
so that the tool loads and lists them with their origin. Installed by cmake/python-install.cmake.
"""
import os
import sys
from typing import List


def executable() -> str:
    """Path of the native devbuf-info shipped in this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "devbuf-info")


def main() -> int:
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.stderr.write("devbuf-info: the native tool is missing or not executable: %s\n" % exe)
        return 4
    sys.stdout.flush()
    sys.stderr.flush()
    args = sys.argv[1:]
    extra: List[str] = []
    if "format" not in args and "-h" not in args and "--help" not in args:
        try:
            from devbuf._plugins import _launcher_args
            extra = _launcher_args()
        except Exception as e:  # the tool itself must still run
            sys.stderr.write("devbuf-info: plugin entry points not listed: %s\n" % e)
    os.execv(exe, ["devbuf-info"] + extra + args)
    return 4  # not reached: execv raises on failure


if __name__ == "__main__":
    sys.exit(main())

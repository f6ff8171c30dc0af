"""Where C and Cython consumers find devbuf's headers (docs/consumers.md)."""
from __future__ import annotations

import os


def get_include() -> str:
    """The folder holding devbuf_buffer.h, devbuf_dlpack_import.h, devbuf_capi.h and devbuf/*.h.

    For Cython: ``cimport devbuf`` needs this on the C include path (and the
    folder holding the devbuf package on Cython's, which sys.path gives)."""
    # Beside the extension, not this file: in an editable install the .py
    # files stay in the checkout while the extension and headers are in
    # site-packages.
    from . import _devbuf

    return os.path.join(os.path.dirname(os.path.abspath(_devbuf.__file__)), "include")

"""The hand-made DLPack producer of the interop tests now lives in the
conformance kit (devbuf.check._dlpack), which uses it as an adversarial
producer; the tests import it from there under the old name."""
from devbuf.check._dlpack import *  # noqa: F401,F403
from devbuf.check._dlpack import _api, _live  # noqa: F401


def forwarding_producer_type():
    """A new DLPack-only producer type that forwards to .a (devbuf's device
    query cache is per type, so each test makes its own), and the list its
    __dlpack_device__ appends to. A list, not a class attribute: setting one
    would change the type's version tag, which the cache is keyed on."""
    calls = []

    class Fwd:
        __slots__ = ("a",)

        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            calls.append(1)
            return self.a.__dlpack_device__()
    return Fwd, calls

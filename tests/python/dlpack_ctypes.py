"""The hand-made DLPack producer of the interop tests now lives in the
conformance kit (devbuf.check._dlpack), which uses it as an adversarial
producer; the tests import it from there under the old name."""
from devbuf.check._dlpack import *  # noqa: F401,F403
from devbuf.check._dlpack import _api, _live  # noqa: F401

"""The example.hostmem devbuf plugin, as a Python package.

devbuf finds it through the "devbuf.plugins" entry point in pyproject.toml,
which names plugin_path below; nothing here imports devbuf.
"""
import os


def plugin_path() -> str:
    """Absolute path of the plugin's shared object, installed beside this file."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "devbuf_plugin_hostmem.so")

"""The installed distribution's version (``paperbench.__version__``), read on first use."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paperbench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

"""The reproduction stage: run a submission's ``reproduce.sh`` in a fresh reproducer sandbox.

``await reproduce_submission(submission, out_dir, config)`` copies the submission into a new
sandbox, runs ``bash reproduce.sh`` with a timeout and writes ``reproduce.log``,
``executed.tar.gz`` and ``metadata.json`` (a :class:`ReproductionMetadata`) into ``out_dir``;
see :mod:`paperbench.reproduce._stage` for the details. ``paperbench reproduce`` and
``paperbench.run_reproduction()`` are the same on one :class:`ReproduceSettings`.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.reproduce._files import default_out_dir
    from paperbench.reproduce._models import (
        ARCHIVE_TOP,
        CREATION_TIME_NAME,
        CRLF_HINT,
        DEFAULT_DISK_MB,
        LOG_NAME,
        REPRODUCER_IMAGE,
        SCHEMA_VERSION,
        SUBMISSION_PATH,
        Attempt,
        ChangedFiles,
        ReproduceConfig,
        ReproductionMetadata,
        Status,
    )
    from paperbench.reproduce._settings import ReproduceSettings
    from paperbench.reproduce._stage import reproduce_submission, resolve_image

__all__ = [
    "ARCHIVE_TOP",
    "CREATION_TIME_NAME",
    "CRLF_HINT",
    "DEFAULT_DISK_MB",
    "LOG_NAME",
    "REPRODUCER_IMAGE",
    "SCHEMA_VERSION",
    "SUBMISSION_PATH",
    "Attempt",
    "ChangedFiles",
    "ReproduceConfig",
    "ReproduceSettings",
    "ReproductionMetadata",
    "Status",
    "default_out_dir",
    "reproduce_submission",
    "resolve_image",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)

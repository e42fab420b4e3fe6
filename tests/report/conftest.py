"""Fixtures of the report tests: a headless Chromium driven by playwright.

Chromium is Debian's package (scripts/ensure-chromium.sh, which ``./dev test`` runs); it is
never downloaded by playwright. Where it is required (CI, or ``./dev test``, which sets
PAPERBENCH_REQUIRE_CHROMIUM=1) a missing browser fails the tests; elsewhere they skip with
the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def _required() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("PAPERBENCH_REQUIRE_CHROMIUM") == "1"


def _missing(reason: str) -> None:
    if _required():
        pytest.fail(f"{reason}; run scripts/ensure-chromium.sh", pytrace=False)
    pytest.skip(f"{reason} (run scripts/ensure-chromium.sh; required under CI)")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    found = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if found is None:
        _missing("no chromium on PATH")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    # per module, not per session: the sync API keeps an event loop running in this thread
    # while it is open, and other tests call asyncio.run()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_path, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()

"""Fixtures for the fake servers' own tests."""

from tests.fixtures import fake_llm

__all__ = ["fake_llm"]

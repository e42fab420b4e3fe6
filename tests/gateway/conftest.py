"""Fixtures for the gateway's tests: a clean environment and a fake model server."""

from tests.fixtures import clean_env, fake_llm

__all__ = ["clean_env", "fake_llm"]

"""Fixtures for the fake servers' own tests."""

from tests.fixtures import close_sdk_clients, fake_llm

__all__ = ["close_sdk_clients", "fake_llm"]

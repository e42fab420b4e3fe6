"""Fixtures for the model-provider tests: a fake model server and a clean environment."""

from tests.fixtures import clean_env, close_sdk_clients, fake_llm

__all__ = ["clean_env", "close_sdk_clients", "fake_llm"]

"""Fixtures for a module that shares one local stack across its cases (conftest's ``stack`` is one per case)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import devstack
from packyard import config


@pytest.fixture(scope="module")
def stack() -> Iterator[devstack.Stack]:
    with devstack.local_aws() as created:
        yield created


@pytest.fixture(autouse=True)
def fresh_config() -> Iterator[None]:
    """A case may change a limit through the environment: settings read after it are read anew."""
    yield
    config.reset()

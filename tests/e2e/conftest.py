"""The local stack in a subprocess (``packyard local`` on free ports), driven only over HTTP and through the CLI.

One stack per test session (per xdist worker; the e2e modules share the xdist group "e2e", so ``make test``,
which runs ``--dist loadgroup``, starts one). Every test works as its own tenant: tests never see each other's
packages.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.e2e.helpers import Cli, Stack, running_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("packyard-local")) as running:
        yield running


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cli(stack: Stack, tenant: str) -> Cli:
    return Cli(stack, tenant)


@pytest.fixture
def http(cli: Cli) -> requests.Session:
    """A plain HTTP client with a bearer token for the test's tenant."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {cli.token()}"
    return session

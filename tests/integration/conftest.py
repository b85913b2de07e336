from __future__ import annotations

import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller


@pytest.fixture
def stack():
    with devstack.local_aws() as created:
        yield created


@pytest.fixture
def api(stack) -> LocalApi:
    return LocalApi(stack)


@pytest.fixture
def acme(api) -> Caller:
    return Caller(api, "t-acme")


@pytest.fixture
def globex(api) -> Caller:
    return Caller(api, "t-globex", subject="intruder")

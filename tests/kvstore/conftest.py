"""A real mooncake_master on 127.0.0.1 (free ports) for the store tests; stopped after them."""

from __future__ import annotations

import os

import pytest

from tandem.kvstore.master import start_master


@pytest.fixture(scope="module")
def master():
    os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    os.environ.setdefault("GLOG_minloglevel", "2")   # Mooncake's info and warning lines
    m = start_master()
    yield m
    m.stop()

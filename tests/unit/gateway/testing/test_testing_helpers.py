"""gateway/testing/__init__.py: the two public polling helpers take the same parameters and fail the same way."""

from __future__ import annotations

import itertools

import pytest

from gateway.testing import async_wait_until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", timeout_s=5, interval_s=0.001) == "ready"


def test_wait_until_fails_after_timeout_s() -> None:
    with pytest.raises(AssertionError, match=r"condition not met within 0\.05s"):
        wait_until(lambda: None, timeout_s=0.05, interval_s=0.01)


async def test_async_wait_until_takes_the_same_parameters() -> None:
    counter = itertools.count()
    assert await async_wait_until(lambda: next(counter) >= 3 and "ready", timeout_s=5, interval_s=0.001) == "ready"
    with pytest.raises(AssertionError, match=r"condition not met within 0\.05s"):
        await async_wait_until(lambda: None, timeout_s=0.05, interval_s=0.01)

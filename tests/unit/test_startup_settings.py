"""handlers/startup.py's Kopf settings for a node agent: API requests are retried as long as the apiserver is away."""

from __future__ import annotations

import collections.abc
import itertools

from handlers.startup import EndlessBackoffs


def test_request_retries_never_give_up_and_kopf_sees_no_limit() -> None:
    backoffs = EndlessBackoffs()
    assert isinstance(backoffs, collections.abc.Iterable)
    assert not isinstance(backoffs, collections.abc.Sized)  # Kopf counts the retries of a sized one, then fails
    assert list(itertools.islice(backoffs, 10)) == [1, 1, 2, 3, 5, 8, 13, 13, 13, 13]
    assert list(itertools.islice(backoffs, 3)) == [1, 1, 2]  # each request starts over

"""The exceptions users see."""

from __future__ import annotations

import pickle

from distributed.exceptions import keep_cause_chain


class OuterError(Exception):
    """A user exception class (defined after import time)."""


class InnerError(Exception):
    pass


def make_chained() -> OuterError:
    try:
        try:
            raise InnerError("root")
        except InnerError as e:
            raise KeyError("middle") from e
    except KeyError as e:
        try:
            raise OuterError("outer") from e
        except OuterError as outer:
            return outer


def test_keep_cause_chain_survives_pickling() -> None:
    exc = keep_cause_chain(make_chained())
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, OuterError)
    assert isinstance(back.__cause__, KeyError)
    assert isinstance(back.__cause__.__cause__, InnerError)
    assert str(back.__cause__.__cause__) == "root"

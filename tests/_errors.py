"""What an error test checks: the pieces of the message a user needs (the argument or file, the offending value,
the fix), each reported when missing."""

from __future__ import annotations

import pytest


def assert_message(error: pytest.ExceptionInfo[BaseException], *pieces: str) -> None:
    """Assert that each of ``pieces`` is in the message of the caught ``error``, naming those that are not."""
    message = str(error.value)
    missing = [piece for piece in pieces if piece not in message]
    assert not missing, f"{missing} not in: {message}"

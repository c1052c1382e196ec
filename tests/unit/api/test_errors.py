"""The API's errors (``api/_errors.py``): an internal error says nothing of the code that raised it."""

from __future__ import annotations


def test_internal_errors_do_not_leak_details() -> None:
    from duet.api._errors import as_api_error

    error = as_api_error(RuntimeError('Traceback (most recent call last):\n  File "/site-packages/x.py"'))
    assert error.status == 500 and "Traceback" not in error.detail.message and "site-packages" not in error.detail.message

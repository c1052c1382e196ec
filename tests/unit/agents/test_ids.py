"""Ids (``agents/_ids.py``): a run's message ids, counted up from a random head, in one call each."""

from __future__ import annotations

import sys
import uuid
from typing import Any

from duet.agents._ids import new_message_id


def test_a_message_id_is_uuid_shaped_unique_and_made_without_a_python_frame() -> None:
    """Each id is a UUID's shape, shares the process's random head, and is new; making one runs no
    Python function (a run makes a dozen: each Python call is CPU every request pays)."""
    frames: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            frames.append(frame.f_code.co_name)

    sys.setprofile(watch)
    try:
        ids = [new_message_id() for _ in range(3)]
    finally:
        sys.setprofile(None)
    assert [name for name in frames if name != "<listcomp>"] == []
    assert len(set(ids)) == 3 and all(uuid.UUID(i) and len(i) == 36 for i in ids)
    assert len({i[:24] for i in ids}) == 1 and int(ids[1][24:], 16) == int(ids[0][24:], 16) + 1

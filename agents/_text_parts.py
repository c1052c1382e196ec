"""Text a stream collects piece by piece, for as long as the stream lasts."""

from __future__ import annotations

PIECES_PER_BLOCK = 16
"""Pieces joined into one string: a streamed token is a string object of its own (about 50 bytes
besides its few characters), and a model call keeps every one of them until it ends."""


class TextParts:
    """A list of text pieces that joins every :data:`PIECES_PER_BLOCK` of them into one string, so a
    stream of thousands of tokens keeps a few hundred strings, each piece copied once.

    >>> parts = TextParts()
    >>> for n in range(40):
    ...     parts.append(str(n % 10))
    >>> parts.join(), len(parts), len(parts._blocks), len(parts._pieces), bool(TextParts())
    ('0123456789012345678901234567890123456789', 40, 2, 8, False)
    """

    __slots__ = ("_blocks", "_pieces")

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._pieces: list[str] = []

    def append(self, piece: str) -> None:
        pieces = self._pieces
        pieces.append(piece)
        if len(pieces) >= PIECES_PER_BLOCK:
            self._blocks.append("".join(pieces))
            pieces.clear()

    def join(self) -> str:
        """All the text so far."""
        if not self._blocks:
            return "".join(self._pieces)
        return "".join(self._blocks) + "".join(self._pieces)

    def clear(self) -> None:
        self._blocks.clear()
        self._pieces.clear()

    def __len__(self) -> int:
        """How many pieces were appended."""
        return len(self._blocks) * PIECES_PER_BLOCK + len(self._pieces)


class UnkeptText(TextParts):
    """Text whose reader keeps it itself: a stream's pieces are not kept a second time (see
    ``STREAMED_TEXT_UNKEPT_ARG`` in :mod:`duet.agents.upstream`); it joins into ``""``.

    >>> parts = UnkeptText()
    >>> parts.append("dropped")
    >>> parts.join(), len(parts)
    ('', 0)
    """

    __slots__ = ()

    def append(self, piece: str) -> None:
        pass


UNKEPT = UnkeptText()
"""One :class:`UnkeptText` for every stream (it holds nothing)."""

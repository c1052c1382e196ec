"""One set of given fields shared by the pydantic models of a kind that every request builds alike.

Pydantic keeps, on every model, the set of the fields its constructor was given
(``__pydantic_fields_set__``). A set of five names or more takes 728 bytes (a table of 32 slots), more
than the rest of a small model, and the models a stream keeps for its whole life (its answer options, the
task it hands the team, the agents' replies) are built with the same fields every time: one shared set
stands for them all.
Pydantic only ever adds to that set, the name of a field assigned after construction: the set
:func:`every_field` gives holds them all already, and Duet assigns no field of the models it shares a
set among, so a shared set never changes.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

_Model = TypeVar("_Model", bound=BaseModel)


def every_field(model_class: type[BaseModel]) -> set[str]:
    """The set to share among models of ``model_class`` given all their fields (see :func:`share_fields_set`)."""
    return set(model_class.model_fields)


def share_fields_set(model: _Model, shared: set[str]) -> _Model:
    """``model``, its set of given fields replaced by ``shared`` (from :func:`every_field`) when they are
    the same names; a model given fewer fields keeps its own set.

    >>> class Point(BaseModel):
    ...     x: int = 0
    ...     y: int = 0
    >>> EVERY = every_field(Point)
    >>> share_fields_set(Point(x=1, y=2), EVERY).model_fields_set is EVERY
    True
    >>> share_fields_set(Point(x=1), EVERY).model_fields_set
    {'x'}
    """
    if model.__pydantic_fields_set__ == shared:
        object.__setattr__(model, "__pydantic_fields_set__", shared)
    return model

"""The OpenAI Responses API (``/v1/responses``) on Duet's shared request flow.

Public API:

- :class:`Responses` — the protocol (reader, writers, error shapes) the routes serve, and
  ``GET /v1/responses/{id}`` (:meth:`Responses.retrieve`);
- :class:`ResponseStore` — stored responses (``previous_response_id``, ``item_reference``) in the
  service's continuation store;
- :class:`ResponsesRequest`, :class:`Response` — the request and the ``response`` object (wire models).
"""

from duet.api.responses._protocol import Response, ResponsesRequest
from duet.api.responses._service import Responses
from duet.api.responses._store import ResponseStore

__all__ = ["Response", "ResponseStore", "Responses", "ResponsesRequest"]

"""How a call that needs an empty slot is answered: the user is sent to the vault's page, so no secret passes
through the MCP client or the model, and the call succeeds when retried once the slot is set.

- 2025 eras (a session's child starts at initialize): the JSON-RPC error -32042 URLElicitationRequiredError
  (2025-11-25 client/elicitation), `data.elicitations` one URL-mode elicitation naming the page (serve/errors.py's
  table answers SlotsEmpty with it).
- 2026-07-28 (a pooled child starts at a call): tools/call, prompts/get and resources/read from a client declaring
  elicitation.url get an InputRequiredResult whose one input request (key INPUT_KEY) is that URL elicitation,
  with no requestState; the retry's inputResponses for it are dropped here before the call goes on
  (`without_own_responses`). Any other request, or a client without URL elicitation, gets an error naming the
  page (-32042 is reserved from 2026-07-28 on, so the code is -32603).

Without OAuth there is no page: the error names the settings the operator must set.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.core.capabilities import client_capabilities
from mcpgate.core.jsonrpc import Request
from mcpgate.serve.front.http import HttpResponse, Refusal, json_response
from mcpgate.serve.vault.errors import URL_ELICITATION_REQUIRED as URL_ELICITATION_REQUIRED
from mcpgate.serve.vault.errors import SlotsEmpty

INPUT_KEY = "mcpgate-vault"
MRTR_METHODS = ("tools/call", "prompts/get", "resources/read")


def elicitation(empty: SlotsEmpty) -> dict[str, Any]:
    """One URL-mode elicitation (ElicitRequestURLParams) sending the user to the page."""
    elicitation_id = "vault-" + secrets.token_urlsafe(9)
    return {"mode": "url", "elicitationId": elicitation_id, "url": empty.url, "message": str(empty)}


def error_data(exc: Exception) -> dict[str, Any] | None:
    """The -32042 error's data (serve/errors.py's table): the elicitations; None without a page."""
    if not isinstance(exc, SlotsEmpty) or exc.url is None:
        return None
    return {"elicitations": [elicitation(exc)]}


def modern_answer(empty: SlotsEmpty, message: Request) -> HttpResponse:
    """The 2026-07-28 answer to a request whose child needs empty slots (see the module docstring)."""
    declared = client_capabilities(message).get("elicitation")
    url_mode = isinstance(declared, dict) and isinstance(declared.get("url"), dict)
    if empty.url is None or message.method not in MRTR_METHODS or not url_mode:
        data = error_data(empty)
        raise Refusal(200, jsonrpc.INTERNAL_ERROR, str(empty), message.id, data)
    request = {"method": "elicitation/create", "params": elicitation(empty)}
    result = {"resultType": "input_required", "inputRequests": {INPUT_KEY: request}}
    return json_response(jsonrpc.encode({"jsonrpc": "2.0", "id": message.id, "result": result}))


def without_own_responses(params: dict[str, Any]) -> dict[str, Any] | None:
    """A retry's params without the answer to the vault's input request (None: there is none to drop). Only when
    it is the only input response and no requestState rides along: any other retry is the child's."""
    responses = params.get("inputResponses")
    if not isinstance(responses, dict) or set(responses) != {INPUT_KEY} or "requestState" in params:
        return None
    return {key: value for key, value in params.items() if key != "inputResponses"}


def retry_of(message: Request) -> Request:
    """`message` without the answer to the vault's input request (unchanged when it carries none)."""
    params = message.params if isinstance(message.params, dict) else None
    stripped = without_own_responses(params) if params is not None else None
    if stripped is None:
        return message
    return dataclasses.replace(message, params=stripped, obj={**message.obj, "params": stripped}, raw=None)

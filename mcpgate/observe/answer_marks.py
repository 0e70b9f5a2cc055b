"""What a request's span reads of its whole JSON answer (observe/tracing.py, as the span ends): the JSON-RPC error
code, and whether a tools/call result says isError true (the audit log's rule, observe/audit.py). Neither decodes
an answer whose bytes cannot say so."""

from __future__ import annotations

import json

from mcpgate.observe import audit


def error_code(body: bytes) -> int | None:
    """The JSON-RPC error code of a (single) response body, if it is an error."""
    if body.find(b'"error"') < 0:  # (find: a bytes `in` costs more, trying an integer first)
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


def tool_error(body: bytes) -> bool:
    """Whether a tools/call answer is a result with isError true (the audit log's rule). The usual answer, with no
    "isError" or one lone "isError":false, is told from its bytes here, before that rule's call."""
    at = body.find(b'"isError"')
    if at < 0 or (body.startswith(b":false", at + 9) and body.find(b'"isError"', at + 9) < 0):
        return False
    return audit.is_tool_error(body, lambda: audit.decoded(body))

"""SGLang's in-stream refusals, by version: how a 200 stream ends when the scheduler refuses
or aborts its request.

SGLang answers a streaming generation request with HTTP 200 before its scheduler has seen it.
A request the scheduler then refuses (the waiting queue is full, ``--max-queued-requests``:
``scheduler.py _abort_on_queued_limit``, status 503, "The request queue is full.") or aborts
half-way (an internal error, status 500) ends inside that stream. The tokenizer manager turns
the scheduler's AbortReq into one last output whose ``meta_info`` holds
``finish_reason = {"type": "abort", "status_code": S, "message": M}`` and
``completion_tokens`` so far, but no ``prompt_tokens`` (``tokenizer_manager.py
_handle_abort_req``). What the client then reads, read off each version's own code:

- ``/generate`` (0.5.9 and 0.5.23, ``http_server.py generate_request``): that output as one
  more event, then ``[DONE]``.
- chat and completions, 0.5.23 (the same since 0.5.10, ``serving_chat.py``,
  ``serving_completions.py``): an abort with a status is an error event
  ``{"error": {"object": "error", "message": M, "type": "SERVICE_UNAVAILABLE", "param": null,
  "code": 503}}``, then the usage chunk when ``include_usage`` was asked (prompt tokens 0:
  the abort's meta_info has none), then ``[DONE]``. A shed request's error event is the
  stream's first event: the abort arrives before the role chunk would.
- chat and completions, 0.5.9: the stream handler reads ``meta_info["prompt_tokens"]``, which
  the abort lacks; the KeyError ends the response after its 200 headers, the connection
  closes with no event and no ``[DONE]`` (SGLang PR #19514 fixed it in 0.5.10). The client
  sees a broken stream.

Non-streaming requests get the status as an HTTP error (``fastapi.HTTPException``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .chunks import ChatShape, CompletionShape, GenerateShape, ResponseShape, obj_event

__all__ = ["Abort", "QUEUE_FULL", "MIDSTREAM_FAILURE", "abort_events"]

QUEUE_FULL = "The request queue is full."
MIDSTREAM_FAILURE = "Internal server error: the request was aborted during generation (simulated)."

# http.HTTPStatus names, as SGLang writes them in the error event's `type`
_STATUS_NAMES = {500: "INTERNAL_SERVER_ERROR", 503: "SERVICE_UNAVAILABLE"}


@dataclass(frozen=True)
class Abort:
    """Why the scheduler ended a request: its status and message."""

    status: int
    message: str


def abort_events(shape: ResponseShape, version: str, abort: Abort, completion_tokens: int,
                 started: float) -> list[bytes] | None:
    """The events that end a stream whose request the scheduler aborted after
    ``completion_tokens`` tokens (``[DONE]`` follows them; each without its closing brace, as
    engine/sim/chunks.py builds them); None: the version breaks the connection instead (0.5.9's
    chat and completions). ``started``: the request's arrival (time.time()), for /generate's
    ``e2e_latency``."""
    finish = {"type": "abort", "status_code": abort.status, "message": abort.message}
    if isinstance(shape, GenerateShape):
        meta = {"id": shape.rid, "finish_reason": finish, "weight_version": "default",
                "e2e_latency": max(0.0, time.time() - started), "completion_tokens": completion_tokens}
        return [obj_event({"text": shape.text, "output_ids": [], "meta_info": meta})]
    if version == "0.5.9":
        return None
    # create_streaming_error_response: json.dumps, its default separators
    error = {"error": {"object": "error", "message": abort.message,
                       "type": _STATUS_NAMES.get(abort.status, "ERROR"), "param": None, "code": abort.status}}
    events = [obj_event(error, compact=False)]
    if shape.req.include_usage and isinstance(shape, (ChatShape, CompletionShape)):
        usage = shape._chunk([])
        usage["usage"] = {"prompt_tokens": 0, "total_tokens": completion_tokens, "completion_tokens": completion_tokens,
                          "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}
        events.append(obj_event(usage))
    return events

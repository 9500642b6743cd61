"""One multi-turn chat session's history: what each turn sends (issue #16).

Each turn sends the conversation so far, the server's earlier answers included (their real
text, collected by run_request into `RequestRecord.answer`), then a new user message:

- chat: the messages list [{"role": "user", ...}, {"role": "assistant", ...}, ..., the new
  user message], for `build_body(..., messages=...)`; the prompt text is the new user
  message alone (for logs).
- completions and /generate: one transcript text, "User: ...\\nAssistant: ...\\nUser:
  <new>\\nAssistant:", sent as the prompt (messages None).

A turn's input tokens are not known in advance past the first (they include answers not yet
written): the caller counts them from the server's usage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..client.api_formats import APIS, CHAT

if TYPE_CHECKING:
    from ..workload.prompts import PromptSource
    from .sender import Sender

USER = "user"
ASSISTANT = "assistant"
_LABEL = {USER: "User", ASSISTANT: "Assistant"}


class Conversation:
    """One multi-turn session's history."""

    __slots__ = ("api", "_history", "_pending", "_transcript")

    def __init__(self, api: str) -> None:
        if api not in APIS:
            raise ValueError(f"unknown api {api!r} (expected one of: {', '.join(APIS)})")
        self.api = api
        self._history: list[dict[str, str]] = []  # finished turns: user, assistant, ...
        self._pending: str | None = None  # the user text of the turn sent, not yet answered
        self._transcript = ""  # completions / generate: the finished turns as text

    def turn(self, user_text: str) -> tuple[str, list[dict[str, str]] | None]:
        """The request for the next turn: (prompt text, chat messages or None).

        Chat: (user_text, history + the new user message): a new list each turn (a body
        that still holds the previous list is not changed). Completions and /generate:
        (the transcript ending in "User: <user_text>\\nAssistant:", None).
        A turn whose answer never came (`answered` not called) is replaced by this one.
        """
        self._pending = user_text
        if self.api == CHAT:
            return user_text, [*self._history, {"role": USER, "content": user_text}]
        return f"{self._transcript}User: {user_text}\nAssistant:", None

    def answered(self, text: str) -> None:
        """The server's answer to the last turn (its text, as streamed)."""
        if self._pending is None:
            raise RuntimeError("answered() without a turn() to answer")
        user, self._pending = self._pending, None
        self._history.append({"role": USER, "content": user})
        self._history.append({"role": ASSISTANT, "content": text})
        if self.api != CHAT:
            # the answer follows "Assistant:" as the server continued it (a completion
            # usually starts with a space; else one is put in); one newline ends the turn
            sep = "" if not text or text[0].isspace() else " "
            self._transcript += f"User: {user}\nAssistant:{sep}{text}\n"

    @property
    def turns_done(self) -> int:
        """Turns answered so far."""
        return len(self._history) // 2

    @property
    def messages(self) -> list[dict[str, str]]:
        """The finished turns as chat messages (a copy)."""
        return [dict(m) for m in self._history]


async def run_session(sender: Sender, source: PromptSource, turns: int, think_s: float) -> None:
    """One multi-turn session on `sender` (engine/load/sender.py), prompts from `source`: each turn
    sends the conversation so far (the server's real answers included) and a new user
    message; `think_s` between an answer and the next turn. A turn that fails ends it.
    Concurrency counts sessions: the pool's slot holds the session, thinking included."""
    import asyncio

    from ..measure.records import OK

    conv = Conversation(sender.target.api)
    for k in range(1, turns + 1):
        p = source.next()
        text, messages = conv.turn(p.text)
        rec = await sender.slot_request(text, p.max_tokens, p.expected_input_tokens if k == 1 else 0, turn=k, messages=messages)
        if rec.status != OK:
            return
        conv.answered("".join(rec.answer or ()))
        if think_s > 0 and k < turns:
            await asyncio.sleep(think_s)

"""Multi-turn plumbing (issue #16): a session's history, the answer text collected as it
streams, and the sim's record of what each turn sent and got.

- Conversation builds each turn's request: chat messages with the earlier answers, or one
  "User: / Assistant:" transcript for completions and /generate.
- run_request collects the answer text when rec.answer is a list (chat delta.content,
  completions text, /generate's cumulative text kept once, reasoning left out), and nothing
  when it is None; the collected text is what the sim says it sent (/sim/requests?text=1).
- A 3-turn conversation driven here against the sim: each turn's prompt, as the sim received
  it, holds the previous turn's answer, and the prompt grows turn by turn.

The sim runs as a process on 127.0.0.1 (tests/conftest.py); each answer starts with
" r<index>", its arrival index at the sim, which finds its truth record.
"""

from __future__ import annotations

import json

import httpx
import pytest

from redline.engine.client.api_formats import (
    CHAT,
    COMPLETIONS,
    GENERATE,
    PATHS,
    Event,
    GenerateDecoder,
    OpenAIDecoder,
    OpenAITextDecoder,
    build_body,
    make_decoder,
)
from redline.engine.client.http import make_client
from redline.engine.client.request import run_request
from redline.engine.load.conversation import Conversation
from redline.engine.measure import records
from redline.engine.measure.hooks import RequestHooks
from redline.engine.measure.records import RequestRecord
from redline.engine.sim.truth import ANSWER_CHARS, TEXT_KEEP, TruthLog

from helpers import ThreadServer

MODEL = "redline-sim-70b"
FAST = ("--set", "decode_base_s=0.002", "--set", "decode_per_seq_s=0")


def new_rec(answer: list[str] | None = None, turn: int = 0) -> RequestRecord:
    rec = RequestRecord(rid=1, phase="live", step=0, concurrency=1, t_send=0.0)
    rec.answer = answer
    rec.turn = turn
    return rec


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


async def truth_of(url: str) -> dict[int, dict]:
    async with httpx.AsyncClient() as c:
        r = await c.get(url + "/sim/requests?text=1", timeout=10.0)
        r.raise_for_status()
        return {d["index"]: d for d in r.json()}


def index_of(answer: str) -> int:
    """The sim's arrival index, from the answer's first word " r<index>"."""
    first = answer.split()[0]
    assert first[0] == "r", answer
    return int(first[1:])


# -- Conversation ----------------------------------------------------------------------------
def test_chat_conversation_sends_the_history_then_the_new_message():
    conv = Conversation(CHAT)
    assert conv.turns_done == 0
    prompt, messages = conv.turn("hello")
    assert prompt == "hello" and messages == [{"role": "user", "content": "hello"}]
    conv.answered(" hi there")
    assert conv.turns_done == 1
    prompt, messages2 = conv.turn("how are you?")
    assert prompt == "how are you?"
    assert messages2 == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": " hi there"},
        {"role": "user", "content": "how are you?"},
    ]
    assert messages == [{"role": "user", "content": "hello"}]  # an earlier turn's list is left as it was
    conv.answered("fine")
    _, messages3 = conv.turn("bye")
    assert [m["role"] for m in messages3] == ["user", "assistant"] * 2 + ["user"]
    assert messages3[3] == {"role": "assistant", "content": "fine"} and conv.turns_done == 2
    assert conv.messages == messages3[:-1]


@pytest.mark.parametrize("api", [COMPLETIONS, GENERATE])
def test_text_apis_send_one_transcript(api):
    conv = Conversation(api)
    prompt, messages = conv.turn("hello")
    assert messages is None and prompt == "User: hello\nAssistant:"
    conv.answered(" hi there")
    prompt, messages = conv.turn("how are you?")
    assert messages is None and prompt == "User: hello\nAssistant: hi there\nUser: how are you?\nAssistant:"
    conv.answered("fine")  # no leading space: one is put in
    prompt, _ = conv.turn("bye")
    assert prompt == ("User: hello\nAssistant: hi there\nUser: how are you?\nAssistant: fine\n"
                      "User: bye\nAssistant:")
    assert conv.turns_done == 2


def test_a_turn_left_unanswered_is_replaced_and_answered_needs_a_turn():
    conv = Conversation(CHAT)
    with pytest.raises(RuntimeError):
        conv.answered("x")
    conv.turn("lost")  # e.g. the request failed: the session sends another turn instead
    _, messages = conv.turn("again")
    assert messages == [{"role": "user", "content": "again"}]
    conv.answered("ok")
    assert conv.turns_done == 1 and conv.messages[0]["content"] == "again"
    with pytest.raises(ValueError):
        Conversation("nope")


def test_build_body_messages_replace_the_single_user_message():
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    plain = build_body(CHAT, MODEL, "c", 8)
    body = build_body(CHAT, MODEL, "c", 8, messages=msgs)
    assert body["messages"] == msgs
    assert {k: v for k, v in body.items() if k != "messages"} == {k: v for k, v in plain.items() if k != "messages"}
    assert plain["messages"] == [{"role": "user", "content": "c"}]
    assert build_body(CHAT, MODEL, "c", 8, False, msgs)["stream_options"] == {"include_usage": True}
    # the text APIs send their prompt (the transcript) whatever messages says
    assert build_body(COMPLETIONS, MODEL, "p", 8, messages=msgs) == build_body(COMPLETIONS, MODEL, "p", 8)
    assert build_body(GENERATE, MODEL, "p", 8, messages=msgs) == build_body(GENERATE, MODEL, "p", 8)


# -- the decoders' answer text -------------------------------------------------------------------
def test_text_decoders_give_the_answer_text_and_the_plain_ones_never_do():
    plain = [dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": ' a "q" \\ é\n'}}], "sim_t": 1.5}),
             dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]})]
    for p in plain:
        text_dec, plain_dec = OpenAITextDecoder(CHAT), OpenAIDecoder(CHAT)
        fast = text_dec.decode(p)
        assert fast.text == json.loads(p)["choices"][0]["delta"]["content"]
        assert plain_dec.decode(p).text is None
        # the plain decoder's Event is the text decoder's without the text
        fast.text = None
        assert plain_dec.decode(p) == fast
    # usage chunks (continuous usage) take the full parse: text there too
    p = dumps({"choices": [{"index": 0, "text": " w"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    assert make_decoder(COMPLETIONS, text=True)(p).text == " w"
    assert make_decoder(COMPLETIONS)(p).text is None
    # reasoning is not answer text; a role chunk has none
    d = make_decoder(CHAT, text=True)
    ev = d(dumps({"choices": [{"index": 0, "delta": {"reasoning_content": "think", "content": None}}]}))
    assert ev.content and not ev.answer and ev.text is None
    assert d(dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})).text is None
    # /generate: the cumulative text as it stands
    g = GenerateDecoder(text=True)
    assert g.decode(dumps({"text": " a", "meta_info": {"completion_tokens": 1}})).text == " a"
    assert g.decode(dumps({"text": " a b", "meta_info": {"completion_tokens": 2}})).text == " a b"
    assert GenerateDecoder().decode(dumps({"text": " a", "meta_info": {"completion_tokens": 1}})) == \
        Event(tokens=1, content=True, answer=True, completion_tokens=1)


# -- run_request against the sim ---------------------------------------------------------------
@pytest.mark.parametrize("api", [CHAT, COMPLETIONS, GENERATE])
@pytest.mark.parametrize("continuous", [True, False], ids=["usage-every-chunk", "usage-at-end"])
async def test_run_request_collects_the_answer_the_sim_sent(shared_sim, api, continuous):
    sim = shared_sim("healthy", *FAST, "--set", "tokens_per_chunk=3")
    client = make_client(transport="lean")
    prompt = "the quick brown fox " * 5
    try:
        rec = new_rec(answer=[])
        body = build_body(api, MODEL, prompt, 14, continuous_usage=continuous)
        await run_request(client, sim.url + PATHS[api], api, body, rec, RequestHooks())
        bare = new_rec()  # answer None: nothing collected
        await run_request(client, sim.url + PATHS[api], api, body, bare, RequestHooks())
    finally:
        await client.aclose()
    assert rec.status == records.OK and bare.status == records.OK, (rec.error_text, bare.error_text)
    assert bare.answer is None
    answer = "".join(rec.answer)
    if api == GENERATE:
        assert len(rec.answer) == 1  # the cumulative text, kept once (not one copy per chunk)
    else:
        assert len(rec.answer) == 5  # one piece per chunk (3+3+3+3+2 tokens)
    assert len(answer.split()) == 14 == rec.output_tokens
    truth = (await truth_of(sim.url))[index_of(answer)]
    assert truth["answer"] == answer
    assert truth["prompt_tail"] == prompt and truth["prompt_tokens"] == rec.input_tokens
    assert truth["outcome"] == "completed"


async def test_reasoning_text_is_not_collected():
    """A reasoning model's thinking is output, not the answer the next turn sends back."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "let me think"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": " more", "content": None}}]},
        {"choices": [{"index": 0, "delta": {"content": "The answer"}}]},
        {"choices": [{"index": 0, "delta": {"content": " is 4."}}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}},
    ]
    data = b"".join(b"data: " + dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    def handler(c, head, body, i):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(data) + data)

    with ThreadServer(handler) as srv:
        client = make_client(transport="lean")
        rec = new_rec(answer=[])
        try:
            await run_request(client, srv.url + PATHS[CHAT], CHAT, build_body(CHAT, MODEL, "q", 4), rec, RequestHooks())
        finally:
            await client.aclose()
    assert rec.status == records.OK, rec.error_text
    assert rec.answer == ["The answer", " is 4."] and rec.output_tokens == 4


@pytest.mark.parametrize("api", [CHAT, COMPLETIONS, GENERATE])
async def test_three_turns_send_each_answer_back(shared_sim, api):
    sim = shared_sim("healthy", *FAST)
    conv = Conversation(api)
    client = make_client(transport="lean")
    recs: list[RequestRecord] = []
    try:
        for k in range(1, 4):
            prompt, messages = conv.turn(f"question number {k}: tell me more")
            rec = new_rec(answer=[], turn=k)
            body = build_body(api, MODEL, prompt, 10, messages=messages)
            await run_request(client, sim.url + PATHS[api], api, body, rec, RequestHooks())
            assert rec.status == records.OK, rec.error_text
            conv.answered("".join(rec.answer))
            recs.append(rec)
    finally:
        await client.aclose()
    assert conv.turns_done == 3
    truth = await truth_of(sim.url)
    answers = ["".join(r.answer) for r in recs]
    rows = [truth[index_of(a)] for a in answers]
    assert len({index_of(a) for a in answers}) == 3
    for k, (rec, row) in enumerate(zip(recs, rows, strict=False), start=1):
        assert row["answer"] == answers[k - 1]
        assert row["prompt_tokens"] == rec.input_tokens
        assert f"question number {k}: tell me more" in row["prompt_tail"]
        if k > 1:
            assert answers[k - 2] in row["prompt_tail"]  # the previous answer, sent back
            assert f"question number {k - 1}" in row["prompt_tail"]
            assert rec.input_tokens > recs[k - 2].input_tokens
    # the last prompt holds the whole conversation, in order
    tail = rows[2]["prompt_tail"]
    where = [tail.index(answers[0]), tail.index("question number 2"), tail.index(answers[1]),
             tail.index("question number 3")]
    assert where == sorted(where)


# -- the sim's truth log keeps texts bounded -------------------------------------------------------
def test_truth_texts_are_bounded_and_only_served_on_request():
    log = TruthLog()
    first = log.start(0)
    first.set_prompt_tail("p0")
    first.chunk(1.0, 1, " r0")
    first.chunk(1.1, 1, "x" * (ANSWER_CHARS + 10))
    assert len(first.answer) == ANSWER_CHARS and first.answer.startswith(" r0x")
    assert "answer" not in first.to_dict(chunks=True) and "prompt_tail" not in first.to_dict(chunks=False)
    d = first.to_dict(chunks=False, text=True)
    assert d["prompt_tail"] == "p0" and d["answer"] == first.answer
    for i in range(1, TEXT_KEEP + 1):
        log.start(i)
    # the oldest request's texts are dropped past TEXT_KEEP; its timing stays
    d = first.to_dict(chunks=True, text=True)
    assert d["prompt_tail"] is None and d["answer"] is None and d["chunk_tokens"] == [1, 1]
    first.chunk(1.2, 1, "more")
    first.set_prompt_tail("late")
    assert first.answer is None and first.prompt_tail is None
    assert log.dump(text=True)[-1]["answer"] == ""

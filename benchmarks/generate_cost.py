"""The client's CPU per streamed token on SGLang's /generate, on the sim's short shape and on the
shape SGLang really writes (issue 43 case 8), and the OpenAI fast path on SGLang's null fields.

    python benchmarks/generate_cost.py [--tokens 2048] [--answers 20] [--repeat 5]

What is decoded: the SSE payloads of one answer of --tokens tokens, chunk by chunk, through
redline's own decoders (engine/client/api_formats.py), --answers answers a run; the CPU is
time.process_time() around the decoding alone (the machine is shared: CPU time, not wall time),
the median of --repeat runs. Shapes:

  short      the sim's /generate chunk before issue 43: {"text": <the text so far>,
             "meta_info": {id, prompt_tokens, completion_tokens, finish_reason, cached_tokens},
             "index": 0, "sim_t"}
  real-0.5.9, real-0.5.23
             what SGLang writes (the sim's engine/sim/chunks.py, read from tokenizer_manager.py
             _handle_batch_output): the text so far, the whole output_ids list, meta_info with
             the version's fields
  real-0.5.23-incremental
             --incremental-streaming-output: each chunk's text and ids only

Each shape is decoded by the decoder as it is (the fast path where it applies) and by its full
parse alone (json of the whole chunk: what the decoder did before), and the plain and the text
decoder (multi-turn) are both shown. The ratio column is each row over the short shape's
decoder. The OpenAI lines: chat chunks as 0.5.9 and 0.5.23 write them (every field, null when
unused), the CPU per chunk of redline's decoder (one parse by json's C scanner: the byte-scan
"fast path" it had was slower on every shape, and is gone).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from redline.engine.client.api_formats import GenerateDecoder, OpenAIDecoder  # noqa: E402
from redline.engine.sim.chunks import ChatShape, GenerateShape, obj_event  # noqa: E402
from redline.engine.sim.tokens import TokenStream  # noqa: E402
from redline.engine.sim.wire import GenerationRequest  # noqa: E402


def _close(event: bytes, t: float) -> bytes:
    return event + b',"sim_t":' + repr(t).encode() + b"}"


def short_answer(tokens: int, seed: int = 0) -> list[bytes]:
    """The sim's /generate chunks before issue 43 (engine/sim/wire.py GenerateShape then)."""
    stream = TokenStream(random.Random(seed), first=" r0")
    text, out = "", []
    for i in range(1, tokens + 1):
        text += stream.next_text(1)
        meta = {"id": "ab" * 8, "prompt_tokens": 32, "completion_tokens": i,
                "finish_reason": {"type": "length", "length": i} if i == tokens else None, "cached_tokens": 0}
        out.append(_close(obj_event({"text": text, "meta_info": meta, "index": 0}), 1.7e9 + i * 0.01))
    return out


def real_answer(tokens: int, version: str, incremental: bool = False, seed: int = 0) -> list[bytes]:
    req = GenerationRequest(api="generate", model="m", prompt_tokens=32, max_tokens=tokens, stream=True, include_usage=False)
    shape = GenerateShape("ab" * 16, 1, req, version, incremental=incremental, rng=random.Random(seed))
    stream = TokenStream(random.Random(seed), first=" r0")
    shape.first_token_s = 0.05
    return [_close(shape.token_events(stream.next_text(1), 1, i, i == tokens)[0], 1.7e9 + i * 0.01)
            for i in range(1, tokens + 1)]


def chat_answer(tokens: int, version: str, seed: int = 0) -> list[bytes]:
    req = GenerationRequest(api="chat", model="m", prompt_tokens=32, max_tokens=tokens, stream=True, include_usage=True)
    shape = ChatShape("chatcmpl-" + "ab" * 8, 1, req, version)
    stream = TokenStream(random.Random(seed), first=" r0")
    out = [_close(e, 1.7e9) for e in shape.first_events()]
    for i in range(1, tokens + 1):
        out += [_close(e, 1.7e9 + i * 0.01) for e in shape.token_events(stream.next_text(1), 1, i, i == tokens)]
    return out + [_close(e, 1.7e9) for e in shape.closing(tokens)]


def cpu_per_token(payloads: list[bytes], answers: int, make, method: str = "decode") -> float:
    """CPU microseconds a token: `answers` answers, each through a fresh decoder."""
    t0 = time.process_time()
    for _ in range(answers):
        f = getattr(make(), method)
        for p in payloads:
            f(p)
    return (time.process_time() - t0) / (answers * len(payloads)) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--answers", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"/generate client CPU per token, a {a.tokens}-token answer, {a.answers} answers a run, median of {a.repeat}"
          f" (CPU time; load average {load:.1f} on {os.cpu_count()} cores)")
    shapes = {
        "short": short_answer(a.tokens),
        "real-0.5.9": real_answer(a.tokens, "0.5.9"),
        "real-0.5.23": real_answer(a.tokens, "0.5.23"),
        "real-0.5.23-incremental": real_answer(a.tokens, "0.5.23", incremental=True),
    }
    rows = []
    for name, payloads in shapes.items():
        size = sum(map(len, payloads)) / len(payloads)
        got = {}
        for label, make, method in (("decoder", GenerateDecoder, "decode"), ("text decoder", lambda: GenerateDecoder(True), "decode"),
                                    ("full parse", GenerateDecoder, "full")):
            got[label] = statistics.median(cpu_per_token(payloads, a.answers, make, method) for _ in range(a.repeat))
        rows.append((name, size, got))
    base = rows[0][2]["decoder"]
    print(f"{'shape':<26}{'bytes/chunk':>12}{'decoder us/tok':>16}{'ratio':>7}{'text dec us/tok':>17}{'full parse us/tok':>19}")
    for name, size, got in rows:
        print(f"{name:<26}{size:>12.0f}{got['decoder']:>16.2f}{got['decoder'] / base:>7.2f}{got['text decoder']:>17.2f}"
              f"{got['full parse']:>19.2f}")
    real = max(r[2]["decoder"] for r in rows[1:3])
    old = rows[0][2]["full parse"]  # how the short shape was decoded before issue 43
    print(f"real shape / short shape: {real / base:.2f} against its decoder, {real / old:.2f} against its full parse "
          f"(goal: within 1.5); the full parse of the real shape is {max(r[2]['full parse'] for r in rows[1:3]) / old:.1f}x "
          "the short shape's")
    print(f"\nOpenAI chat chunks as SGLang writes them, {a.tokens} tokens:")
    for version in ("0.5.9", "0.5.23"):
        payloads = chat_answer(a.tokens, version)
        us = statistics.median(cpu_per_token(payloads, a.answers, lambda: OpenAIDecoder("chat"), "decode") for _ in range(a.repeat))
        size = sum(map(len, payloads)) / len(payloads)
        print(f"  {version}: {us:.2f} us a chunk ({size:.0f} bytes a chunk)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Plain-TCP connections for the lean transport (engine/client/transport.py) whose reads carry the
kernel's receive time (Linux).

The lean transport stamps each read when its bytes arrived. On an asyncio transport that is the
moment the loop read the socket: bytes that arrived while the loop was busy (the engine's ITL
harvest, its once-a-second tick, a snapshot) read late, and at C=256 a decode burst is read one
socket after another. Here the socket has SO_TIMESTAMPNS on and is read with recvmsg(): the
kernel hands each read the receive time of the newest packet it covers (TCP coalesces queued
packets under the newest one's stamp). A server writes one chunk per stream per decode step, so
during a loop pause shorter than a step each socket holds one packet and the stamp is that
packet's arrival; a longer pause lumps a stream's chunks under the newest one's time, still no
later than the read's own time.

The stamp is CLOCK_REALTIME; it is moved to the perf_counter() clock at the read: its age on
the realtime clock (integer ns) subtracted from perf_counter() now. A stamp later than now,
missing (a 32-bit timespec too), or older than `MAX_AGE_NS` (a clock step) falls back to
perf_counter() at the read.

`RawTransport` is the part of asyncio.Transport the lean transport's `_Conn` uses (write,
is_closing, close, pause_reading / resume_reading, get_extra_info("socket")), on a
non-blocking socket with loop.add_reader / add_writer (the default loop and uvloop). It calls
the protocol as asyncio does: data_received(data, stamp) once per read, eof_received and
connection_lost(None) at the server's close, connection_lost(exc) when the socket fails (a
reset), pause_writing / resume_writing around a write buffer above `WRITE_HIGH_WATER`.
`close()` drops what is still unsent (the lean transport closes only a connection it gives
up). https:// stays on the loop's own transport.

REDLINE_KSTAMP=0 in the environment (read once, at import) turns it off: every connection on
the loop's transport, stamped when the loop reads it, as before.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
from time import perf_counter, time_ns
from typing import Any

from . import fast_path

__all__ = ["ENABLED", "RawTransport", "open_connection"]

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python < 3.12 lacks the name
_ANC = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0  # one struct timespec (64-bit)
READ_SIZE = 65536
WRITE_HIGH_WATER = 64 * 1024
MAX_AGE_NS = 30_000_000_000  # an older stamp is not a packet's arrival but a clock step
_TS = struct.Struct("qq")

# one read and its stamp in C where the helper was built (engine/client/_speedups.c), else below
_recv_stamped = fast_path.recv_stamped

ENABLED = (
    sys.platform.startswith("linux")
    and hasattr(socket.socket, "recvmsg")
    and os.environ.get("REDLINE_KSTAMP", "1").strip() not in ("0", "off", "no", "false")
)


class RawTransport(asyncio.Transport):
    """A non-blocking TCP socket read with recvmsg() under SO_TIMESTAMPNS (see the module)."""

    __slots__ = ("_loop", "_sock", "_fd", "_protocol", "_closing", "_reading", "_wbuf", "_writing", "_wpaused",
                 "_recvmsg", "_received")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Any) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._closing = False
        self._reading = False
        self._wbuf = bytearray()
        self._writing = False  # add_writer is on
        self._wpaused = False  # the protocol was told pause_writing
        self._recvmsg = sock.recvmsg  # bound once: _read runs per read
        self._received = protocol.data_received
        protocol.connection_made(self)
        self.resume_reading()

    # -- asyncio.Transport -------------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "peername":
            try:
                return self._sock.getpeername()
            except OSError:
                return default
        return default

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading and not self._closing:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read)

    def close(self) -> None:
        self._shut(None)

    def abort(self) -> None:
        self._shut(None)

    def get_write_buffer_size(self) -> int:
        return len(self._wbuf)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if not self._wbuf:
            try:
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:  # a reset: closed before returning, as asyncio's transports
                self._shut(exc)
                return
            if n == len(data):
                return
            data = memoryview(data)[n:]
        self._wbuf += data
        if not self._writing:
            self._writing = True
            self._loop.add_writer(self._fd, self._write_ready)
        if not self._wpaused and len(self._wbuf) > WRITE_HIGH_WATER:
            self._wpaused = True
            self._protocol.pause_writing()

    # -- loop callbacks ----------------------------------------------------------------------
    def _read(self) -> None:
        if _recv_stamped is not None:  # the same read in C (engine/client/fast_path.py)
            try:
                data, t = _recv_stamped(self._fd, READ_SIZE, MAX_AGE_NS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._shut(exc)
                return
            if not data:
                self._protocol.eof_received()
                self._shut(None)
                return
            self._received(data, t)
            return
        try:
            data, anc, _, _ = self._recvmsg(READ_SIZE, _ANC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        rt = time_ns()  # the two clocks back to back (realtime first: never an early stamp)
        t = perf_counter()
        if not data:
            self._protocol.eof_received()
            self._shut(None)
            return
        if anc:
            d = anc[0][2]
            if len(d) >= 16:
                s, ns = _TS.unpack_from(d)
                age = rt - s * 1_000_000_000 - ns  # integer ns: a double of epoch seconds holds ~0.2 us
                if 0 <= age < MAX_AGE_NS:
                    t -= age * 1e-9
        self._received(data, t)

    def _write_ready(self) -> None:
        buf = self._wbuf
        try:
            n = self._sock.send(buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        del buf[:n]
        if not buf:
            self._writing = False
            self._loop.remove_writer(self._fd)
            if self._wpaused:
                self._wpaused = False
                self._protocol.resume_writing()

    def _shut(self, exc: BaseException | None) -> None:
        """Close now (what is unsent is dropped); connection_lost(exc) from the loop, once."""
        if self._closing:
            return
        self._closing = True
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        self._wbuf.clear()
        self._loop.call_soon(self._lost, exc)

    def _lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()


async def open_connection(loop: asyncio.AbstractEventLoop, host: str, port: int, protocol: Any) -> RawTransport:
    """Connect a non-blocking TCP socket with SO_TIMESTAMPNS on (before any byte can arrive)
    and wrap it for `protocol`. OSError as socket.connect raises it (the last address's)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no address for {host}")
    err: OSError | None = None
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            err = exc
            continue
        except BaseException:
            sock.close()
            raise
        return RawTransport(loop, sock, protocol)
    assert err is not None
    raise err

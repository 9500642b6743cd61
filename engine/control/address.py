"""The control API's address and token rules (`--control [HOST:]PORT`, `--control-token-env`).

Light on purpose (no aiohttp): the command line checks these before anything starts. The
server itself is engine/control/http_api.py, started by the engine in its own process.

- `PORT` alone, or `HOST:PORT` (`[::1]:PORT` for an IPv6 literal); the host defaults to
  127.0.0.1. Port 0 picks a free one (tests).
- A host that is not loopback needs a token (`--control-token-env NAME`): without one the
  command line refuses in one line, exit 2, before anything starts.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
MAX_BODY = 64 * 1024  # request bodies above this get 413


class ControlError(ValueError):
    """A --control value that cannot be used (one line naming it)."""


@dataclass(frozen=True)
class ControlAddress:
    host: str
    port: int

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def parse_control(text: str) -> ControlAddress:
    """`[HOST:]PORT` -> ControlAddress; ControlError naming the value otherwise."""
    s = str(text).strip()
    form = "expected [HOST:]PORT, e.g. 8090 or 127.0.0.1:8090 ([::1]:8090 for IPv6)"
    host, port_text = DEFAULT_HOST, s
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1: end + 2] != ":":
            raise ControlError(f"--control {text!r}: {form}")
        host, port_text = s[1:end], s[end + 2:]
    elif ":" in s:
        host, _, port_text = s.rpartition(":")
        if ":" in host:
            raise ControlError(f"--control {text!r}: an IPv6 host goes in brackets; {form}")
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise ControlError(f"--control {text!r}: {form}")
    try:
        port = int(port_text)
    except ValueError:
        raise ControlError(f"--control {text!r}: {form}") from None
    if not 0 <= port <= 65535:
        raise ControlError(f"--control {text!r}: port {port} out of range; {form}")
    return ControlAddress(host, port)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; a name is resolved (every address must be loopback)."""
    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except (OSError, UnicodeError):
        return False
    addrs = {i[4][0] for i in infos}
    return bool(addrs) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addrs)


def check_token_env(name: str | None, environ: Mapping[str, str]) -> str | None:
    """The token named by --control-token-env (None without the option). ControlError when the
    name is not a variable's name (never echoing it: it may be the token itself) or the
    variable is unset, empty or not printable ASCII."""
    if name is None:
        return None
    if not name or not name.replace("_", "").isalnum() or name[0].isdigit() or not name.isascii():
        raise ControlError("--control-token-env: expected the NAME of an environment variable (like REDLINE_TOKEN), not the token itself")
    tok = environ.get(name)
    if not tok:
        raise ControlError(f"--control-token-env {name}: ${name} is not set or empty; put the token in it")
    if not all(32 < ord(ch) < 127 for ch in tok):
        raise ControlError(f"--control-token-env {name}: ${name} contains spaces, control or non-ASCII characters; expected a printable token")
    if len(tok) < 8:
        raise ControlError(f"--control-token-env {name}: ${name} is shorter than 8 characters; use a longer token")
    return tok


def check_control(text: str | None, token_env: str | None, environ: Mapping[str, str]) -> tuple[ControlAddress | None, str | None]:
    """--control and --control-token-env checked together: (address, token). A non-loopback
    bind without a token is refused; so is a port that cannot be listened on now."""
    if text is None:
        if token_env is not None:
            check_token_env(token_env, environ)
            raise ControlError(f"--control-token-env {token_env}: protects the control API; give --control [HOST:]PORT too")
        return None, None
    addr = parse_control(text)
    token = check_token_env(token_env, environ)
    if not addr.loopback and token is None:
        raise ControlError(f"--control {text}: {addr.host} is not loopback; anyone who reaches it could steer the load: "
                           "give --control-token-env NAME (a token in that environment variable), or bind 127.0.0.1")
    try_bind(addr)
    return addr, token


def try_bind(addr: ControlAddress) -> None:
    """ControlError when `addr` cannot be listened on now (in use, no such address)."""
    if addr.port == 0:
        return
    try:
        infos = socket.getaddrinfo(addr.host, addr.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ControlError(f"--control {addr.host}:{addr.port}: cannot resolve {addr.host}: {exc}") from None
    fam, _, _, _, sa = infos[0]
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(sa)
    except OSError as exc:
        raise ControlError(f"--control {addr.host}:{addr.port}: cannot listen: {exc.strerror or exc}") from None
    finally:
        s.close()

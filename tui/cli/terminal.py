"""The terminal and the output files of `redline report` (and a sweep's): whether to colour,
how big to draw, and the checks of --html, --png and --junit before any output. Light: the
command line imports it at start-up."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import UsageError


def check_out_file(path: Path, flag: str, example: str) -> None:
    """A file `flag` will write (--junit, --result-filename, ...): not a directory, in a
    directory that exists; UsageError (one line naming the flag) otherwise."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.exists() and path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; expected a file name such as {example}")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")


def check_html_target(path: Path) -> None:
    """--html: the HTML extra installed and the file writable."""
    from ...engine.report.api import HTML_MISSING, html_available

    if not html_available():
        raise UsageError(f"--html {path}: {HTML_MISSING}")
    check_out_file(path, "--html", "report.html")


def check_png_target(path: Path) -> None:
    """--png: matplotlib (the png extra) installed and the file writable."""
    from ..plots import PNG_EXTRA_HINT, png_available

    if not png_available():
        raise UsageError(f"--png {path}: needs matplotlib, the png extra: {PNG_EXTRA_HINT}")
    check_out_file(path, "--png", "curves.png")


def write_html_page(sessions: list, path: Path) -> None:
    """--html: one page of the sessions; one line (UsageError) when it cannot be written."""
    from ...engine.report.api import HtmlUnavailable, collect, write_html

    try:
        write_html([collect(s.path, s) for s in sessions], path)
    except HtmlUnavailable as exc:
        raise UsageError(f"--html {path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--html {path}: cannot write: {exc.strerror or exc}") from None


def write_png_file(sessions: list, path: Path) -> None:
    """--png: the saturation curves as a picture; one line (UsageError) when it cannot be written."""
    from ..plots import PngUnavailable, write_png

    try:
        write_png(sessions, path)
    except PngUnavailable as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--png {path}: cannot write: {exc.strerror or exc}") from None


def print_curves(sessions: list) -> None:
    """The sessions' overlaid curves in the terminal, sized and coloured for it."""
    from ..plots import terminal_curves

    w, h = _plot_size()
    print()
    print(terminal_curves(sessions, w, h, color=_use_color()))


def _use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _plot_size() -> tuple[int, int]:
    if not sys.stdout.isatty():
        return 80, 24
    import shutil

    cols = shutil.get_terminal_size((80, 24)).columns
    return max(60, min(cols, 160)), 24

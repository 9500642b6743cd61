"""Modal prompts: type an exact concurrency (or a rate, or SLOs); confirm a large one; pick a preset."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from ...engine import api

if TYPE_CHECKING:
    from ...engine.api import Preset


class LinePrompt(ModalScreen[str | None]):
    """One line typed into an Input; returns the text (checked by the screen) or None (Esc).

    The live screen opens it with `open_prompt` (live_screen.py): the Input has the focus
    before the next key is read, so keys typed right after the one that opened it land in it,
    in order."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def focus_input(self) -> None:
        """Give the Input the focus now (Widget.focus() waits for the app's next message:
        a key already typed would reach the screen, not the Input)."""
        self.set_focus(self.query_one(Input))

    def on_mount(self) -> None:
        self.focus_input()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConcurrencyPrompt(LinePrompt):
    """Returns the typed text (checked by the app) or None when cancelled."""

    def __init__(self, current: int, max_concurrency: int) -> None:
        super().__init__()
        self.current = current
        self.max_concurrency = max_concurrency

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Concurrency: a whole number, 1 or more (now C={self.current})", classes="question")
            yield Label(f"above --max-concurrency {self.max_concurrency} it asks first · Enter sets, Esc cancels", classes="dim")
            yield Input(placeholder=str(self.current), id="concurrency-input")


class TextPrompt(LinePrompt):
    """One line of text (checked by the app), or None when cancelled."""

    def __init__(self, question: str, hint: str, placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.hint = hint
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            yield Label(self.hint, classes="dim")
            yield Input(placeholder=self.placeholder, id="text-input")


def rate_prompt(trace: bool, now: float | None) -> TextPrompt:
    """`c` in rate mode: the request rate R, or in a trace replay its speed factor (`now`: the
    engine's, when it has one)."""
    if trace:
        question = "Trace speed factor" + (f", now ×{now:g}" if now else "")
        hint = "a number from 0.1: 2 replays twice as fast as recorded — Enter sets, Esc cancels"
    else:
        question = "Request rate R in requests/s" + (f", now R={now:g}/s" if now else "")
        hint = "at least 0.1, e.g. 12.5 — Enter sets, Esc cancels"
    return TextPrompt(question, hint, f"{now:g}" if now else "10")


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "yes", "yes"), Binding("n,escape", "no", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            yield Label("y = yes, n / Esc = no", classes="dim")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)


DESCRIPTION_WIDTH = 56  # the descriptions' width before the list is laid out (its text at 80 columns)
OPTION_PAD = 2  # an option's padding, left and right (Textual's OptionList)
INDENT = "  "  # a description's lines under the preset's name


def preset_entries(where: Path) -> list[tuple[str, Preset | None, str]]:
    """The presets in `where` (its *.toml), by name: (name, the preset, its description and
    how long it runs on the built-in sim), or (name, None, why it cannot be used)."""
    paths = sorted(where.glob("*.toml")) if where.is_dir() else []
    entries: list[tuple[str, Preset | None, str]] = []
    for path in paths:
        try:
            preset = api.load_preset(path)
        except api.PresetError as exc:
            entries.append((path.stem, None, str(exc)))
            continue
        entries.append((path.stem, preset, f"{preset.description}; {api.duration_text(preset)}"))
    return entries


class PresetPicker(ModalScreen[int | None]):
    """The presets by name, each with its description (or why it cannot be used, in red);
    returns the index of the one picked, or None. A description is wrapped to the width the
    list has once laid out, every line indented under its name: wider, the list would wrap it
    again and the overflow would start at the left, where names are (`expected:` read as a
    preset's name at 80x24)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, presets: list[tuple[str, str, bool]]) -> None:
        super().__init__()
        self.presets = presets  # (name, description or error, is an error)
        self.wrapped_at = DESCRIPTION_WIDTH

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Run a preset with its workload: Enter runs it, Esc cancels", classes="question")
            yield OptionList(*self._options(DESCRIPTION_WIDTH), id="preset-list")

    def _options(self, width: int) -> list[Option]:
        return [Option(self._prompt(*p, width=width), id=str(i)) for i, p in enumerate(self.presets)]

    def on_mount(self) -> None:
        self.call_after_refresh(self.rewrap)

    def on_resize(self) -> None:
        self.call_after_refresh(self.rewrap)

    def rewrap(self) -> None:
        """The descriptions wrapped again when the list's text width is not the one they were
        wrapped for (the first layout, a resize); the highlighted preset stays highlighted."""
        ol = self.query_one(OptionList)
        width = ol.scrollable_content_region.width - OPTION_PAD - len(INDENT)
        if width < 10 or width == self.wrapped_at:
            return
        self.wrapped_at = width
        at = ol.highlighted
        ol.clear_options()
        ol.add_options(self._options(width))
        if at is not None:
            ol.highlighted = at

    @staticmethod
    def _prompt(name: str, line: str, bad: bool, width: int = DESCRIPTION_WIDTH) -> Text:
        """The name, then its description indented under it (wrapped to `width`, every line
        indented)."""
        t = Text(name, style="bold")
        for row in textwrap.wrap(line, width):
            t.append("\n" + INDENT)
            t.append(row, style="red" if bad else "dim")
        return t

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_cancel(self) -> None:
        self.dismiss(None)

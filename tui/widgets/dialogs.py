"""Modal prompts: type an exact concurrency (or a rate, or SLOs); confirm a large one; pick a preset."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


class LinePrompt(ModalScreen[str | None]):
    """One line typed into an Input; returns the text (checked by the app) or None (Esc).

    The app opens it with `open_prompt` (app.py): the Input has the focus before the next key
    is read, so keys typed right after the one that opened it land in it, in order."""

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
            yield Label(f"Concurrency (1-{self.max_concurrency}), now C={self.current}", classes="question")
            yield Label("Enter sets, Esc cancels", classes="dim")
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


DESCRIPTION_WIDTH = 60  # the picker's list is 62 columns wide at 80 (redline.tcss .dialog)


class PresetPicker(ModalScreen[int | None]):
    """The presets by name, each with its description (or why it cannot be used, in red);
    returns the index of the one picked, or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, presets: list[tuple[str, str, bool]]) -> None:
        super().__init__()
        self.presets = presets  # (name, description or error, is an error)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Run a preset with its workload: Enter runs it, Esc cancels", classes="question")
            yield OptionList(*[Option(self._prompt(*p), id=str(i)) for i, p in enumerate(self.presets)], id="preset-list")

    @staticmethod
    def _prompt(name: str, line: str, bad: bool) -> Text:
        """The name, then its description indented under it (wrapped to the dialog's width
        at 80 columns, every line indented)."""
        t = Text(name, style="bold")
        for row in textwrap.wrap(line, DESCRIPTION_WIDTH):
            t.append("\n  ")
            t.append(row, style="red" if bad else "dim")
        return t

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_cancel(self) -> None:
        self.dismiss(None)

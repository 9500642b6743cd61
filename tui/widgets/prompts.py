"""Modal prompts: type an exact concurrency; confirm a large one; pick a preset."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


class ConcurrencyPrompt(ModalScreen[str | None]):
    """Returns the typed text (checked by the app) or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, current: int, max_concurrency: int) -> None:
        super().__init__()
        self.current = current
        self.max_concurrency = max_concurrency

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Concurrency (1-{self.max_concurrency}), now C={self.current}", classes="question")
            yield Label("Enter sets, Esc cancels", classes="dim")
            yield Input(placeholder=str(self.current), id="concurrency-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TextPrompt(ModalScreen[str | None]):
    """One line of text (checked by the app), or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

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

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


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


class PresetPicker(ModalScreen[Path | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, presets: list[Path]) -> None:
        super().__init__()
        self.presets = presets

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Run a preset: Enter runs it, Esc cancels", classes="question")
            yield OptionList(*[Option(p.stem, id=str(i)) for i, p in enumerate(self.presets)], id="preset-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.presets[int(event.option.id or 0)])

    def action_cancel(self) -> None:
        self.dismiss(None)

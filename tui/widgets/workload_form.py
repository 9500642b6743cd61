"""The workload form (`w`): change the output length, the input length, the dataset or the
prefix ratio while the load runs (engine/workload/change.py; a new step starts with it).

The fields open with the workload running now (Snapshot.workload). Enter, in any field,
applies what changed: the form sends it and waits for the engine's answer; a bad value (here
or the engine's: a dataset file it cannot read) shows its one-line error in the form, which
stays open. Nothing changed closes it with nothing sent. Escape cancels.
"""

from __future__ import annotations

import math
from typing import Any, Awaitable, Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from ...engine.api import (
    WORKLOAD_KEYS as KEYS,
    WORKLOAD_MAX_LEN as MAX_LEN,
    WorkloadChange,
    WorkloadConfig,
    WorkloadError,
    is_prefix_spec,
    parse_prefix_spec,
)

# (key, label, placeholder): the form's fields, in order
FIELDS = (
    ("output_len", "output len", "max_tokens of each request"),
    ("input_len", "input len", "prompt tokens (random, prefix)"),
    ("dataset", "dataset", "random | prefix:groups=G,prefix_len=P,suffix_len=S | jsonl:PATH"),
    ("prefix_ratio", "prefix ratio", "0 to below 1: the share of a prompt its group shares"),
)


def current_values(workload: dict) -> dict[str, str]:
    """The form's starting text per field, from Snapshot.workload."""
    dataset = str(workload.get("dataset", "random"))
    ratio = 0.0
    if is_prefix_spec(dataset):
        try:
            p = parse_prefix_spec(dataset)
            ratio = p.prefix_len / (p.prefix_len + p.suffix_len)
        except WorkloadError:
            pass
    return {
        "output_len": str(workload.get("output_len", "")),
        "input_len": str(workload.get("input_len", "")),
        "dataset": dataset,
        "prefix_ratio": f"{ratio:.2f}".rstrip("0").rstrip(".") if ratio else "0",
    }


def build_change(before: dict[str, str], after: dict[str, str], current: dict | None = None) -> WorkloadChange:
    """A WorkloadChange of the fields whose text changed; WorkloadError (one line naming the
    value and what is accepted) for a bad one. With `current` (Snapshot.workload), the change
    is tried on it too (the lengths' bounds, the dataset's form; the engine reads files)."""
    values: dict[str, Any] = {}  # each key's value is checked below as WorkloadChange types it
    for key in KEYS:
        new = after.get(key, "").strip()
        if new == before.get(key, "").strip():
            continue
        if not new:
            raise WorkloadError(f"{key} is empty; give a value, or Esc to cancel")
        if key == "dataset":
            values[key] = new
        elif key == "prefix_ratio":
            try:
                r = float(new)
            except ValueError:
                r = math.nan
            if not (math.isfinite(r) and 0 <= r < 1):
                raise WorkloadError(f"prefix_ratio {new!r}: expected a number from 0 to below 1 (0 = random prompts)")
            values[key] = r
        else:
            try:
                n = int(new)
            except ValueError:
                n = 0
            if not 1 <= n <= MAX_LEN:
                raise WorkloadError(f"{key} {new!r}: expected a whole number of tokens from 1 to {MAX_LEN}")
            values[key] = n
    change = WorkloadChange(**values)
    if current is not None and not change.empty:
        change.apply(_config(current))
    return change


def _config(workload: dict) -> WorkloadConfig:
    try:
        return WorkloadConfig(dataset=str(workload.get("dataset", "random")), input_len=int(workload.get("input_len", 1)),
                              output_len=int(workload.get("output_len", 1)))
    except (TypeError, ValueError):
        return WorkloadConfig()


class WorkloadForm(ModalScreen[WorkloadChange | None]):
    """`apply(change)` sends the change and returns the engine's error (one line) or None.
    Returns the change applied, or None when cancelled or when nothing changed."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, workload: dict, apply: Callable[[WorkloadChange], Awaitable[str | None]]) -> None:
        super().__init__()
        self.workload = dict(workload)
        self.before = current_values(workload)
        self.apply = apply
        self._busy = False

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="workload-form"):
            yield Label("Workload from now on (a new step starts)", classes="question")
            yield Label("Tab moves, Enter applies what changed, Esc cancels", classes="dim")
            for key, label, hint in FIELDS:
                with Horizontal(classes="form-row"):
                    yield Label(label, classes="form-label")
                    yield Input(value=self.before[key], placeholder=hint, id=f"wl-{key}", classes="form-input", compact=True)
            yield Label("", id="workload-error", classes="form-error")

    def on_mount(self) -> None:
        self.focus_input()

    def focus_input(self) -> None:
        """The first field has the focus now (Widget.focus() waits for the app's next
        message: keys typed right after `w` would reach the screen, not the field)."""
        self.set_focus(self.query_one("#wl-output_len", Input))

    def values(self) -> dict[str, str]:
        return {key: self.query_one(f"#wl-{key}", Input).value for key, _, _ in FIELDS}

    def show_error(self, text: str) -> None:
        err = self.query_one("#workload-error", Label)
        err.update(text)
        err.display = bool(text)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self._busy:
            return
        try:
            change = build_change(self.before, self.values(), self.workload)
        except WorkloadError as exc:
            self.show_error(str(exc))
            return
        if change.empty:
            self.dismiss(None)
            return
        self._busy = True
        self.show_error("")
        try:
            err = await self.apply(change)
        finally:
            self._busy = False
        if err:
            self.show_error(err)
            return
        self.dismiss(change)

    def action_cancel(self) -> None:
        self.dismiss(None)

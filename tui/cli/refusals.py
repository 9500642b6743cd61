"""How the command line words a refusal argparse found (tui/cli/arguments.py OneLineParser):
one line naming the value once and what is accepted, with the closest real choice.

    redline reprot               unknown command 'reprot'; did you mean report?
    redline ctl concurency 8     unknown action 'concurency'; did you mean concurrency?
    redline --concurrency 0      --concurrency '0': expected a whole number >= 1
    redline --api chta           --api 'chta': expected chat, completions or generate; did you mean chat?
    redline --profile fragile    --profile is now --sim-profile (the sim's profile; --profile-s is the server's profiler)

argparse's own words repeat the option (`argument --concurrency/-c: --concurrency '0': ...`)
or say `invalid choice` without the nearest one.
"""

from __future__ import annotations

import argparse

from ...engine import api

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# what argparse's built-in types refuse, in the words the rest of the command line uses
_TYPE_WORDS = {int: "a whole number", float: "a number"}


def option_name(action: argparse.Action) -> str:
    """The name a refusal gives the argument: its long option (`--concurrency` for -c too),
    else its metavar or dest (a positional)."""
    longs = [o for o in action.option_strings if o.startswith("--")]
    if longs or action.option_strings:
        return (longs or list(action.option_strings))[0]
    meta = action.metavar if isinstance(action.metavar, str) else None
    return meta or action.dest


def type_refusal(action: argparse.Action, value: str, message: str) -> str:
    """One line for a value the argument's type refused: the option once, the value, what is
    accepted. A type of ours already names the option (`--concurrency '0': expected ...`)."""
    if any(o in message for o in action.option_strings):
        return message
    name = option_name(action)
    what = _TYPE_WORDS.get(action.type)  # type: ignore[arg-type]
    if what is not None:
        return f"{name} {value!r}: expected {what}"
    return f"{name} {value!r}: {message}"


def _either(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def choice_refusal(action: argparse.Action, value: object) -> str:
    """One line for a value not among the argument's choices, with the nearest one.
    A subcommand (`redline reprot`, `redline ctl concurency`) is an unknown command or action;
    a built-in preset's name given as a command (`redline quick`) says how to run it."""
    choices = [str(c) for c in (action.choices or ())]
    near = api.closest(value, choices)
    hint = f"; did you mean {near}?" if near is not None else ""
    if isinstance(action, argparse._SubParsersAction):
        what = "command" if action.dest in ("command", argparse.SUPPRESS, None) else action.dest
        if not hint and what == "command" and value in _preset_names():
            hint = f"; {value} is a preset: redline run {value}"
        if not hint:
            hint = f" (commands: {', '.join(choices)})" if what == "command" else f" ({what}s: {', '.join(choices)})"
        return f"unknown {what} {value!r}{hint}"
    return f"{option_name(action)} {value!r}: expected {_either(choices)}{hint}"


def _preset_names() -> list[str]:
    """The built-in presets' names (only read on a refusal)."""
    try:
        return [p.stem for p in api.builtin_dir().glob("*.toml")]
    except OSError:  # pragma: no cover - the package's own folder
        return []


class RenamedOption(argparse.Action):
    """An option that was renamed: any use of it is refused with one line naming the new one
    (`--profile is now --sim-profile (...)`), whether or not a value follows."""

    def __init__(self, option_strings, dest, *, why: str, nargs="?", default=None, **kwargs) -> None:
        kwargs.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=nargs, default=argparse.SUPPRESS, **kwargs)
        self.why = why

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise argparse.ArgumentError(None, self.why)


SIM_PROFILE_RENAMED = "--profile is now --sim-profile (the sim's profile; --profile-s is the server's profiler)"


def add_renamed_profile(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The sim's old `--profile NAME`, refused with its new name (issue 38)."""
    parser.add_argument("--profile", action=RenamedOption, why=SIM_PROFILE_RENAMED)

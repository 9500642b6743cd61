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
    from typing import Any

# what argparse's built-in types refuse, in the words the rest of the command line uses
_TYPE_WORDS: dict[object, str] = {int: "a whole number", float: "a number"}


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
    what = _TYPE_WORDS.get(action.type)
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
    near = api.closest(value, choices, aliases=KNOWN_VALUES.get(option_name(action)))
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

    # Any: argparse.Action's own keywords, passed on
    def __init__(self, option_strings: Sequence[str], dest: str, *, why: str, nargs: str | int | None = "?", default: object = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=nargs, default=argparse.SUPPRESS, **kwargs)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        raise argparse.ArgumentError(None, self.why)


SIM_PROFILE_RENAMED = "--profile is now --sim-profile (the sim's profile; --profile-s is the server's profiler)"


def add_renamed_profile(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The sim's old `--profile NAME`, refused with its new name (issue 38)."""
    parser.add_argument("--profile", action=RenamedOption, why=SIM_PROFILE_RENAMED)


# -- other tools' names ------------------------------------------------------------------------
# What SGLang's bench_serving and `vllm bench serve` users type, where redline has the same
# thing under another name. The ones that are the very same are accepted as aliases
# (--request-rate, --num-prompts, --base-url, --random-input-len, --random-output-len,
# --disable-ignore-eos, --metric-percentiles, --save-result, --result-filename,
# --sharegpt-output-len: tui/cli/arguments.py); these are refused, naming ours, ahead of any
# near spelling (`--qps` is not --slo, `--output-file` not --output-len).
ALL_AT_ONCE = ("bench_serving's inf sends every request at once, a closed loop here: give --concurrency N "
               "(bench_serving's --max-concurrency N) and --num-requests to stop, or a rate in requests per second")
KNOWN_ELSEWHERE: dict[str, tuple[str, str]] = {
    # their name: (our option, what it is, in words)
    "--qps": ("--rate", "the open-loop request rate, also spelt --request-rate"),
    "--request-rate-range": ("redline run --search", "several rates: a preset's [ramp] rate = [...] or a knee search"),
    "--output-file": ("--result-filename", "the run's summary written to a file of your choosing"),
    "--output-json": ("--result-filename", "the run's summary written to a file of your choosing"),
    "--result-dir": ("--out", "the session directory (--result-filename names the summary's own copy)"),
    "--dataset-name": ("--dataset", "the prompts: random, sharegpt:PATH, jsonl:PATH or prefix:..."),
    "--dataset-path": ("--dataset", "sharegpt:PATH (a ShareGPT JSON file) or jsonl:PATH"),
    "--host": ("--url", "the server, as http://HOST:PORT"),
    "--port": ("--url", "the server, as http://HOST:PORT"),
    "--backend": ("--api", "chat, completions or generate (SGLang's /generate)"),
    "--random-input": ("--input-len", "the random prompts' length in the server's tokens"),
    "--random-output": ("--output-len", "max_tokens"),
    "--max-num-requests": ("--num-requests", "stop after N requests"),
    "--warmup-requests": ("a preset's [ramp] warmup_s", "each step's warm-up, not measured"),
}


# another tool's names for the values of a choice of ours, by option: ranked above a near spelling
KNOWN_VALUES: dict[str, dict[str, str]] = {
    "--api": {  # bench_serving's --backend and vllm bench serve's --endpoint-type
        "openai": "completions", "openai-chat": "chat", "openai-completions": "completions", "sglang-oai": "completions",
        "sglang-oai-chat": "chat", "sglang": "generate", "sglang-native": "generate", "vllm": "completions",
        "vllm-chat": "chat",
    },
    "--format": {"parq": "parquet", "jsonl": "ndjson"},  # redline export
}


def known_elsewhere(name: str, prog: str, options: Sequence[str]) -> str:
    """`; redline's name for it is --rate: ...` when `name` (underscores read as dashes) is
    another tool's name for one of ours; "" otherwise, and where this command has the option
    under that very name (`redline sweep --port`)."""
    key = name.replace("_", "-")
    if key in options:  # `--num_prompts`: the option itself, with underscores
        return f"; did you mean {key}?"
    hit = KNOWN_ELSEWHERE.get(key)
    if hit is None:
        return ""
    ours, what = hit
    where = f", an option of redline, not of {prog}" if ours.startswith("--") and ours not in options and prog != "redline" else ""
    return f"; redline's name for it is {ours}{where}: {what}"

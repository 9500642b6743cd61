"""redline's command line: the parser and every command (`redline --help`), the checks of
every value before anything starts, the headless runner, `report`, `ctl` and the curves in
the terminal. It never imports Textual (tests/unit/test_architecture.py): the TUI starts from
tui/run_app.py, imported only when one opens."""

from .arguments import build_parser, main

__all__ = ["build_parser", "main"]

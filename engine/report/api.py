"""The session tools' public surface for the UI: what `redline report`, `export`,
`preset-from`, the gates and the saturation curves use (engine/api.py has the rest).

Like engine/api.py, every name is loaded on first use and looked up in its home module on
every access: importing this costs nothing, and `report` does not pay for the HTML page's
plotly.js or the export's polars until it writes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..api import resolve, table

if TYPE_CHECKING:
    from ..rules.step_text import fmt_ms, format_break_line, format_step_line, format_step_table
    from ..session import SUMMARY, SessionError, check_session_dir
    from ..session.rows import dumps_doc
    from ..session.writer import loss_line, recorded_loss, write_text_atomic
    from .comparable import same_workload, workload_line, workload_texts, workload_warning, workload_warning_first
    from .compare import (
        KINDS,
        Row,
        SessionSummary,
        align_by_load,
        any_power,
        axis_title,
        joules_per_token,
        knee_load,
        knee_step,
        load_session,
        load_sessions,
        session_from_steps,
        tokens_per_watt,
    )
    from .export import dropped_lines, dropped_text, export_session
    from .gate import (
        Condition,
        GateError,
        GateSession,
        compare as gate_compare,
        evaluate,
        failure_line,
        format_outcomes,
        gate_dict,
        has_relative,
        junit_xml,
        parse_gate,
        passed,
    )
    from .html import HTML_MISSING, HtmlUnavailable, collect, html_available, write_html
    from .preset_from import preset_from_session, steps_text
    from .session_text import load_summary, report_session

# home module (relative to this package, redline.engine.report) -> the names it gives;
# "NAME=ATTR" gives ATTR as NAME
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".gate": (
        "Condition", "GateError", "GateSession", "gate_compare=compare", "evaluate", "failure_line", "format_outcomes", "gate_dict",
        "has_relative", "junit_xml", "parse_gate", "passed",
    ),
    ".preset_from": ("preset_from_session", "steps_text"),
    "..rules.step_text": ("fmt_ms", "format_break_line", "format_step_line", "format_step_table"),
    "..session": ("SUMMARY", "SessionError", "check_session_dir"),
    ".export": ("dropped_lines", "dropped_text", "export_session"),
    ".comparable": ("same_workload", "workload_line", "workload_texts", "workload_warning", "workload_warning_first"),
    ".session_text": ("load_summary", "report_session"),
    ".compare": (
        "KINDS", "Row", "SessionSummary", "align_by_load", "any_power", "axis_title", "joules_per_token", "knee_load",
        "knee_step", "load_session", "load_sessions", "session_from_steps", "tokens_per_watt",
    ),
    ".html": ("HTML_MISSING", "HtmlUnavailable", "collect", "html_available", "write_html"),
    "..session.rows": ("dumps_doc",),
    "..session.writer": ("loss_line", "recorded_loss", "write_text_atomic"),
}

_WHERE = table(_EXPORTS)
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    return resolve(_WHERE, __name__, __package__, name)


def __dir__() -> list[str]:
    return list(__all__)

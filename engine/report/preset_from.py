"""A recorded session as a preset that replays it (`redline preset-from`).

The session's concurrency timeline becomes a replay-mode ramp: `[ramp].concurrency` plus
`durations_s`, no warm-up, no stop rules (docs/presets.md, replay mode). A C=1 probe that
ended the session (a preset's `[after].probe_s`, or `a` as the last thing done) is replayed as
one, `[after].probe_s`: it aborts what is in flight as the original did, where a C=1 step would
let the load before it drain into its figures. A probe inside the timeline (`a`, then `r`) is
a C=1 step marked in `[ramp].probes`: it aborts what is in flight first, as the original did.
"""

from __future__ import annotations

import json
import math
import os
from typing import NamedTuple

from ..preset.fields import Ctx
from ..preset.parse import parse_toml
from ..preset.ramp_values import STEP_WORKLOAD_KEYS
from ..preset.spec import (
    MAX_CONCURRENCY,
    MAX_SECONDS,
    MAX_STEPS,
    AfterSpec,
    Preset,
    PresetError,
    RampSpec,
    StopSpec,
    TargetSpec,
    WorkloadSpec,
)
from ..preset.toml_out import preset_to_toml

REPLAY_HEADER = "Replays a recorded session's concurrency timeline (redline preset-from)."


class SessionReplay(NamedTuple):
    toml: str  # the preset, as TOML text
    steps: int  # steps of its [ramp] (the count its description gives), the probe apart
    seconds: float  # how long it replays: its steps, then its probe
    probe_s: float = 0.0  # the session's closing C=1 probe, replayed as [after].probe_s
    left_out_s: float = 0.0  # paused or stopped time of the session: not replayed
    inner_probes: int = 0  # probes inside the timeline: C=1 steps that abort first ([ramp].probes)


def timeline_preset(
    name: str,
    target_url: str | None,
    workload: WorkloadSpec,
    concurrency_timeline: list[tuple],
    *,
    end_s: float | None = None,
    description: str | None = None,
    arrival: str = "poisson",
    probe_s: float = 0.0,
    note: str = "",
) -> str:
    """A preset (TOML text) that replays a recorded session's concurrency timeline.

    `concurrency_timeline` is a list of (t_s, C) change points: at t_s seconds (any origin)
    the concurrency became C. Each point lasts until the next; the last lasts until `end_s`,
    or, when end_s is None, the last point only marks the end (its C is ignored: a session's
    timeline naturally ends with (t_end, 0)). Periods at C <= 0 (paused) are left out,
    consecutive equal C merge. The result has [ramp].concurrency + durations_s, no stop
    rules, and a probe only when `probe_s` > 0 (`[after].probe_s`: after the steps, an abort
    and C=1). Raises PresetError for a timeline with nothing to replay or a bad URL. `note`:
    more comment lines at the top (what the replay could not carry).

    A point may carry more entries, (t_s, C, rate, workload, probe): a rate (req/s) makes that
    period an open-loop step at that rate (C its in-flight cap), a workload dict (the live
    workload form's keys) the workload it ran, and probe=True a C=1 probe (`a`: what was in
    flight aborted first); the preset then has [ramp].rate, [ramp].workloads and
    [ramp].probes beside concurrency.
    """
    pts = sorted(
        ((float(p[0]), int(p[1]), _rate(p), _wl(p), bool(p[4]) if len(p) > 4 else False) for p in concurrency_timeline),
        key=lambda p: p[0],
    )
    if any(not math.isfinite(p[0]) for p in pts):
        raise PresetError("timeline: times must be finite numbers of seconds")
    if end_s is not None:
        pts.append((float(end_s), 0, None, None, False))
    raw: list[tuple[int, float | None, dict | None, bool, float]] = []
    for (t0, c, r, w, probe), (t1, *_) in zip(pts, pts[1:], strict=False):
        d = t1 - t0
        if c <= 0 or d <= 0:
            continue
        probe = probe and c == 1 and not r  # a probe holds C=1 in closed loop
        key = (min(c, MAX_CONCURRENCY), r, w, probe)
        if raw and raw[-1][:4] == key and not probe:
            raw[-1] = (*key, raw[-1][4] + d)
        else:
            raw.append((*key, d))
    raw = [(c, r, w, p, min(round(d, 3), MAX_SECONDS)) for c, r, w, p, d in raw if round(d, 3) > 0]
    segs = [(c, d) for c, _, _, _, d in raw]
    if not segs:
        raise PresetError("timeline: nothing to replay (no period with concurrency >= 1)")
    if len(segs) > MAX_STEPS:
        raise PresetError(f"timeline: {len(segs)} steps, at most {MAX_STEPS} can be replayed")
    url = None if target_url is None else Ctx("timeline").url("target url", target_url)
    total = sum(d for _, d in segs)
    preset = Preset(
        name=name,
        path=None,
        target=TargetSpec(url=url),
        workload=workload,
        ramp=RampSpec(
            concurrency=tuple(c for c, _ in segs),
            warmup_s=0.0,
            durations_s=tuple(float(d) for _, d in segs),
            rate=tuple(r or 0.0 for _, r, _, _, _ in raw) if any(r for _, r, _, _, _ in raw) else None,
            arrival=arrival,
            workloads=tuple(w for _, _, w, _, _ in raw) if any(w for _, _, w, _, _ in raw) else None,
            probes=tuple(p for _, _, _, p, _ in raw) if any(p for _, _, _, p, _ in raw) else None,
        ),
        stop=StopSpec(),
        after=AfterSpec(probe_s=probe_s),
        description=description
        if description is not None
        else f"replay of a recorded session: {steps_text(len(segs), total, probe_s)}",
    )
    text = preset_to_toml(preset, header=REPLAY_HEADER + (f"\n{note}" if note else ""))
    # Prove it reads back; raises PresetError (e.g. a dataset file that is gone).
    parse_toml(text, f"<timeline {name}>")
    return text


def steps_text(steps: int, seconds: float, probe_s: float = 0.0) -> str:
    """`3 steps, 120 s` (`, then a 30 s C=1 probe`): how preset-from and the preset's
    description both count a replay."""
    text = f"{steps} step{'' if steps == 1 else 's'}, {seconds:.0f} s"
    return text + (f", then a {probe_s:.0f} s C=1 probe" if probe_s > 0 else "")


def _rate(p: tuple) -> float | None:
    r = p[2] if len(p) > 2 else None
    return float(r) if r else None


def _wl(p: tuple) -> dict | None:
    w = p[3] if len(p) > 3 else None
    return {k: w[k] for k in STEP_WORKLOAD_KEYS if k in w} or None if isinstance(w, dict) else None


def _shaping(wl: dict) -> tuple[dict, str]:
    """meta.json's request shaping as WorkloadSpec keys, checked as a preset's are, and a note
    of what a replay cannot carry: a credential header's value (meta.json holds *** for it) and
    an extra body's nulls (TOML has none: a null key is left out, the server's default)."""
    from ..workload.request_shape import (
        MASK,
        check_extra_body,
        check_headers,
        check_range_ratio,
        extra_body_text,
        secret_header,
    )

    out: dict = {}
    notes = []
    headers = wl.get("headers") or {}
    if isinstance(headers, dict) and headers:
        kept = {n: v for n, v in headers.items() if not (secret_header(n) and v == MASK)}
        left = [n for n in headers if n not in kept]
        if left:
            notes.append(f"Left out: header {', '.join(left)} (a credential, never recorded); "
                         "add it with -H or [workload].headers.")
        out["headers"] = check_headers(kept, "meta.json workload.headers")
    extra = wl.get("extra_body") or {}
    if isinstance(extra, dict) and extra:
        kept_body = _no_nulls(extra)
        if kept_body != extra:
            notes.append("Left out: extra_body keys set to null (TOML has no null; the server's default applies).")
        out["extra_body"] = extra_body_text(check_extra_body(kept_body, "meta.json workload.extra_body"))
    if wl.get("ignore_eos") is False:
        out["ignore_eos"] = False
    if wl.get("random_range_ratio"):
        out["random_range_ratio"] = check_range_ratio(wl["random_range_ratio"], "meta.json workload.random_range_ratio")
    if isinstance(wl.get("seed"), int) and not isinstance(wl.get("seed"), bool) and wl["seed"] >= 0:
        out["seed"] = wl["seed"]
    return out, "\n".join(notes)


def _no_nulls(o: object) -> object:
    if isinstance(o, dict):
        return {k: _no_nulls(v) for k, v in o.items() if v is not None}
    if isinstance(o, list):
        return [_no_nulls(v) for v in o if v is not None]
    return o


def preset_from_session(session_dir: str | os.PathLike, name: str) -> SessionReplay:
    """The replay preset of a recorded session, named `name`: its target (none when it ran
    against the built-in sim, whose port was ephemeral: the replay starts a new sim), its
    workload and its concurrency timeline. Raises PresetError (one line naming the session)."""
    # the session reader (polars on first use) is only needed here
    from ..session import SessionError, check_session_dir
    from ..session.paths import META
    from .export import load_segments

    try:
        d = check_session_dir(session_dir)
        meta = json.loads((d / META).read_text())
        segs = load_segments(d)
    except (SessionError, OSError, ValueError) as exc:
        raise PresetError(str(exc)) from None
    meta = meta if isinstance(meta, dict) else {}
    if any(mode == "trace" and c > 0 for _, c, mode, _, _ in segs):
        raise PresetError(f"{d}: a trace replay session: replay the trace itself ([workload].trace with [ramp].speed)")
    # the closing probe (idle time after it aside) is replayed as a probe: [after].probe_s
    last = max((i for i, s in enumerate(segs) if s[1] > 0), default=-1)
    probe_s = 0.0
    if last > 0 and segs[last][2] == "probe":
        probe_s = max(1.0, round(segs[last][0]))
        segs = segs[:last]
    points, t = [], 0.0
    for dur, c, mode, rate, wl in segs:
        points.append((t, c, rate if mode == "rate" else None, wl, mode == "probe"))
        t += dur
    wl = meta.get("workload") or {}
    tgt = meta.get("target") or {}
    try:
        shaping, note = _shaping(wl)
        spec = WorkloadSpec(
            api=tgt.get("api") or "chat",
            dataset=wl.get("dataset") or "random",
            input_len=int(wl.get("input_len") or 32),
            output_len=int(wl.get("output_len") or 128),
            **shaping,
        )
        url = None if "redline_sim" in (meta.get("server_info") or {}) else tgt.get("url")
        text = timeline_preset(name, url, spec, points, end_s=t, arrival=str(meta.get("arrival") or "poisson"),
                               probe_s=probe_s, note=note)
        preset = parse_toml(text, f"<replay {name}>")
    except (PresetError, AttributeError, TypeError, ValueError) as exc:
        raise PresetError(f"{d}: {exc}") from None
    steps = len(preset.ramp.concurrency)
    replayed = sum(preset.ramp.durations_s or ())
    inner = sum(1 for _, c, mode, _, _ in segs if mode == "probe" and c > 0)
    return SessionReplay(text, steps, replayed + probe_s, probe_s, max(0.0, t - replayed), inner)

"""A recorded session as a preset that replays it (`redline preset-from`).

The session's concurrency timeline becomes a replay-mode ramp: `[ramp].concurrency` plus
`durations_s`, no warm-up, no stop rules, no probe (README, "Presets", replay mode).
"""

from __future__ import annotations

import json
import math
import os
from typing import NamedTuple

from .fields import Ctx
from .parse import parse_toml
from .spec import (
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
from .toml_out import preset_to_toml

REPLAY_HEADER = "Replays a recorded session's concurrency timeline (redline preset-from)."


class SessionReplay(NamedTuple):
    toml: str  # the preset, as TOML text
    segments: int  # (duration, C) segments of the session's timeline, paused ones included
    seconds: float  # the timeline's length


def timeline_preset(
    name: str,
    target_url: str | None,
    workload: WorkloadSpec,
    concurrency_timeline: list[tuple[float, int]],
    *,
    end_s: float | None = None,
    description: str | None = None,
) -> str:
    """A preset (TOML text) that replays a recorded session's concurrency timeline.

    `concurrency_timeline` is a list of (t_s, C) change points: at t_s seconds (any origin)
    the concurrency became C. Each point lasts until the next; the last lasts until `end_s`,
    or, when end_s is None, the last point only marks the end (its C is ignored: a session's
    timeline naturally ends with (t_end, 0)). Periods at C <= 0 (paused) are left out,
    consecutive equal C merge. The result has [ramp].concurrency + durations_s, no stop
    rules and no probe. Raises PresetError for a timeline with nothing to replay or a bad URL.
    """
    pts = sorted(
        ((float(t), int(c)) for t, c in concurrency_timeline), key=lambda p: p[0]
    )
    if any(not math.isfinite(t) for t, _ in pts):
        raise PresetError("timeline: times must be finite numbers of seconds")
    if end_s is not None:
        pts.append((float(end_s), 0))
    segs: list[tuple[int, float]] = []
    for (t0, c), (t1, _) in zip(pts, pts[1:]):
        d = t1 - t0
        if c <= 0 or d <= 0:
            continue
        c = min(c, MAX_CONCURRENCY)
        if segs and segs[-1][0] == c:
            segs[-1] = (c, segs[-1][1] + d)
        else:
            segs.append((c, d))
    segs = [(c, round(d, 3)) for c, d in segs]
    segs = [(c, min(d, MAX_SECONDS)) for c, d in segs if d > 0]
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
        ),
        stop=StopSpec(),
        after=AfterSpec(probe_s=0.0),
        description=description
        if description is not None
        else f"replay of a recorded session: {len(segs)} steps, {total:.0f} s",
    )
    text = preset_to_toml(preset, header=REPLAY_HEADER)
    # Prove it reads back; raises PresetError (e.g. a dataset file that is gone).
    parse_toml(text, f"<timeline {name}>")
    return text


def preset_from_session(session_dir: str | os.PathLike, name: str) -> SessionReplay:
    """The replay preset of a recorded session, named `name`: its target (none when it ran
    against the built-in sim, whose port was ephemeral: the replay starts a new sim), its
    workload and its concurrency timeline. Raises PresetError (one line naming the session)."""
    # the session reader (polars on first use) is only needed here
    from redline.engine.session import SessionError, check_session_dir, concurrency_timeline
    from redline.engine.session.paths import META

    try:
        d = check_session_dir(session_dir)
        meta = json.loads((d / META).read_text())
        segs = concurrency_timeline(d)
    except (SessionError, OSError, ValueError) as exc:
        raise PresetError(str(exc)) from None
    meta = meta if isinstance(meta, dict) else {}
    points, t = [], 0.0
    for dur, c in segs:
        points.append((t, c))
        t += dur
    wl = meta.get("workload") or {}
    tgt = meta.get("target") or {}
    try:
        spec = WorkloadSpec(
            api=tgt.get("api") or "chat",
            dataset=wl.get("dataset") or "random",
            input_len=int(wl.get("input_len") or 32),
            output_len=int(wl.get("output_len") or 128),
        )
        url = None if "redline_sim" in (meta.get("server_info") or {}) else tgt.get("url")
        text = timeline_preset(name, url, spec, points, end_s=t)
    except (PresetError, AttributeError, TypeError, ValueError) as exc:
        raise PresetError(f"{d}: {exc}") from None
    return SessionReplay(text, len(segs), t)

"""The shape of the house (issue 22): the UI reaches the engine through a small public surface,
and no module imports its way back round to itself.

Both are read from the source with `ast` (nothing is imported to find the edges), from wherever
the package is installed (a checkout or site-packages). An import counts wherever it is
written: at the top of a module, under `if TYPE_CHECKING:`, or inside a function (a lazy
import is still a dependency, and a structure tool draws it).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ("redline.engine", "redline.tui", "redline.presets")
MAX_ENGINE_MODULES_IN_TUI = 4
# The UI's doors into the engine (engine/api.py, engine/report/api.py).
FACADES = ("redline.engine.api", "redline.engine.report.api")


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> source file."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        assert spec is not None and spec.submodule_search_locations, pkg
        root = Path(list(spec.submodule_search_locations)[0])
        for f in root.rglob("*.py"):
            parts = f.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((pkg, *parts))] = f
    return out


MODULES = _modules()


def imported_modules(name: str, path: Path) -> set[str]:
    """The package's modules that module `name` imports, anywhere in its source. `from X import
    y` is X.y when that is a module, else X; relative imports are resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # `import redline.engine.x.y` where only x is ours, etc.
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(name, path) for name, path in MODULES.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The graph's circles: each strongly connected set of two or more modules (Tarjan,
    iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def engine_modules_used_by_tui() -> dict[str, set[str]]:
    """engine module -> the tui modules that import it."""
    used: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name.startswith("redline.tui"):
            for t in imported_modules(name, path):
                if t == "redline.engine" or t.startswith("redline.engine."):
                    used.setdefault(t, set()).add(name)
    return used


def test_the_tui_reaches_the_engine_through_at_most_four_modules():
    used = engine_modules_used_by_tui()
    where = "\n".join(f"  {m}: {', '.join(sorted(by))}" for m, by in sorted(used.items()))
    assert len(used) <= MAX_ENGINE_MODULES_IN_TUI, f"tui/ imports {len(used)} engine modules:\n{where}"
    assert set(used) <= set(FACADES), f"tui/ goes round the public surface ({', '.join(FACADES)}):\n{where}"


def test_the_counter_sees_absolute_relative_type_only_and_lazy_imports(tmp_path, monkeypatch):
    src = tmp_path / "probe.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "import redline.engine.fmt\n"
        "from redline.engine.core import commands\n"
        "from ..engine.api import Snapshot\n"
        "from ..engine.core import snapshot\n"
        "if TYPE_CHECKING:\n"
        "    from ..engine.core.engine import Engine\n"
        "def f():\n"
        "    from redline.engine.sim.serve import spawn_sim_process\n",
        encoding="utf-8",
    )
    monkeypatch.setitem(MODULES, "redline.tui.probe", src)
    assert imported_modules("redline.tui.probe", src) == {
        "redline.engine.fmt", "redline.engine.core.commands", "redline.engine.api", "redline.engine.core.snapshot",
        "redline.engine.core.engine", "redline.engine.sim.serve",
    }


# -- the layers (docs/architecture.md) -------------------------------------------------------
# engine/'s packages, lowest first: a module imports only from its own package and from
# packages on lower layers (sim/ apart: it imports nothing of the engine, and only the run,
# report and facade layers may import it). The root's leaf helpers are layer 0; its facades and
# the engine host the top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "constants", "fmt", "heap", "loop", "text", "child"),  # leaf helpers ("": engine/__init__, __version__)
    ("telemetry", "workload"),  # GPUs, server /metrics and what the server says; prompts, datasets, arrivals, traces
    ("measure",),  # records, percentiles, live metrics, steps, SLO, timeline
    ("rules", "session"),  # knee, steadiness, stop rules, guard, search, gate conditions; the session writer
    ("client",),  # transport, SSE, API bodies and decoders, one request, target detection
    ("load",),  # controller, sender, the one load holder, worker pool, Ray pool (its port: load/port.py)
    ("preset",),  # preset spec and parsing
    ("core",),  # the Engine coordinator and its parts: commands, config, snapshot, measurements, targets
    ("run", "report"),  # what `redline run` runs: the preset runner, server operations, estimates; what reads a session
    ("control",),  # control API, Prometheus
    ("sweep",),  # a preset against each server configuration: launch, wait, stop, compare
    ("host",),  # the engine host: the engine in its own process or thread
    ("api",),  # the facade: what tui/ may import (with the session tools' facade)
    ("report.api",),  # the session tools' facade (it shares api.py's lazy lookup)
)
SIM_USERS = ("run", "report", "api", "host", "report.api")
# beyond the order: a reader of sessions never reaches the running engine's parts
FORBIDDEN = {"report": ("core", "load", "client"), "measure": ("client", "load", "core", "rules")}


def layer_of(module: str) -> str | None:
    """The layer key of an engine module ("measure", "api", "report.api", "" for a root helper
    or engine/__init__), or None outside the engine."""
    if module == "redline.engine":
        return ""
    if not module.startswith("redline.engine."):
        return None
    rest = module[len("redline.engine."):].split(".")
    if ".".join(rest[:2]) == "report.api":
        return "report.api"
    head = rest[0]
    if (ROOT_ENGINE / head).is_dir():
        return head
    return head  # a root module: constants, fmt, api, host, ...


ROOT_ENGINE = Path(list(importlib.util.find_spec("redline.engine").submodule_search_locations)[0])
_RANK = {key: i for i, keys in enumerate(LAYERS) for key in keys}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for a, targets in graph.items():
        la = layer_of(a)
        if la is None:
            continue
        for b in targets:
            lb = layer_of(b)
            if lb is None or la == lb:
                continue
            if lb == "sim" or la == "sim":
                if la == "sim" or la not in SIM_USERS:
                    out.append(f"{a} -> {b} (sim/ stands apart: only {', '.join(SIM_USERS)} import it)")
                continue
            if la not in _RANK or lb not in _RANK:
                out.append(f"{a} -> {b} (a package with no layer: add it to LAYERS)")
                continue
            if lb in FORBIDDEN.get(la, ()):
                out.append(f"{a} -> {b} ({la}/ never imports {lb}/)")
            elif _RANK[lb] >= _RANK[la]:
                out.append(f"{a} -> {b} ({la} on layer {_RANK[la]} imports {lb} on layer {_RANK[lb]})")
    return sorted(out)


def test_every_import_goes_down_the_layers():
    bad = layer_violations(import_graph())
    assert not bad, "imports against the layers (docs/architecture.md):\n  " + "\n  ".join(bad)


def test_the_layer_check_fails_on_an_import_up():
    g = {"redline.engine.measure.records": {"redline.engine.core.engine"}, "redline.engine.load.sender": {"redline.engine.client.http"},
         "redline.engine.report.compare": {"redline.engine.load.holder"}, "redline.engine.sim.http_app": {"redline.engine.fmt"}}
    bad = layer_violations(g)
    assert len(bad) == 3 and any("measure.records -> redline.engine.core.engine" in b for b in bad)
    assert any("report/ never imports load/" in b for b in bad) and any("sim/ stands apart" in b for b in bad)


def test_the_engine_root_holds_the_facades_the_host_and_leaf_helpers_only():
    root = sorted(p.stem for p in ROOT_ENGINE.glob("*.py"))
    assert len(root) <= 10, root
    assert set(root) <= {"__init__", "api", "host", "constants", "fmt", "heap", "loop", "text", "child"}, root


def test_the_command_line_never_imports_textual():
    cli = [n for n in MODULES if n.startswith("redline.tui.cli")]
    assert cli, "tui/cli/ is the command line"
    for name in cli:
        src = MODULES[name].read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(m == "textual" or m.startswith("textual.") for m in mods), name


# -- tui/: the command line launches the screen, never the reverse ------------------------------
CLI = "redline.tui.cli"
# `python -m redline.tui` is `redline`: the package's entry point runs the command line as the
# console script does (pyproject.toml [project.scripts]); it is no part of the screen
TUI_ENTRY_POINTS = ("redline.tui.__main__",)


def screen_imports_of_the_command_line(graph: dict[str, set[str]]) -> list[str]:
    """Each import of tui/cli/ by a module of tui/ outside it (type-only and lazy ones too)."""
    out = []
    for a, targets in graph.items():
        if not a.startswith("redline.tui") or a == CLI or a.startswith(CLI + ".") or a in TUI_ENTRY_POINTS:
            continue
        out += [f"{a} -> {b}" for b in targets if b == CLI or b.startswith(CLI + ".")]
    return sorted(out)


def test_the_screen_never_imports_the_command_line():
    """tui/cli/ starts the screen (tui/run_app.py, tui/sweep_view.py); what both need lives
    outside it: the exit codes and the session's exit line (tui/exits.py), the built-in sim
    (tui/builtin_sim.py), the curves both draw (tui/plots.py)."""
    bad = screen_imports_of_the_command_line(import_graph())
    assert not bad, "the screen imports the command line:\n  " + "\n  ".join(bad)


def test_the_one_way_check_fails_on_an_import_back():
    g = {"redline.tui.run_app": {"redline.tui.cli.launch", "redline.tui.exits"}, "redline.tui.cli.handlers": {"redline.tui.run_app"},
         "redline.tui.widgets.curve_view": {"redline.tui.cli"}, "redline.tui.__main__": {"redline.tui.cli.arguments"}}
    assert screen_imports_of_the_command_line(g) == ["redline.tui.run_app -> redline.tui.cli.launch",
                                                     "redline.tui.widgets.curve_view -> redline.tui.cli"]


def private_names_imported(name: str, path: Path) -> list[str]:
    """`from X import _y` of one of the package's modules, and `m._y` of a module `m` it
    imported: a private name used outside the module that defines it (dunders apart)."""
    def private(n: str) -> bool:
        return n.startswith("_") and not (n.startswith("__") and n.endswith("__"))

    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules_as: set[str] = set()  # local names bound to one of the package's modules
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            if not base.startswith("redline"):
                continue
            for a in node.names:
                if f"{base}.{a.name}" in MODULES:
                    modules_as.add(a.asname or a.name)
                elif private(a.name):
                    out.append(f"{name}:{node.lineno} imports {base}.{a.name}")
        elif isinstance(node, ast.Import):
            modules_as.update(a.asname for a in node.names if a.asname and a.name in MODULES)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules_as
                and private(node.attr)):
            out.append(f"{name}:{node.lineno} reads {node.value.id}.{node.attr}")
    return sorted(out)


def test_no_private_name_crosses_a_module_in_the_tui():
    bad = [hit for name, path in sorted(MODULES.items()) if name.startswith("redline.tui")
           for hit in private_names_imported(name, path)]
    assert not bad, "private names used outside their module:\n  " + "\n  ".join(bad)


def test_the_private_name_check_sees_imports_and_module_attributes(tmp_path, monkeypatch):
    src = tmp_path / "probe.py"
    src.write_text(
        "from .cli.headless import _against, run_headless\n"
        "from .cli import terminal\n"
        "from ..engine import api\n"
        "import redline.tui.cli.launch as launch\n"
        "from typing import _GenericAlias\n"  # not ours
        "def f(x):\n"
        "    terminal._use_color(); api.__all__; launch._x; x._private\n",
        encoding="utf-8",
    )
    monkeypatch.setitem(MODULES, "redline.tui.probe", src)
    assert private_names_imported("redline.tui.probe", src) == [
        "redline.tui.probe:1 imports redline.tui.cli.headless._against", "redline.tui.probe:7 reads launch._x",
        "redline.tui.probe:7 reads terminal._use_color"]


def test_the_package_has_no_import_circle():
    """Type-only and lazy imports included: the engine's parts in core/ take what they need of it as Protocols,
    the load reaches it through its port (engine/load/port.py), the sim's operations see its
    service as a Protocol."""
    circles = strongly_connected(import_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)


def test_the_circle_finder_finds_a_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(g) == [{"a", "b", "c"}]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def _type_block_names(facade: str) -> dict[str, tuple[str, str | None]]:
    """name -> (absolute home module, attribute in it; None: the module itself) of each
    `if TYPE_CHECKING:` import in a facade."""
    package = facade.rpartition(".")[0]
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(MODULES[facade].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.unparse(imp)
                home = importlib.util.resolve_name("." * imp.level + (imp.module or ""), package)
                for a in imp.names:
                    if f"{home}.{a.name}" in MODULES:  # `from . import commands`: the module itself
                        out[a.asname or a.name] = (f"{home}.{a.name}", None)
                    else:
                        out[a.asname or a.name] = (home, a.name)
    return out


@pytest.mark.parametrize("facade", FACADES)
def test_a_facade_names_what_it_gives_for_type_checkers_too(facade):
    """The `if TYPE_CHECKING:` block (what type checkers and structure tools read) and the
    table the facade resolves names from say the same thing, and every name resolves (a
    name that moved inside the engine fails here, not on an operator's screen)."""
    import importlib

    mod = importlib.import_module(facade)
    package = facade.rpartition(".")[0]
    block = _type_block_names(facade)
    table = {name: (importlib.util.resolve_name(home, package), attr) for name, (home, attr) in mod._WHERE.items()}
    assert block == table, sorted(set(block.items()) ^ set(table.items()))
    for name in table:
        assert getattr(mod, name) is not None, name
    assert set(mod.__all__) >= set(table)
    with pytest.raises(AttributeError):
        _ = mod.no_such_name


def _fresh_modules(code: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


HEAVY = ("httpx", "polars", "textual", "aiohttp", "plotly", "psutil", "redline.engine.core.engine", "redline.engine.host",
         "redline.engine.preset")


def test_the_facades_cost_nothing_to_import():
    loaded = _fresh_modules("import redline.engine.api, redline.engine.report.api")
    assert not [m for m in HEAVY if m in loaded]


def test_help_imports_only_what_it_prints():
    """`redline --help` (issue 26: under 0.1 s): no HTTP client, no dataframes, no Textual, no
    engine core, no presets."""
    loaded = _fresh_modules("from redline.tui import cli\ncli.build_parser().format_help()")
    assert not [m for m in HEAVY if m in loaded]


def test_the_knee_search_preset_is_built_by_the_engine():
    from redline.engine.api import WorkloadConfig, knee_search_preset
    from redline.tui.preset_run import search_preset

    wl = WorkloadConfig(input_len=300, output_len=70)
    p = knee_search_preset(8, 256, wl)
    assert (p.ramp.search.start, p.ramp.search.max) == (8, 256)
    assert (p.workload.input_len, p.workload.output_len) == (300, 70)
    assert knee_search_preset(300, 256).ramp.search.max == 300  # never below its start

    class Config:
        workload = wl

    assert search_preset(8, 256, Config) == p  # the `k` key asks the engine for it


def test_no_module_waits_with_asyncio_wait_for():
    """asyncio.wait_for (Python 3.10, 3.11) drops a cancel that lands as the awaited thing
    finishes: a request cancelled while connecting waited out its read timeout. Every wait with
    a limit goes through engine/loop.py wait_within (tests/integration/test_transport.py shows the loss)."""
    calls = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                calls.append(f"{name}:{node.lineno}")
    assert calls == [], f"asyncio.wait_for in {calls}: use wait_within (engine/loop.py)"

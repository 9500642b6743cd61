"""redline's engine: load generation, measurement, telemetry and session logging.

Nothing in this package imports textual (tests/integration/test_engine.py test_engine_never_imports_textual proves it).
"""

__version__ = "0.1.0"


def _defer_httpx_cli() -> None:
    """httpx's package import loads its command-line client (`httpx._main`: click, rich and
    pygments, ~230 ms of CPU here) whenever those happen to be installed, as they are beside
    Textual. redline never runs that client, and the engine's own process (and every load
    worker) is a fresh interpreter that would pay for it at each start. So, before anything
    imports httpx, `httpx._main` is a stand-in whose `main()` loads the real one on first
    call: `httpx.main` still works, only later."""
    import sys

    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    from types import ModuleType

    stub = ModuleType("httpx._main", "a stand-in until httpx.main() is called (redline.engine)")

    def main(*args: object, **kwargs: object) -> object:
        if sys.modules.get("httpx._main") is stub:
            del sys.modules["httpx._main"]
        import importlib

        real = importlib.import_module("httpx._main").main
        import httpx

        httpx.main = real
        return real(*args, **kwargs)

    stub.__dict__["main"] = main  # (a module's attributes are its __dict__)
    sys.modules["httpx._main"] = stub


_defer_httpx_cli()

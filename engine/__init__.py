"""redline's engine: load generation, measurement, telemetry and session logging.

Nothing in this package imports textual (tests/test_engine_no_textual.py proves it).
"""

__version__ = "0.1.0"

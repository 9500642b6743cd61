"""Unit tests of engine/telemetry/ (redline.engine.telemetry)."""

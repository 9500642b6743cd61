"""Unit tests of engine/report/ (redline.engine.report)."""

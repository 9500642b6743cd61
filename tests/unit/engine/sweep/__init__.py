"""Unit tests of engine/sweep/ (redline.engine.sweep)."""

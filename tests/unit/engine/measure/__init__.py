"""Unit tests of engine/measure/ (redline.engine.measure)."""

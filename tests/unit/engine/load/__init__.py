"""Unit tests of engine/load/ (redline.engine.load)."""

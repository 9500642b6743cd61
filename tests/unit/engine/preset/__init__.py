"""Unit tests of engine/preset/ (redline.engine.preset)."""

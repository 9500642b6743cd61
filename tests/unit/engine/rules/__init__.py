"""Unit tests of engine/rules/ (redline.engine.rules)."""

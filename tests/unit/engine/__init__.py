"""Unit tests of engine/ (redline.engine)."""

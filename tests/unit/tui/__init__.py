"""Unit tests of tui/ (redline.tui)."""

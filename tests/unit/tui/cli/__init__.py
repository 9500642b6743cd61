"""Unit tests of tui/cli/ (redline.tui.cli)."""

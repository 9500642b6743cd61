"""Unit tests of engine/session/ (redline.engine.session)."""

"""Unit tests of engine/client/ (redline.engine.client)."""

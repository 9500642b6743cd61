"""Unit tests of engine/workload/ (redline.engine.workload)."""

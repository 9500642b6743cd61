"""Tests that need a server: a sim, an HTTP server, a redline process."""

"""The TUI and the CLI as a user drives them (Pilot, `redline ...` processes)."""

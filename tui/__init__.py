"""redline's terminal UI and command line."""

"""redline's widgets, one per module."""

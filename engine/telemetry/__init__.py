"""Telemetry: GPUs (NVML, dcgm-exporter), server internals (/metrics), the client itself."""

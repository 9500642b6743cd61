"""Moved to redline.engine.preset.builtin (import from redline.engine.preset).

Kept only until tui/app.py imports `builtin_dir` from redline.engine.preset; then delete.
"""

from .preset.builtin import BuiltinPreset, builtin_dir, builtin_presets, resolve_preset

__all__ = ["BuiltinPreset", "builtin_dir", "builtin_presets", "resolve_preset"]

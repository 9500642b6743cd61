"""The shipped presets (TOML files beside this one), read with importlib.resources.

`redline.engine.preset.builtin` lists them and resolves a name such as `quick`.
"""

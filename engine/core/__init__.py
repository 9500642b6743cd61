"""engine/core: the Engine coordinator and its parts"""

"""engine/run: what `redline run` runs: a preset's ramp, its steps, a knee search, the C=1 probe, and the server operations they use"""

"""engine/run"""

"""engine/load"""

"""engine/control"""

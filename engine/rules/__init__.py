"""engine/rules"""

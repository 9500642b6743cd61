"""engine/client"""

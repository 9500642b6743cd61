"""engine/drive"""

"""engine/report"""

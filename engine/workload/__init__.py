"""engine/workload"""

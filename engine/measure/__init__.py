"""engine/measure"""

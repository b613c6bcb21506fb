"""Tuning on more than one machine.

ray/   compile tasks and timing actors on a Ray cluster (``executor="ray"``)
"""

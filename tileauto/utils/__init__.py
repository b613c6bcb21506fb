"""Small helpers with no home of their own.

threads.py   background threads that end with their owner
imports.py   heavy imports with the cyclic garbage collector paused
tmp.py       the temp folder this user's processes share, and a worker's own
"""

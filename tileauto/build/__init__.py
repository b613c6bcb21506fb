"""The build stage: compiling configs in parallel, each in a killable worker (or a thread).

builder.py   Builder: the local build stage over a pool of compile workers
preload.py   what a forkserver imports before it forks (TVM's compiler, torch)
"""

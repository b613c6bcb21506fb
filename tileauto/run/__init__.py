"""Checking and timing compiled configs in an isolated run worker.

runner.py    Runner: the caller's side, which owns the run worker and its restarts
worker.py    the run worker (RunWorker, one per process): loads artifacts, validates, times
inputs.py    where inputs come from (captured tensors, supply_prog, generators)
buffers.py   guarded buffers that catch writes past the end
validate.py  comparing outputs with the reference (rtol, atol, mismatched ratio)
timing.py    timers and iteration counts: warmup and timed repetitions
_busy.py     the busy-machine note: a timing whose threads waited for a CPU
"""

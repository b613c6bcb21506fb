"""Worker processes: started, watched and killed with their whole process group.

procs.py          Worker: a killable process (forked, or from the forkserver) that runs jobs
safety.py         the live workers, killed at exit and on SIGTERM; the scratch a SIGTERM removes
pool.py           the compile workers that builds lease, one build at a time each
forkserver.py     the caller's side of the forkserver, which starts workers as forks of itself
_process_tree.py  waiting for a forked worker, killing every descendant of a worker
entry.py          inside a worker: the job loop, and the forkserver itself
pickling.py       cloudpickle for jobs, with the source file of every function kept
"""

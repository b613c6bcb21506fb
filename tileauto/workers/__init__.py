"""Worker processes: started, watched and killed with their whole process group.

procs.py          Worker: a killable process (fork, forkserver or spawn) that runs jobs
pool.py           a pool of workers with per-job time limits, restarted on failure
forkserver.py     a forkserver that starts workers without importing torch and TVM again
_process_tree.py  finding and killing every descendant of a worker
entry.py          the entry point a spawned worker runs
pickling.py       shipping jobs and results between processes (cloudpickle)
"""

"""The tuning run: one session drives injected stages over one problem.

session.py   TuningSession: cache lookup and lock, the search loop, the pick, the save
stages.py    the stage protocols (builder, runner, store, reporter) the session drives
stores.py    DiskStore (the cache entry of one problem) and MemoryStore (tests)
problem.py   TuningProblem: the factory, its arguments, the space and the options
"""

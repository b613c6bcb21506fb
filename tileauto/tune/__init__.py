"""The tuning run: one session drives finished stages over one problem.

session.py   TuningSession: cache lookup and lock, the search loop, the pick, the save
defaults.py  every stage resolved before the run: the problem's own builder, runner, store...
stages.py    the stage protocols the session drives, and their optional capabilities
stores.py    DiskStore (the cache entry of one problem), FleetStore (with Redis), MemoryStore
_winner.py   the winner as a callable kernel: loaded from its artifact, or compiled again
_retime.py   the contenders timed again, interleaved, before the pick
_trials.py   a trial from a build and a run outcome; what it was validated against
_ending.py   what a session says when it ends: stored facts, no winner, never tried
problem.py   TuningProblem: the factory, its arguments, the space and the options
"""

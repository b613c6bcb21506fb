"""What a tuning tells the user: the table, the progress line, the trial log, notes, plots.

reporter.py   the trial table, failure summaries, the JSON-lines trial log, reporters
observer.py   the on_trial callback, given detached and bounded copies of each trial
notes.py      one-line notes besides the report (a cache hit, a wait, a saved folder)
plot.py       a picture of the trials (matplotlib, optional)
"""

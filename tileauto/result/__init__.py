"""What a tuning returns and how it travels.

record.py       AutotuneResult: the best config, its kernel and latency, every trial
summary.py      TuningResult: the cuTile-style view (best, successes, failures)
shipping.py     save_to_disk / load_from_disk of a result folder
_portability.py whether a stored kernel runs here, and compiling it again when not
"""

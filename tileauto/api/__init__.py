"""The public API: ``@autotune`` over ``@jit``, the ``AutoTuner`` builder, and ``tune()``.

Each call is normalized into a :class:`~tileauto.tune.problem.TuningProblem` (no I/O) and
handed, with its stages, to a :class:`~tileauto.tune.session.TuningSession`.

    autotuner.py   the decorator (AutoTuneImpl), the AutoTuner builder and tune()
"""

"""The public API: ``@autotune`` over ``@jit``, the ``AutoTuner`` builder, and ``tune()``.

Each call is normalized into a :class:`~tileauto.tune.problem.TuningProblem` (no I/O) and run by
a session whose every stage :func:`tileauto.tune.defaults.session` resolved.

    decorator.py   @autotune (AutoTuneImpl), its stacked params and constraints, key=[names]
    builder.py     AutoTuner: TileLang's programmatic builder
    tune.py        tune(): one call made into a problem and run; the space it resolves
"""

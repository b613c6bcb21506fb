from tileauto import CompileArgs, MemoryStore, ProfileArgs, Settings, TuningProblem, TuningSession
from tileauto.testing import ScriptedBuilder, ScriptedRunner
from tileauto.tune import defaults


def scale(n, block=32):  # a kernel factory; scripted stages never call it
    raise NotImplementedError


problem = TuningProblem(
    factory=scale,
    args=(4096,),
    kwargs={},
    configs=[{"block": b} for b in (16, 32, 64, 128)],
    compile_args=CompileArgs(),
    profile_args=ProfileArgs(),
    settings=Settings.from_env(),
    verbose=False,
    name="scale",
)
latency_ms = {16: 3.0, 32: 2.0, 64: 1.0}  # block=128 does not compile
store = MemoryStore("scale")
result = TuningSession(
    problem,
    builder=ScriptedBuilder(fails=lambda c: "compile_error" if c["block"] == 128 else None),
    runner=ScriptedRunner(lambda c: latency_ms[c["block"]]),
    store=store,
).run()
assert result.config == {"block": 64}
assert [t.status.value for t in result.trials] == ["ok", "ok", "ok", "compile_error"]

# the problem's own builder and runner: the store answers, so they never start
again = defaults.session(problem, store=store).run()
assert again.cache_hit and again.config == {"block": 64}

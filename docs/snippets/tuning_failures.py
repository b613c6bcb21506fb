import tileauto
import tileauto.language as T


@tileauto.autotune(
    configs=[{"block": 48}, {"block": 96}],
    warmup=2,
    rep=5,
    ref_prog=lambda A: A * 2,
    verbose=False,
)
@tileauto.jit(out_idx=[-1])
def double(n, block=64):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i, j in T.grid(n // block, block):  # forgets the tail when block does not divide n
            B[i * block + j] = A[i * block + j] * T.float32(2)

    return main


try:
    double(1000)  # neither config, nor the default (block=64), divides 1000
except tileauto.NoValidConfigError as err:
    print(err)  # one line per config with its reason, and the path of the full log
    for trial in err.trials:
        print(trial.config, trial.status)
else:
    raise AssertionError("expected NoValidConfigError")

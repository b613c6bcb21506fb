"""The build stage: compiling configs in parallel, each in a killable worker (or a thread).

builder.py   Builder: the local build stage, its slots leased compile workers (or threads)
cached.py    CachedBuilder: any build stage behind the kernel cache (configs compiled before)
driver.py    drive(): the one build loop, over any stage's slots (the Ray builder's too)
job.py       compile_job(): one compile; build_all(): a build's results as a list
preload.py   what a forkserver imports before it forks (TVM's compiler, torch)
"""

"""The disk cache: tuned results under ``autotuner/``, jit kernels under ``kernels/``.

Entries are written to a staging folder, fsynced and renamed into place under a per-key file
lock, with a manifest of sha256 hashes that is checked on every load. A corrupt, partial,
foreign or unsafe entry is a miss (one warning), never a crash and never a wrong kernel. A
fleet's Redis can stand behind it as a second level (``remote.py``).

    walk.py      a value described by everything it reaches (source, closures, data, tensors)
    key.py       keys from those descriptions: digest, versions, fingerprints, arguments
    _installed.py  which installed code a module belongs to (named by version, not walked)
    _memo.py     small JSON memos of a key's slow parts (installed/, sources/)
    args.py      call arguments as in-process keys (the @jit and @autotune memos)
    disk.py      sealing, staging, atomic publish, verification of an entry's folder
    folders.py   private folders: this user's own, nobody else can write or swap them
    locks.py     per-key locks between processes; staging when the cache is read-only
    entry.py     the files of one entry, written and read
    tuning.py    TuningStore: tuned results and per-config measurements
    _checks.py   which checks a measurement passed, and which are at least as strict as which
    kernels.py   KernelStore: plain @jit compiles; ConfigKernels: a tuning's, shared by its checks
    catalog.py   the whole cache for the command line: list, verify, clear, export, import
    scratch.py   claimed scratch folders, and the leftovers of killed runs
    hygiene.py   old logs and kernels: pruning at a tuning's start, clearing
    priors.py    a search's prior: the trials of a kernel tuned before on other targets
    remote.py    RemoteCache: a fleet's Redis as the second level (records, signed kernels)
    _lease.py    one tuner per key across machines: a lease renewed while tuning
    _signing.py  HMAC-SHA256 of records and kernels shared through Redis

The format is described in ``docs/cache_format.md``. Nothing here imports torch or TVM.
"""

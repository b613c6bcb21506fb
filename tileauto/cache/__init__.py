"""The disk cache: tuned results under ``autotuner/``, jit kernels under ``kernels/``.

Entries are written to a staging folder, fsynced and renamed into place under a per-key file
lock, with a manifest of sha256 hashes that is checked on every load. A corrupt, partial,
foreign or unsafe entry is a miss (one warning), never a crash and never a wrong kernel.
"""

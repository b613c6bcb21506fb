"""RecordedSpace.load: Kernel Tuner cache files and tileauto trial exports, made in the test."""

from __future__ import annotations

import gzip
import json

import pytest

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.search import RecordedSpace
from tileauto.space import ListSpace


def kernel_tuner_file(tmp_path, *, gz=False, unterminated=False):
    params = {"block_size_x": [16, 32, 64], "tile": [1, 2], "flag": [0]}
    cache = {}
    times = {
        (16, 1): 3.0,
        (16, 2): 2.0,
        (32, 1): "RuntimeFailedConfig",
        (32, 2): 1.5,
        (64, 1): "CompilationFailedConfig",
        (64, 2): "InvalidConfig",
    }
    for (bx, tile), t in times.items():
        record = {
            "block_size_x": bx,
            "tile": tile,
            "flag": 0,
            "time": t,
            "compile_time": 500.0,
            "benchmark_time": 250.0,
        }
        if t == 1.5:
            record["times"] = [1.4, 1.5, 1.6, 1.5, 1.5]
        cache[f"{bx},{tile},0"] = record
    data = {
        "device_name": "Fake GPU",
        "kernel_name": "fake_kernel",
        "tune_params_keys": ["block_size_x", "tile", "flag"],
        "tune_params": params,
        "objective": "time",
        "cache": cache,
    }
    text = json.dumps(data)
    if unterminated:  # Kernel Tuner closes the object only when tuning ends
        text = text[:-2] + ","
    path = tmp_path / ("space.json.gz" if gz else "space.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


@pytest.mark.parametrize("gz, unterminated", [(False, False), (True, False), (False, True)])
def test_a_kernel_tuner_cache_file(tmp_path, gz, unterminated):
    rec = RecordedSpace.load(kernel_tuner_file(tmp_path, gz=gz, unterminated=unterminated))
    assert len(rec) == 5 and rec.kernel == "fake_kernel" and rec.device == "Fake GPU"
    assert rec.left_out == {"InvalidConfig (broke the kernel's constraints)": 1}
    assert [p.name for p in rec.space.params] == ["block_size_x", "tile", "flag"]
    assert rec.space.config(3) == {"block_size_x": 32, "tile": 2, "flag": 0}
    statuses = [t.status for t in rec.trials]
    assert statuses == [
        TrialStatus.OK,
        TrialStatus.OK,
        TrialStatus.RUN_ERROR,
        TrialStatus.OK,
        TrialStatus.COMPILE_ERROR,
    ]
    assert rec.optimum_ms == 1.5 and rec.failed == 2 and rec.within(0.5) == 2
    best = rec.trials[3]
    assert best.latency_ms == 1.5 and best.latency.spread_ms > 0 and best.latency.samples == 5
    assert best.compile_s == 0.5 and best.run_s == 0.25
    assert "5 configs (2 failed)" in rec.describe()


def test_a_tileauto_trial_export(tmp_path):
    stats = LatencyStats(2.0, 1.9, 2.1, 1.8, 2.0, 10)
    trials = [
        Trial(0, {"block_M": 32}, TrialStatus.OK, latency=stats, compile_s=1.0, run_s=0.5),
        Trial(1, {"block_M": 64}, TrialStatus.MISMATCH, error="wrong result"),
        Trial(2, {"block_M": 128}, TrialStatus.NOT_RUN, error="not proposed"),
    ]
    records = [{**t.to_json(), "latency_ms": t.latency_ms} for t in trials]
    records.append(
        {
            "index": 3,
            "config": {"block_M": 256},
            "status": "ok",
            "latency_ms": 3.0,
            "compile_s": None,
            "run_s": None,
            "error": None,
        }
    )  # no full statistics
    doc = {
        "format": "tileauto-trials/1",
        "kernel": "gemm",
        "key": "abc",
        "device": "cpu",
        "best_index": 0,
        "trials": records,
    }
    path = tmp_path / "trials.json"
    path.write_text(json.dumps(doc))
    rec = RecordedSpace.load(path)
    assert len(rec) == 3 and rec.left_out == {"not run": 1}
    assert [c["block_M"] for c in rec.space] == [32, 64, 256]
    assert rec.trials[0].latency == stats and rec.trials[1].status is TrialStatus.MISMATCH
    assert rec.trials[2].latency_ms == 3.0 and rec.optimum_ms == 2.0
    assert rec.kernel == "gemm" and rec.device == "cpu"
    # a real export holds the device's fingerprint: a short name of it
    cpu = {"kind": "cpu", "mcpu": "znver4", "triple": "x86_64-linux-gnu", "vendor": "amd"}
    gpu = {"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0", "sm_count": 132}
    for device, name in ((cpu, "cpu znver4 amd"), (gpu, "NVIDIA H200")):
        path.write_text(json.dumps({**doc, "device": device}))
        rec = RecordedSpace.load(path)
        assert rec.device == name and rec.describe().startswith(f"gemm on {name}: 3 configs")


def test_another_file_is_refused_with_what_was_found(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="neither a Kernel Tuner cache file"):
        RecordedSpace.load(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        RecordedSpace.load(path)


def test_from_latencies_and_its_checks():
    rec = RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], [2.0, None])
    assert isinstance(rec.space, ListSpace) and rec.optimum_ms == 2.0 and rec.failed == 1
    with pytest.raises(ValueError, match="one trial per config"):
        RecordedSpace(rec.space, rec.trials[:1])
    with pytest.raises(ValueError, match="at least one config that passed"):
        RecordedSpace.from_latencies([{"a": 1}], [None])
    for latencies in ([2.0], [2.0, 1.0, 3.0]):  # too many was an IndexError
        with pytest.raises(ValueError, match=f"2 configs, {len(latencies)} latencies"):
            RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], latencies)


def _kernel_tuner_doc(times, extra=None):
    extra = extra or {}
    cache = {
        f"{x},0": {"x": x, "y": 0, "time": t, **extra.get(x, {})} for x, t in enumerate(times, 1)
    }
    return {
        "tune_params_keys": ["x", "y"],
        "tune_params": {"x": [1, 2, 3], "y": [0]},
        "cache": cache,
    }


def test_a_damaged_file_is_refused_with_its_name(tmp_path):
    whole = gzip.compress(json.dumps(_kernel_tuner_doc([3.0, 2.0, 1.0])).encode())
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"truncated\.json\.gz.*(gzip|truncated|ends)"):
        RecordedSpace.load(truncated)
    latin = tmp_path / "latin.json"
    latin.write_bytes(json.dumps(_kernel_tuner_doc([3.0, 2.0, 1.0])).encode() + b"\xff\xfe")
    with pytest.raises(ValueError, match=r"latin\.json.*UTF-8"):
        RecordedSpace.load(latin)


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"tune_params": {"x": [1]}, "cache": [1, 2]}, "cache"),  # a list, not a dict
        ({"tune_params": [1], "cache": {}}, "tune_params"),
        ({"tune_params": {"x": [1]}, "cache": {"1": {"time": 1.0}}}, r"cache\['1'\]"),  # no x
        ({"tune_params": {"x": [1]}, "cache": {"1": [1, 1.0]}}, r"cache\['1'\]"),
        ({"tune_params": {"x": [1]}, "cache": {"1": {"x": 1, "time": [1]}}}, r"cache\['1'\]"),
        ({"format": "tileauto-trials/1", "trials": {"a": 1}}, "trials"),
        ({"format": "tileauto-trials/1", "trials": [{"config": {"a": 1}}]}, r"trials\[0\]"),
        (
            {"format": "tileauto-trials/1", "trials": [{"config": {"a": 1}, "status": "great"}]},
            r"trials\[0\]",
        ),
        (
            {"format": "tileauto-trials/1", "trials": [{"status": "ok", "config": 3}]},
            r"trials\[0\]",
        ),
        (  # a parameter missing from a record (every config of an export sets them all)
            {
                "format": "tileauto-trials/1",
                "best_config": {"block": 8},
                "trials": [
                    {"config": {"block": 8}, "status": "ok", "latency_ms": 1.0},
                    {"config": {}, "status": "ok"},
                ],
            },
            r"trials\[1\] has no value for the parameters \['block'\]",
        ),
        (  # a misspelt one
            {
                "format": "tileauto-trials/1",
                "trials": [
                    {"config": {"block": 8}, "status": "not_run"},
                    {"config": {"blok": 64}, "status": "ok"},
                ],
            },
            r"trials\[1\] sets \['blok'\], which are not the export's parameters \['block'\]",
        ),
    ],
)
def test_a_wrong_schema_is_refused_naming_the_file_and_the_record(tmp_path, doc, where):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"odd\.json.*{where}"):
        RecordedSpace.load(path)


@pytest.mark.parametrize("bad", [0.0, -5.0, float("nan"), float("inf"), True])
def test_a_time_that_is_not_a_positive_number_is_refused(tmp_path, bad):
    path = tmp_path / "times.json"
    path.write_text(json.dumps(_kernel_tuner_doc([3.0, bad, 1.0])))
    with pytest.raises(ValueError, match=r"times\.json.*cache\['2,0'\].*time"):
        RecordedSpace.load(path)
    doc = {
        "format": "tileauto-trials/1",
        "trials": [
            {"config": {"a": 1}, "status": "ok", "latency_ms": 1.0},
            {"config": {"a": 2}, "status": "ok", "latency_ms": bad},
        ],
    }
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"times\.json.*trials\[1\].*latency"):
        RecordedSpace.load(path)
    with pytest.raises(ValueError, match="latency"):
        RecordedSpace.from_latencies([{"a": 1}, {"a": 2}], [1.0, bad])


def test_negative_recorded_seconds_and_bad_samples_are_refused(tmp_path):
    path = tmp_path / "seconds.json"
    path.write_text(json.dumps(_kernel_tuner_doc([3.0, 2.0, 1.0], {1: {"compile_time": -1}})))
    with pytest.raises(ValueError, match=r"seconds\.json.*cache\['1,0'\].*compile_time"):
        RecordedSpace.load(path)
    path.write_text(json.dumps(_kernel_tuner_doc([3.0, 2.0, 1.0], {3: {"times": [1, "x"]}})))
    with pytest.raises(ValueError, match=r"seconds\.json.*cache\['3,0'\].*times"):
        RecordedSpace.load(path)


def test_a_gzip_bomb_is_refused_without_decompressing_it_whole(tmp_path, monkeypatch):
    import tracemalloc

    from tileauto.search import recorded

    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 << 20)))  # 64 MiB of spaces, 64 KiB on disk
    monkeypatch.setattr(recorded, "MAX_RECORD_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"bomb\.json\.gz.*more than 1,048,576 bytes"):
            RecordedSpace.load(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    plain = tmp_path / "big.json"
    plain.write_bytes(b" " * (2 << 20))
    with pytest.raises(ValueError, match=r"big\.json.*more than 1,048,576 bytes"):
        RecordedSpace.load(plain)
    with pytest.raises(ValueError, match=r"more than 100 bytes"):
        RecordedSpace.load(kernel_tuner_file(tmp_path), max_bytes=100)

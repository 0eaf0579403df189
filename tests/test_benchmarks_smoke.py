"""The benchmark harness still runs: tiny sizes, every scenario, the JSON keys README documents.

No timing is asserted (docs/architecture.md): figures live in benchmarks/, not in tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import headwater

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"

FIGURES = {
    "S1": {"bare_us_per_chunk", "runner_us_per_chunk", "overhead_us_per_chunk",
           "overhead_us_per_chunk_best"},
    "S2": {"memory_ms_per_turn", "sqlite_ms_per_turn"},
    "S3": {f"{prefix}{key}" for prefix in ("", "interleaved_")
           for key in ("wall_s", "max_in_flight", "peak_rss_mb", "baseline_rss_mb",
                       "ru_maxrss_mb")},
    "S4": {"first_partial_ms", "first_partial_p90_ms", "first_partial_after_gc_ms",
           "first_partial_sqlite_ms"},
    "A1": {f"{prefix}{key}" for prefix in ("", "one_write_")
           for key in ("floor_us_per_chunk", "adapter_us_per_chunk", "ratio_to_floor")},
    "A2": {"us_per_kib_small", "us_per_kib_large", "cost_ratio_4x_bytes"},
    "A3": {"close_seen_ms", "httpx_close_seen_ms", "idle_timeout_overrun_ms",
           "total_deadline_overrun_ms", "retry_after_1_wait_s"},
    "W1": {"append_p50_ms", "append_p99_ms", "turn_p50_ms", "turn_p99_ms", "lock_hold_p50_ms",
           "lock_hold_p99_ms", "appends_per_transaction", "appends_per_s", "errors",
           "get_session_long_ms", "get_session_long_cold_ms"},
    "S5": {f"{store}_{key}" for store in ("memory", "sqlite")
           for key in ("turn1_ms", "turn200_ms", "ratio")},
    "H1": {"loop_stall_ms", "getaddrinfo_ms", "connections_per_20_calls"},
    "M1": {"memory_ms_per_turn", "sqlite_ms_per_turn"},
    "P1": {"in_process_ms_per_turn", "mcp_ms_per_turn", "overhead_ms_per_call",
           "overhead_cpu_ms_per_call", "sdk_call_ms", "headwater_ms_per_call",
           "bare_overhead_ms_per_call", "cancel_seen_ms", "crash_error_ms"},
}


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    sys.path.insert(0, str(HARNESS.parent))  # run.py imports adapters.py beside it
    spec = importlib.util.spec_from_file_location("headwater_benchmarks", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # S3 spawns the harness in child processes
def test_every_scenario_reports_its_figures(harness: ModuleType) -> None:
    report = harness.collect(list(FIGURES), harness.SMALL, repeat=1)

    assert set(report) >= {"date", "commit", "python", "repeat", "sizes", "scenarios"}
    assert set(report["scenarios"]) == set(FIGURES)
    for name, keys in FIGURES.items():
        result = report["scenarios"][name]
        assert set(result["median"]) == keys, name
        assert [set(run) for run in result["runs"]] == [keys], name
        assert all(isinstance(v, float) for v in result["median"].values()), name
    s3 = report["scenarios"]["S3"]["median"]
    assert s3["interleaved_max_in_flight"] == harness.SMALL.s3_sessions  # really concurrent
    json.dumps(report)  # the report is printable as JSON


def test_main_prints_one_json_object_and_a_table(
    harness: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.main(["--small", "--only", "s1,S4", "--repeat", "1"])

    out, err = capsys.readouterr()
    report = json.loads(out)
    assert list(report["scenarios"]) == ["S1", "S4"]
    assert "overhead_us_per_chunk" in err
    assert "first_partial_ms" in err


def test_an_unknown_scenario_is_refused(harness: ModuleType) -> None:
    with pytest.raises(SystemExit, match="unknown scenario"):
        harness.main(["--small", "--only", "S9"])


LOAD = HARNESS.parent / "load.py"
LOAD_FIGURES = {
    "streams", "opened", "done", "errors", "open_s", "idle_window_ok", "frames", "frames_per_s",
    "chunks_expected", "chunks_matched", "added_latency_p50_ms", "added_latency_p99_ms",
    "added_latency_max_ms", "rss_before_mib", "rss_idle_mib", "rss_end_mib",
    "rss_per_idle_stream_kib", "loop_lag_open_max_ms", "loop_lag_open_p99_ms",
    "loop_lag_stream_max_ms", "loop_lag_stream_p99_ms", "loop_lag_max_ms", "loop_lag_samples",
    "gc_pause_max_ms", "stream_s", "server_cpu_s", "provider_cpu_s", "client_cpu_s",
    "server_runqueue_wait_s", "loadavg_1min", "heartbeats", "server_cpu_us_per_frame",
    "redis_cpu_s", "redis_cpu_us_per_frame",  # zero with one replica (issue 32)
    *(f"gc{gen}_stream_{name}" for gen in range(3) for name in ("count", "max_ms", "cpu_ms")),
}


def load_env() -> dict[str, str]:
    src = str(Path(headwater.__file__).resolve().parents[1])  # the children import this one
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [src, os.environ.get("PYTHONPATH")]))}


@pytest.mark.slow  # three processes: provider, uvicorn server, client
@pytest.mark.timeout(180)
def test_gateway_load_quick_streams_every_chunk_and_reports_its_figures() -> None:
    done = subprocess.run([sys.executable, str(LOAD), "--quick"], capture_output=True,
                          text=True, timeout=170, check=False, env=load_env())

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    figures = report["figures"]
    assert set(figures) == LOAD_FIGURES
    assert set(report["targets"]) <= LOAD_FIGURES
    streams = report["options"]["streams"]
    assert figures["opened"] == figures["done"] == streams  # every run ended with `done`
    assert figures["errors"] == 0
    # every chunk the provider sent was matched to the frame that carried it
    assert figures["chunks_matched"] == figures["chunks_expected"] == streams * report[
        "options"]["deltas"]
    assert figures["frames"] == streams * (report["options"]["deltas"] + 2)  # + message, done
    assert figures["loop_lag_samples"] > 0
    assert "added_latency_p99_ms" in done.stderr  # the table


@pytest.mark.slow  # a provider, then the bare baseline and the gateway in turn, and the client
@pytest.mark.timeout(240)
def test_gateway_load_baseline_serves_the_same_frames_side_by_side() -> None:
    done = subprocess.run([sys.executable, str(LOAD), "--quick", "--baseline"],
                          capture_output=True, text=True, timeout=230, check=False,
                          env=load_env())

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["kind"] == "side_by_side"
    assert set(report["targets"]) == {"cpu_ratio", "replicas_cpu_ratio", "gateway_added_p99_ms"}
    streams, deltas = report["options"]["streams"], report["options"]["deltas"]
    runs = report["runs"]
    assert set(runs) == {"baseline", "gateway"} and len(runs["baseline"]) == 1
    for figures in (runs["baseline"][0], runs["gateway"][0]):
        assert set(figures) == LOAD_FIGURES
        # the same frames: every chunk matched, deltas + message + done, every run done
        assert figures["done"] == streams and figures["errors"] == 0
        assert figures["chunks_matched"] == figures["chunks_expected"] == streams * deltas
        assert figures["frames"] == streams * (deltas + 2)
        assert figures["server_cpu_us_per_frame"] >= 0
    figures = report["figures"]
    assert {"cpu_ratio", "gateway_added_p99_ms", "baseline_server_cpu_us_per_frame",
            "gateway_server_cpu_us_per_frame", "baseline_added_latency_p99_ms",
            "gateway_added_latency_p99_ms"} <= set(figures)
    assert "cpu_ratio" in done.stderr  # the table

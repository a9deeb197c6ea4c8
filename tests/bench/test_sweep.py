"""Sweeps against the embedded server on loopback, over HTTP and gRPC."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from workbench.bench import Endpoints, Progress, SweepResult, sweep
from workbench.bench.plan import SweepPoint
from workbench.bench.runner import SweepRunner, SweepSpec, base_config, start_sweep
from workbench.bench.scratch import SCRATCH_SUFFIX
from workbench.errors import InvalidArgumentError
from workbench.notebook import Workbench

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = {"duration_s": 0.2, "warmup_s": 0.05}


def endpoints(bench: Workbench) -> Endpoints:
    return Endpoints(bench.server.http_address, bench.repository, bench.grpc_url)


def as_is_runner(
    bench: Workbench, concurrency: list[int], duration_s: float, warmup_s: float = 0.0
) -> SweepRunner:
    """A sweep of ``linear`` as it serves, built as ``sweep()`` builds it, so that the test
    sees its worker process (``runner.load``)."""
    model_dir = bench.model_dir("linear")
    spec = SweepSpec("linear", model_dir, [SweepPoint(())], concurrency, duration_s, warmup_s)
    result = SweepResult("linear", base_config(model_dir), [], finished=False)
    return SweepRunner(spec, endpoints(bench), result)


def successes(bench: Workbench) -> int:
    client = bench.client("http")
    try:
        stats = client.get_inference_statistics("linear")
    finally:
        client.close()
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


def wait_for_load(bench: Workbench, runner: SweepRunner, since: int) -> int:
    """The worker's pid once the server has answered some of its requests."""
    for _ in range(600):  # bounded: 60 s
        if runner.load.pid is not None and successes(bench) > since + 20:
            return runner.load.pid
        time.sleep(0.1)
    raise AssertionError("the sweep's worker sent no requests within 60 s")


def is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_load_comes_from_another_process(sweep_bench: Workbench) -> None:
    runner = as_is_runner(sweep_bench, [1, 2], 0.2)
    start_sweep(runner)
    result = runner.result.wait(timeout_s=60)
    assert [row["error"] for row in result.rows] == ["", ""]
    assert all(row["requests"] > 0 for row in result.rows)
    # one worker for the whole sweep, not this process, and ended with the sweep
    assert len(runner.load.pids) == 1 and runner.load.pids[0] != os.getpid()
    assert runner.load.pid is None and is_gone(runner.load.pids[0])


def test_stop_ends_a_running_point_and_its_worker(sweep_bench: Workbench) -> None:
    runner = as_is_runner(sweep_bench, [1, 2], 60.0)
    before = successes(sweep_bench)
    start_sweep(runner)
    pid = wait_for_load(sweep_bench, runner, before)
    stopped = time.monotonic()
    runner.result.stop()
    result = runner.result.wait(timeout_s=30)
    assert time.monotonic() - stopped < 15  # the point would have run 60 s
    assert len(result.rows) == 1 and result.rows[0]["concurrency"] == 1
    assert result.rows[0]["requests"] > 0 and result.rows[0]["error"] == ""
    assert runner.load.pid is None and is_gone(pid)


def test_a_worker_killed_mid_point_is_an_error_row_and_the_sweep_goes_on(
    sweep_bench: Workbench,
) -> None:
    runner = as_is_runner(sweep_bench, [1, 2], 4.0)
    before = successes(sweep_bench)
    start_sweep(runner)
    pid = wait_for_load(sweep_bench, runner, before)
    os.kill(pid, signal.SIGKILL)  # the worker this test's sweep started
    df = runner.result.wait(timeout_s=60).df
    killed, next_level = df.iloc[0], df.iloc[1]
    assert killed["concurrency"] == 1 and killed["throughput"] == 0.0
    assert f"load generator process (pid {pid}) ended" in killed["error"]
    assert "killed by SIGKILL" in killed["error"] and math.isnan(killed["p99_ms"])
    assert next_level["concurrency"] == 2 and next_level["error"] == ""
    assert next_level["requests"] > 0 and next_level["errors"] == 0
    assert len(runner.load.pids) == 2 and runner.load.pids[0] == pid
    assert all(is_gone(p) for p in runner.load.pids)


def test_sweep_measures_every_point_on_a_scratch_copy(sweep_bench: Workbench) -> None:
    model_dir = sweep_bench.model_dir("linear")
    before = (model_dir / "config.pbtxt").read_bytes()
    seen: list[Progress] = []
    result = sweep(
        "linear",
        model_dir,
        endpoints(sweep_bench),
        settings={"max_batch_size": [1, 8], "max_queue_delay_microseconds": [0, 500]},
        concurrency=[1, 4],
        listeners=[seen.append],
        **TINY,
    )
    df = result.df
    assert len(df) == 8 and set(df["concurrency"]) == {1, 4}
    assert set(df["config"]) == {
        f"max_batch_size={m}, max_queue_delay_microseconds={d}" for m in (1, 8) for d in (0, 500)
    }
    assert (df["error"] == "").all() and (df["errors"] == 0).all(), df["error"].tolist()
    assert (df["throughput"] > 0).all() and (df["requests"] > 0).all()
    assert (df["p50_ms"] <= df["p99_ms"]).all()
    for column in ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us"):
        assert (df[column] >= 0).all() and not df[column].isna().any(), column
    # one row per execution without batching; with max_batch_size 8 never more than 8
    unbatched = df[df["max_batch_size"] == 1]["avg_batch"]
    assert (unbatched == 1.0).all(), unbatched.tolist()
    assert df["avg_batch"].between(1.0, 8.0).all(), df["avg_batch"].tolist()
    # the server runs here: how busy this machine's CPUs were while each level was measured
    assert df["host_cpu"].between(0.0, 1.0).all() and (df["host_cpu"] > 0).any(), df["host_cpu"]
    assert [p.done for p in seen] == list(range(1, 9)) and seen[-1].total == 8
    # the user's model is untouched, and the scratch copy is gone (files and server)
    assert (model_dir / "config.pbtxt").read_bytes() == before
    assert not (sweep_bench.repository / f"linear{SCRATCH_SUFFIX}").exists()
    served = sweep_bench.models()
    scratch = served[served["name"] == f"linear{SCRATCH_SUFFIX}"]
    assert (scratch["state"] != "READY").all()
    assert sweep_bench.config("linear").max_batch_size == 8


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(sweep_bench: Workbench) -> None:
    # preferred_batch_size 4 is invalid with max_batch_size 2: that point fails validation
    config_path = sweep_bench.model_dir("linear") / "config.pbtxt"
    original = config_path.read_text()
    config_path.write_text(
        original.replace("max_queue_delay_microseconds: 100", "preferred_batch_size: [ 4 ]")
    )
    try:
        result = sweep(
            "linear",
            config_path.parent,
            endpoints(sweep_bench),
            settings={"max_batch_size": [2, 8]},
            concurrency=[1, 2],
            **TINY,
        )
    finally:
        config_path.write_text(original)
    df = result.df
    failed = df[df["max_batch_size"] == 2]
    assert len(failed) == 2
    assert failed["error"].str.contains("preferred batch size 4 is larger than max_batch").all()
    assert failed["p99_ms"].isna().all()
    worked = df[df["max_batch_size"] == 8]
    assert (worked["error"] == "").all() and (worked["throughput"] > 0).all()
    assert result.best().settings == {"max_batch_size": 8}


def test_grpc_sweep_with_instance_counts(sweep_bench: Workbench) -> None:
    assert sweep_bench.grpc_url
    result = sweep(
        "linear",
        sweep_bench.model_dir("linear"),
        endpoints(sweep_bench),
        settings={"instance_count": [1, 2]},
        concurrency=[2],
        protocol="grpc",
        **TINY,
    )
    df = result.df
    assert list(df["instance_count"]) == [1, 2]
    assert (df["error"] == "").all() and (df["throughput"] > 0).all(), df["error"].tolist()
    assert result.options["protocol"] == "grpc"


def test_an_ensemble_is_swept_as_it_serves(sweep_bench: Workbench) -> None:
    result = sweep(
        "text_classifier",
        sweep_bench.model_dir("text_classifier"),
        endpoints(sweep_bench),
        settings={},
        concurrency=[1, 2],
        **TINY,
    )
    df = result.df
    assert list(df["config"]) == ["as is", "as is"]
    assert (df["error"] == "").all() and (df["throughput"] > 0).all(), df["error"].tolist()
    assert not math.isnan(df["compute_infer_us"].iloc[0])


def test_several_inputs_and_a_dynamic_dim(sweep_bench: Workbench) -> None:
    model_dir = sweep_bench.model_dir("pair")
    try:
        found = sweep("pair", model_dir, endpoints(sweep_bench), settings={}, concurrency=1, **TINY)
    except InvalidArgumentError as error:
        assert "input 'B' has dynamic dims" in str(error)
    else:  # seen once on a loaded machine: the rows say what failed first
        pytest.fail(f"the sweep did not refuse the dynamic dim; its rows: {found.rows!r}")
    result = sweep(
        "pair",
        model_dir,
        endpoints(sweep_bench),
        settings={"max_batch_size": [4]},
        concurrency=[2],
        shapes={"B": [3]},
        **TINY,
    )
    row = result.rows[0]
    assert row["error"] == "" and row["requests"] > 0, row
    given = {"A": np.array([[1, 2]], dtype=np.int32), "B": np.ones((1, 5), dtype=np.float32)}
    result = sweep(
        "pair", model_dir, endpoints(sweep_bench), settings={}, concurrency=1, inputs=given, **TINY
    )
    assert result.rows[0]["error"] == "" and result.rows[0]["requests"] > 0


def test_stop_keeps_the_rows_measured_so_far(sweep_bench: Workbench) -> None:
    first_row = threading.Event()
    result = sweep(
        "linear",
        sweep_bench.model_dir("linear"),
        endpoints(sweep_bench),
        settings={"max_batch_size": [1, 2, 4, 8]},
        concurrency=[1],
        duration_s=0.3,
        warmup_s=0.05,
        listeners=[lambda progress: first_row.set()],
        wait=False,
    )
    assert first_row.wait(60)
    result.stop()
    result.wait(timeout_s=60)
    assert 1 <= len(result.rows) < 4
    assert not (sweep_bench.repository / f"linear{SCRATCH_SUFFIX}").exists()


def test_apply_best_writes_the_users_file_safely(sweep_bench: Workbench, tmp_path: Path) -> None:
    model_dir = sweep_bench.model_dir("linear")
    original = (model_dir / "config.pbtxt").read_text()
    result = sweep(
        "linear",
        model_dir,
        endpoints(sweep_bench),
        settings={"instance_count": [2]},
        concurrency=[1],
        **TINY,
    )
    saved = SweepResult.load(result.save(tmp_path / "sweep.json"))
    try:
        best = saved.apply_best(sweep_bench)
        assert best.settings == {"instance_count": 2}
        assert "count: 2" in (model_dir / "config.pbtxt").read_text()
        assert (model_dir / "config.pbtxt.bak").read_text() == original
        assert sweep_bench.config("linear").instance_group[0].count == 2
    finally:
        (model_dir / "config.pbtxt").write_text(original)
        (model_dir / "config.pbtxt.bak").unlink(missing_ok=True)
        sweep_bench.load("linear")

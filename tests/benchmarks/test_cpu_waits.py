"""The /proc readings and the report of ``benchmarks/cpu_waits.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks import _harness, cpu_waits, transfer
from benchmarks.cpu_waits import Point, Sample, Scheduling

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/schedstat").exists(), reason="reads Linux's /proc"
)


def _spin(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_this_process_s_run_time_is_the_cpu_it_used() -> None:
    before = cpu_waits.read_threads([os.getpid()])
    cpu_before = time.process_time()
    _spin(0.05)
    used = cpu_waits.used_between(before, cpu_waits.read_threads([os.getpid()]))
    cpu = time.process_time() - cpu_before
    assert 0.8 * cpu <= used.run_ns / 1e9 <= cpu + 0.02
    assert used.wait_ns >= 0 and used.voluntary >= 0 and used.involuntary >= 0


def test_a_thread_born_in_the_window_counts_from_zero_and_one_that_ended_is_left_out() -> None:
    ended = threading.Thread(target=_spin, args=(0.03,))
    ended.start()
    ended.join()  # it ran before the first reading, so its counters must not appear
    _gone(ended)
    before = cpu_waits.read_threads([os.getpid()])
    born = threading.Thread(target=_spin, args=(0.03,))
    blocker = threading.Event()
    waiting = threading.Thread(target=blocker.wait)
    born.start()
    waiting.start()
    born.join()  # ends before the second reading: its window's share is lost, not negative
    after = cpu_waits.read_threads([os.getpid()])
    blocker.set()
    waiting.join()
    used = cpu_waits.used_between(before, after)
    assert used.run_ns >= 0 and used.wait_ns >= 0 and used.voluntary >= 0
    pid = os.getpid()
    assert (pid, ended.native_id) not in before
    assert (pid, waiting.native_id) in after and (pid, waiting.native_id) not in before


def _gone(thread: threading.Thread) -> None:
    """Wait until the kernel has let go of a joined thread (join returns a little before)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/self/task/{thread.native_id}").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_process_that_ended_reads_as_no_threads() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cpu_waits.read_threads([child.pid]) == {}


def test_a_sleep_is_a_voluntary_switch() -> None:
    task = Path(f"/proc/self/task/{threading.get_native_id()}")
    before = cpu_waits.thread_scheduling(task)
    time.sleep(0.01)
    assert (cpu_waits.thread_scheduling(task) - before).voluntary >= 1


def test_children_are_the_processes_a_server_started() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in _harness.child_pids(os.getpid())
        assert _harness.child_pids(child.pid) == []
    finally:
        child.kill()
        child.wait()


def test_the_machine_s_idle_time_is_the_kernel_s_in_seconds() -> None:
    # /proc/uptime's second field: the seconds all CPUs have been idle (not counting iowait)
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    iowait_s = int(fields[5]) / os.sysconf("SC_CLK_TCK")
    idle_s = cpu_waits.idle_s()
    uptime_idle_s = float(Path("/proc/uptime").read_text().split()[1])
    assert abs((idle_s - iowait_s) - uptime_idle_s) < 1.0


def test_the_model_is_configured_for_the_point(tmp_path: Path) -> None:
    point = Point(instance_count=2, max_batch_size=1, protocol="http", concurrency=8, window_s=1)
    root = cpu_waits.write_model(tmp_path, point, "/envs/python")
    config = (root / "cpu_bound" / "config.pbtxt").read_text()
    assert "max_batch_size: 1\n" in config and "count: 2 " in config
    assert 'key: "EXECUTION_ENV_PATH" value { string_value: "/envs/python" }' in config
    assert "def execute" in (root / "cpu_bound" / "1" / "model.py").read_text()
    plain = cpu_waits.write_model(tmp_path / "plain", point, None)
    assert "EXECUTION_ENV_PATH" not in (plain / "cpu_bound" / "config.pbtxt").read_text()


def test_a_setting_the_config_does_not_have_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no single 'instance_count'"):
        transfer.write_model(tmp_path, "cpu_bound", None, instance_count=2)


def test_a_row_is_per_inference_and_the_model_switches_per_execution() -> None:
    sample = Sample(
        engine="workbench",
        inferences=2_000,
        executions=1_000,
        window_s=2.0,
        idle_s=0.4,
        server=Scheduling(
            run_ns=600_000_000, wait_ns=200_000_000, voluntary=1_000, involuntary=500
        ),
        models=Scheduling(run_ns=1_600_000_000, wait_ns=0, voluntary=1_500, involuntary=100),
    )
    assert sample.row() == [
        "workbench",
        "1,000",  # infer/s
        "2.00",  # batch
        "200",  # idle µs per inference
        "300",
        "100",
        "0.50 / 0.25",
        "800",
        "0",
        "1.50 / 0.10",  # per execution
    ]
    assert len(sample.row()) == len(cpu_waits.HEADER)

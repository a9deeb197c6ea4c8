"""Both servers of the scheduling conformance suite and the requests its scenarios send.

``servers`` starts real Triton 2.51 and the embedded server on copies of
``tests/assets/scheduling_repo``; ``check`` runs a scenario on both and compares (see
``test_conformance_scheduling.py`` for what a scenario is).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest

from tests.integration.capture_golden import Case, send
from tests.integration.peers import REPO_ROOT, Peers, TritonServerProcess, copy_repository
from workbench.server.hosting import Server

#: Models that share code link to one ``model.py`` (the queue models to ``priority_levels``,
#: ``seq_oldest`` to ``seq_direct``); ``copy_repository`` turns the links into files.
SCHEDULING_REPO = REPO_ROOT / "tests" / "assets" / "scheduling_repo"
#: loaded at start; the ``bad_ens_*`` models are loaded by the tests (their loads fail)
MODELS = (
    "batch_echo", "cached_add_one", "decoupled_repeat", "ens_diamond", "ens_fail",
    "priority_levels", "queue_full", "queue_timeout_delay", "queue_timeout_reject",
    "seq_direct", "seq_oldest", "seq_string_id", "vec_add_one", "vec_fail_negative",
    "vec_sum_pair", "vec_times_two",
)  # fmt: skip
CACHE_BYTES = 1048576
T = TypeVar("T")
Scenario = Callable[[int], Any]
#: runs of a timing-tight scenario on real Triton before its result counts as changed
_TIMING_ATTEMPTS = 3


class Servers(NamedTuple):
    real: TritonServerProcess
    ours: Server


# --- servers ----------------------------------------------------------------------------------


def _cache_directory(peers: Peers, target: Path) -> Path:
    """``<target>/local/libtritoncache_local.so`` from the pytriton wheel.

    The wheel ships the local cache, but ``peers.prepare()`` does not lay it out and tritonserver
    looks in ``/opt/tritonserver/caches`` unless told otherwise.
    """
    wheel = next((peers.root / "wheels").glob("nvidia_pytriton-*.whl"))
    member = "pytriton/tritonserver/caches/local/libtritoncache_local.so"
    (target / "local").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        (target / "local" / "libtritoncache_local.so").write_bytes(archive.read(member))
    return target


def _start_embedded(repository: Path) -> Server:
    """The embedded server with MODELS loaded; models it cannot load are left unloaded.

    Loading one by one through the repository API keeps a model that fails (a feature not
    implemented yet) from failing every case: those cases fail on their own.
    """
    server = Server(
        repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        cache_size=CACHE_BYTES,
    )
    server.start()
    for name in MODELS:
        post(server.http_port, f"/v2/repository/models/{name}/load")
    return server


def both_servers(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Real Triton and the embedded server, each on its own copy of the repository."""
    workdir = tmp_path_factory.mktemp("scheduling")
    real_repo = copy_repository(SCHEDULING_REPO, workdir / "real" / "scheduling_repo")
    ours_repo = copy_repository(SCHEDULING_REPO, workdir / "ours" / "scheduling_repo")
    caches = _cache_directory(peers, workdir / "caches")
    real = TritonServerProcess(
        peers,
        real_repo,
        log_path=workdir / "tritonserver.log",
        load_models=MODELS,
        extra_args=[f"--cache-config=local,size={CACHE_BYTES}", f"--cache-directory={caches}"],
    )
    with ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        starting = pool.submit(real.start)  # both start at once: tritonserver takes ~10 s
        stack.callback(real.stop)
        ours = _start_embedded(ours_repo)
        stack.callback(ours.stop)
        starting.result()
        yield Servers(real, ours)


# --- requests ---------------------------------------------------------------------------------


def post(port: int, path: str, body: Any = b"") -> dict[str, Any]:
    reply = send(port, Case("scheduling", "POST", path, body))
    return {"status": reply["status"], "body": reply["body"]}


def infer(port: int, model: str, inputs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return post(port, f"/v2/models/{model}/infer", {"inputs": inputs, **extra})


def fp32(name: str, rows: int, values: list[float], width: int = 1) -> dict[str, Any]:
    return {"name": name, "shape": [rows, width], "datatype": "FP32", "data": values}


def outputs(reply: dict[str, Any]) -> Any:
    """``{name: data}`` of a 200 reply, or ``(status, body)`` of an error."""
    if reply["status"] != 200:
        return reply["status"], reply["body"]
    return {output["name"]: output["data"] for output in reply["body"]["outputs"]}


def stream(port: int, path: str, body: Any) -> dict[str, Any]:
    """Status, content type and de-chunked body bytes (as text) of a streaming request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    return {
        "status": response.status,
        "content_type": response.getheader("content-type"),
        "chunked": response.getheader("transfer-encoding") == "chunked",
        "body": raw.decode(),
    }


def _counts(port: int, model: str) -> dict[str, int]:
    """Every count in the model's statistics, flat; batch_stats as ``batch_<size>``."""
    reply = send(port, Case("stats", "GET", f"/v2/models/{model}/stats"))
    if reply["status"] != 200:
        return {"stats_status": reply["status"]}
    entry = reply["body"]["model_stats"][0]
    counts = {"inference_count": entry["inference_count"]}
    counts["execution_count"] = entry["execution_count"]
    counts.update({name: stat["count"] for name, stat in entry["inference_stats"].items()})
    for batch in entry["batch_stats"]:
        counts[f"batch_{batch['batch_size']}"] = batch["compute_infer"]["count"]
    return counts


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What changed (zero changes left out)."""
    keys = sorted(set(before) | set(after))
    changes = {key: after.get(key, 0) - before.get(key, 0) for key in keys}
    return {key: change for key, change in changes.items() if change}


def with_stats(port: int, models: tuple[str, ...], run: Callable[[], T]) -> tuple[T, Any]:
    before = {model: _counts(port, model) for model in models}
    result = run()
    after = _settled_counts(port, models)
    return result, {model: _delta(before[model], after[model]) for model in models}


def _settled_counts(port: int, models: tuple[str, ...]) -> dict[str, Any]:
    """Counts once two reads 50 ms apart agree: Triton may count a request just after its
    response left (seen with a failing ensemble step on a busy machine)."""
    counts = {model: _counts(port, model) for model in models}
    for _ in range(40):
        time.sleep(0.05)
        again = {model: _counts(port, model) for model in models}
        if again == counts:
            break
        counts = again
    return counts


def staggered(calls: list[tuple[float, Callable[[], T]]]) -> list[T]:
    """Run each call in its own thread, starting ``offset`` seconds after the first."""
    results: list[Any] = [None] * len(calls)
    started = time.monotonic()

    def run(index: int, offset: float, call: Callable[[], T]) -> None:
        time.sleep(max(0.0, started + offset - time.monotonic()))
        results[index] = call()

    threads = [
        threading.Thread(target=run, args=(index, offset, call))
        for index, (offset, call) in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def _on_both(servers: Servers, scenario: Scenario) -> tuple[Any, Any]:
    """The scenario on both servers at the same time: (Triton's observation, ours)."""
    with ThreadPoolExecutor(2) as pool:
        real = pool.submit(scenario, servers.real.http_port)
        ours = pool.submit(scenario, servers.ours.http_port)
        return real.result(), ours.result()


def _until(scenario: Scenario, port: int, expected: Any) -> list[Any]:
    """Runs of ``scenario`` on ``port`` until one sees ``expected`` (_TIMING_ATTEMPTS at most)."""
    seen = [scenario(port)]
    while seen[-1] != expected and len(seen) < _TIMING_ATTEMPTS:
        seen.append(scenario(port))
    return seen


def check(
    servers: Servers,
    scenario: Scenario,
    expected: Any,
    *,
    apart: bool = False,
    deliberate: Callable[[Any], Any] | None = None,
) -> None:
    """Triton's observation must be ``expected`` and ours Triton's.

    A scenario is run again (``_TIMING_ATTEMPTS`` runs in all) while real Triton misses its
    recorded result: a late thread or a late wake-up on a shared host made it miss on CI.
    Every miss is shown when all runs miss. ``apart``: one server after the other, for
    scenarios whose timing margins (tens to hundreds of ms) are tight on a busy 2-core
    machine; there our server gets the same number of runs to show Triton's result.
    ``deliberate``: removes a documented difference from our observation (and asserts it is
    there) before comparing.

    An ``apart`` scenario that real Triton misses in every run is skipped (naming its runs)
    once ours has shown the recorded result: under a CPU burner on both cores tritonserver
    2.51 itself misses the request-timeout scenario's ~250 ms margins run after run
    (``.ci/under-load``), which says the machine is too busy to compare, not that either
    server changed; on an ordinary CI machine it shows the result.
    """
    if apart:
        assert deliberate is None, "no apart scenario has a deliberate difference yet"
        ours_runs = _until(scenario, servers.ours.http_port, expected)
        assert ours_runs[-1] == expected, f"ours: {ours_runs!r}\nTriton: {expected!r}"
        reals = _until(scenario, servers.real.http_port, expected)
        if reals[-1] != expected:
            pytest.skip(f"real Triton missed its recorded result in every run: {reals!r}")
        return
    misses = []
    real, ours = _on_both(servers, scenario)
    while real != expected and len(misses) + 1 < _TIMING_ATTEMPTS:
        misses.append(real)
        real, ours = _on_both(servers, scenario)
    assert real == expected, f"real Triton no longer behaves as recorded: {[*misses, real]!r}"
    if deliberate is not None:
        ours = deliberate(ours)
    assert ours == real, f"ours: {ours!r}\nTriton: {real!r}"

"""Scheduling side by side: the same requests to real Triton 2.51 and to the embedded server.

Both serve a copy of ``tests/assets/scheduling_repo`` (python models only): dynamic batching,
queue policies and priorities, sequence batching, ensembles, a decoupled model and the response
cache. Each case is a *scenario*: a function of a port that sends requests (some concurrently,
at fixed offsets) and returns what it observed. It runs on both servers at once; the two
observations must be equal, and Triton's must match the behaviour recorded in
``docs/triton-scheduling-facts.md`` (so a Triton upgrade that changes it is noticed).

Timing: model sleeps are 300-400 ms and request offsets 20-50 ms, so batch composition and
queue order do not depend on the machine's speed. Statistics are compared as count deltas over
the scenario (durations vary by run).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peers import Peers
from tests.integration.scheduling_harness import (
    Servers,
    both_servers,
    check,
    fp32,
    infer,
    outputs,
    post,
    staggered,
    stream,
    with_stats,
)

pytestmark = [pytest.mark.integration, pytest.mark.conformance]


@pytest.fixture(scope="module")
def servers(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Real Triton and the embedded server, each on its own copy of the repository."""
    yield from both_servers(peers, tmp_path_factory)


# --- dynamic batching (batch_echo: preferred_batch_size [4], max_queue_delay 2 s) ---------


def _batch_sizes(port: int, rows: list[int], stagger: float) -> list[Any]:
    def one(count: int) -> Callable[[], Any]:
        values = [float(i) for i in range(count)]
        return lambda: outputs(infer(port, "batch_echo", [fp32("INPUT0", count, values)]))

    replies = staggered([(i * stagger, one(count)) for i, count in enumerate(rows)])
    return [reply["BATCH_SIZE"] if isinstance(reply, dict) else reply for reply in replies]


def test_preferred_batch_size_leaves_at_once(servers: Servers) -> None:
    """4 one-row requests make the preferred batch: one execution, no 2 s wait."""

    def scenario(port: int) -> Any:
        started = time.monotonic()
        sizes, stats = with_stats(port, ("batch_echo",), lambda: _batch_sizes(port, [1] * 4, 0.02))
        return sizes, stats, time.monotonic() - started < 1.5

    batch = {"inference_count": 4, "execution_count": 1, "batch_4": 1}
    per_request = dict.fromkeys(("success", "queue", "compute_input", "compute_infer"), 4)
    stats = {"batch_echo": {**batch, **per_request, "compute_output": 4}}
    check(servers, scenario, ([[4]] * 4, stats, True))


def test_six_requests_make_a_preferred_batch_then_wait_for_the_delay(servers: Servers) -> None:
    def scenario(port: int) -> Any:
        return with_stats(port, ("batch_echo",), lambda: _batch_sizes(port, [1] * 6, 0.02))

    counts = dict.fromkeys(("success", "queue", "compute_input", "compute_infer"), 6)
    stats = {"inference_count": 6, "execution_count": 2, "batch_2": 1, "batch_4": 1, **counts}
    check(
        servers, scenario, ([[4]] * 4 + [[2]] * 2, {"batch_echo": {**stats, "compute_output": 6}})
    )


def test_a_request_that_would_pass_the_preferred_size_closes_the_batch(servers: Servers) -> None:
    """3 rows, then 3 more: the first runs alone at once, the second after the delay."""

    def scenario(port: int) -> Any:
        return with_stats(port, ("batch_echo",), lambda: _batch_sizes(port, [3, 3], 0.05))

    counts = dict.fromkeys(("success", "queue", "compute_input", "compute_infer"), 2)
    stats = {"inference_count": 6, "execution_count": 2, "batch_3": 2, **counts}
    check(servers, scenario, ([[3] * 3, [3] * 3], {"batch_echo": {**stats, "compute_output": 2}}))


# --- queue policies and priorities (max_batch_size 1; the model sleeps 300-400 ms) -----------


def _one(port: int, model: str, value: float = 1.0, **extra: Any) -> Callable[[], Any]:
    return lambda: infer(port, model, [fp32("INPUT0", 1, [value])], **extra)


def _statuses_and_errors(replies: list[dict[str, Any]]) -> list[Any]:
    return [r["status"] if r["status"] == 200 else (r["status"], r["body"]) for r in replies]


def _execution_order(replies: list[dict[str, Any]]) -> list[Any]:
    """Each request's place in the model's order of execution (ORDER minus the first)."""
    orders = [outputs(reply)["ORDER"][0] for reply in replies]
    return [order - min(orders) for order in orders]


def test_queue_full_is_rejected(servers: Servers) -> None:
    def scenario(port: int) -> Any:
        # 100 ms apart (the model runs 400 ms): wide enough for a loaded 2-core machine.
        calls = [(0.1 * i, _one(port, "queue_full", id=name)) for i, name in enumerate("abc")]
        replies, stats = with_stats(port, ("queue_full",), lambda: staggered(calls))
        return _statuses_and_errors(replies), stats

    full = (503, {"error": "[request id: c] Exceeds maximum queue size"})
    counts = dict.fromkeys(("success", "queue", "compute_input", "compute_infer"), 2)
    stats = {"inference_count": 2, "execution_count": 2, "batch_1": 2, **counts}
    expected = ([200, 200, full], {"queue_full": {**stats, "compute_output": 2}})
    check(servers, scenario, expected, apart=True)


def test_queue_timeout_rejects(servers: Servers) -> None:
    """Requests queued past default_timeout_microseconds (300 ms) are rejected."""

    def scenario(port: int) -> Any:
        calls = [(0.05 * i, _one(port, "queue_timeout_reject", id=f"r{i}")) for i in range(3)]
        replies, stats = with_stats(port, ("queue_timeout_reject",), lambda: staggered(calls))
        return _statuses_and_errors(replies), stats

    expired = (503, {"error": "Request timeout expired"})
    counts = dict.fromkeys(("success", "queue", "compute_input", "compute_infer"), 1)
    stats = {"inference_count": 1, "execution_count": 1, "batch_1": 1, "fail": 2, **counts}
    expected = {"queue_timeout_reject": {**stats, "compute_output": 1}}
    check(servers, scenario, ([200, expired, expired], expected))


def test_request_timeout_lowers_the_default(servers: Servers, tmp_path: Path) -> None:
    """A request's own ``timeout`` (50 ms) applies; its neighbour keeps the 300 ms default.

    The first request runs until the test opens its gate, just after it sent the third: the
    second (sent at 0.3 s) has been queued past its 50 ms by then, the third is within its
    300 ms. Margins of ~250 ms either way; before the gate, a fixed 600 ms run left 150 ms,
    which a loaded machine (and real Triton on it) sometimes missed.
    """
    runs = iter(range(100))

    def scenario(port: int) -> Any:
        model = "queue_timeout_reject"
        gate = tmp_path / f"gate-{port}-{next(runs)}"
        calls = [
            (0.0, _one(port, model, parameters={"gate": str(gate)})),
            (0.30, _one(port, model, parameters={"timeout": 50000})),
            (0.60, _one(port, model)),
            (0.60, gate.touch),
        ]
        return _statuses_and_errors(staggered(calls)[:3])

    expected = [200, (503, {"error": "Request timeout expired"}), 200]
    check(servers, scenario, expected, apart=True)


def test_queue_timeout_delay_runs_late_requests_last(servers: Servers) -> None:
    """DELAY: a request past its timeout runs after the requests that are still in time.

    The first request runs 400 ms; the second times out after 10 ms, the third (default
    300 ms) is still in time when the first finishes.
    """

    def scenario(port: int) -> Any:
        model = "queue_timeout_delay"
        calls = [
            (0.0, _one(port, model, 1.0)),
            (0.10, _one(port, model, 2.0, parameters={"timeout": 10000})),
            (0.25, _one(port, model, 3.0)),
        ]
        return _execution_order(staggered(calls))

    check(servers, scenario, [0, 2, 1], apart=True)


def test_priority_levels(servers: Servers) -> None:
    """Level 1 goes first; 0 and values above priority_levels mean the default level (2)."""

    def scenario(port: int) -> Any:
        model = "priority_levels"
        calls = [
            (0.0, _one(port, model)),
            (0.05, _one(port, model)),
            (0.10, _one(port, model, parameters={"priority": 0})),
            (0.15, _one(port, model, parameters={"priority": 1})),
            (0.20, _one(port, model, parameters={"priority": 3})),
        ]
        return _execution_order(staggered(calls))

    check(servers, scenario, [0, 2, 3, 1, 4], apart=True)


@pytest.mark.parametrize("priority", [-1, "1", 1.5])
def test_invalid_priority(servers: Servers, priority: Any) -> None:
    def scenario(port: int) -> Any:
        return _one(port, "priority_levels", parameters={"priority": priority})()

    error = (
        "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as "
        "unsigned-integer"
    )
    check(servers, scenario, {"status": 500, "body": {"error": error}})


# --- sequence batching (max_batch_size 2, one instance, idle timeout 1 s) --------------------


def _seq(port: int, model: str, value: int, sequence_id: Any, *flags: str) -> Any:
    """One sequence request; ``flags`` among "start", "end"."""
    parameters: dict[str, Any] = {"sequence_id": sequence_id}
    parameters.update({f"sequence_{flag}": True for flag in flags})
    tensor = {"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}
    return outputs(infer(port, model, [tensor], parameters=parameters))


def _accumulate(port: int, model: str, sequence_id: Any) -> list[Any]:
    return [
        _seq(port, model, 5, sequence_id, "start"),
        _seq(port, model, 6, sequence_id),
        _seq(port, model, 7, sequence_id, "end"),
    ]


def _accumulated(corrid: int) -> list[dict[str, list[Any]]]:
    controls = [[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    return [
        {"OUTPUT": [total], "CONTROLS": flags, "CORRID_SEEN": [corrid], "ROWS": [1]}
        for total, flags in zip([5, 11, 18], controls, strict=True)
    ]


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest"])
def test_sequence_accumulates_with_control_inputs(servers: Servers, model: str) -> None:
    """START/END/READY/CORRID as the model sees them (int32 in direct, fp32 and bool in oldest)."""
    check(servers, lambda port: _accumulate(port, model, 1001), _accumulated(1001))


def test_sequence_with_string_ids(servers: Servers) -> None:
    """String ids reach the model as str; 42 and "42" are different sequences."""

    def scenario(port: int) -> Any:
        model = "seq_string_id"
        replies = _accumulate(port, model, "alpha")
        replies.append(_seq(port, model, 1, "alpha"))
        replies.append(_seq(port, model, 2, 42, "start", "end"))
        replies.append(_seq(port, model, 3, "42", "start", "end"))
        return replies

    no_start = (
        "inference request for sequence alpha to model 'seq_string_id' must specify the START "
        "flag on the first request of the sequence"
    )
    expected: list[Any] = [
        {"OUTPUT": [total], "CORRID_SEEN": ["str:alpha"]} for total in (5, 11, 18)
    ]
    expected.append((400, {"error": no_start}))
    expected.append({"OUTPUT": [2], "CORRID_SEEN": ["int:42"]})
    expected.append({"OUTPUT": [3], "CORRID_SEEN": ["str:42"]})
    check(servers, scenario, expected)


def test_direct_strategy_pads_batches_with_null_requests(servers: Servers) -> None:
    """With two live sequences in slots 0 and 1, a request of slot 1 alone runs as [null, it]."""

    def scenario(port: int) -> Any:
        steps = [(10, 201, ("start",)), (20, 202, ("start",)), (1, 201, ()), (2, 202, ("end",))]
        rows = [_seq(port, "seq_direct", value, sid, *flags) for value, sid, flags in steps]
        rows.append(_seq(port, "seq_direct", 3, 201, "end"))
        return [(reply["OUTPUT"], reply["ROWS"]) for reply in rows]

    expected = [([10], [1]), ([20], [2]), ([11], [1]), ([22], [2]), ([14], [1])]
    check(servers, scenario, expected)


def _sequence_error(model: str, what: str) -> tuple[int, dict[str, str]]:
    return 400, {"error": f"inference request {what}".replace("{model}", model)}


NO_CORRID = "to model '{model}' must specify a non-zero or non-empty correlation ID"
NO_START = (
    "for sequence 4242 to model '{model}' must specify the START flag on the first request "
    "of the sequence"
)
SEQUENCE_ERRORS = {
    "no_sequence_id": ({}, NO_CORRID),
    "sequence_id_zero": ({"sequence_id": 0, "sequence_start": True}, NO_CORRID),
    "unknown_sequence": ({"sequence_id": 4242}, NO_START),
    "unknown_sequence_end": ({"sequence_id": 4242, "sequence_end": True}, NO_START),
}


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest"])
@pytest.mark.parametrize("case", sorted(SEQUENCE_ERRORS))
def test_sequence_errors(servers: Servers, model: str, case: str) -> None:
    parameters, message = SEQUENCE_ERRORS[case]

    def scenario(port: int) -> Any:
        tensor = {"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}
        return outputs(infer(port, model, [tensor], parameters=parameters))

    check(servers, scenario, _sequence_error(model, message))


def test_sequence_of_two_rows_is_refused(servers: Servers) -> None:
    def scenario(port: int) -> Any:
        tensor = {"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}
        parameters = {"sequence_id": 9, "sequence_start": True, "sequence_end": True}
        return outputs(infer(port, "seq_direct", [tensor], parameters=parameters))

    message = (
        "to model 'seq_direct' must specify batch-size 1 due to requirements of sequence batcher"
    )
    check(servers, scenario, _sequence_error("seq_direct", message))


def test_sequence_idle_timeout_forgets_the_sequence(servers: Servers) -> None:
    def scenario(port: int) -> Any:
        first = _seq(port, "seq_direct", 5, 500, "start")
        time.sleep(1.5)  # max_sequence_idle_microseconds is 1 s
        return [first, _seq(port, "seq_direct", 6, 500)]

    first = {"OUTPUT": [5], "CONTROLS": [1.0, 0.0, 1.0], "CORRID_SEEN": [500], "ROWS": [1]}
    message = NO_START.replace("4242", "500")
    check(servers, scenario, [first, _sequence_error("seq_direct", message)])


# --- ensembles --------------------------------------------------------------------------------

DIAMOND = ("ens_diamond", "vec_add_one", "vec_times_two", "vec_sum_pair")


def _vec(values: list[float]) -> list[dict[str, Any]]:
    return [fp32("IN", 1, values, width=4)]


def _one_of_each(count: int) -> dict[str, int]:
    names = ("inference_count", "execution_count", "batch_1", "success", "queue")
    return dict.fromkeys((*names, "compute_input", "compute_infer", "compute_output"), count)


def test_ensemble_diamond(servers: Servers) -> None:
    """One tensor feeds two steps whose outputs meet in a third; every model counts once."""

    def scenario(port: int) -> Any:
        return with_stats(port, DIAMOND, lambda: infer(port, "ens_diamond", _vec([1, 2, 3, 4])))

    outputs = [  # completion order, not config order; ensembles always answer `parameters`
        {"name": "PLUS_ONE", "datatype": "FP32", "shape": [1, 4], "data": [2.0, 3.0, 4.0, 5.0]},
        {"name": "OUT", "datatype": "FP32", "shape": [1, 4], "data": [4.0, 7.0, 10.0, 13.0]},
    ]
    body = {
        "model_name": "ens_diamond",
        "model_version": "1",
        "parameters": {"sequence_id": 0, "sequence_start": False, "sequence_end": False},
        "outputs": outputs,
    }
    stats = {model: _one_of_each(1) for model in DIAMOND}
    check(servers, scenario, ({"status": 200, "body": body}, stats))


def test_ensemble_step_failure(servers: Servers) -> None:
    """The failing step's error, prefixed; the ensemble counts the failure twice."""
    models = ("ens_fail", "vec_fail_negative", "vec_add_one")

    def scenario(port: int) -> Any:
        return with_stats(
            port, models, lambda: infer(port, "ens_fail", _vec([1, -2, 3, 4]), id="e1")
        )

    error = "in ensemble 'ens_fail', negative input to vec_fail_negative"
    stats = {"ens_fail": {"fail": 2}, "vec_fail_negative": _one_of_each(1), "vec_add_one": {}}
    check(
        servers,
        scenario,
        ({"status": 500, "body": {"error": error}}, stats),
        deliberate=_without_step_name,
    )


def _without_step_name(observed: Any) -> Any:
    """Deliberate difference: our step failure also names the step and the composing model."""
    reply, stats = observed
    suffix = " (step 0, model 'vec_fail_negative')"
    assert reply["body"]["error"].endswith(suffix), reply
    body = {"error": reply["body"]["error"].removesuffix(suffix)}
    return {**reply, "body": body}, stats


def test_ensemble_subset_of_outputs(servers: Servers) -> None:
    """Triton 2.51 quirk: not requesting PLUS_ONE prunes the step that also feeds OUT."""

    def scenario(port: int) -> Any:
        outputs = [{"name": "OUT"}]
        return infer(port, "ens_diamond", _vec([1, 2, 3, 4]), outputs=outputs)["status"]

    check(servers, scenario, 400)


BAD_ENSEMBLES = {
    "bad_ens_unknown_step": (
        400,
        "load failed for model 'bad_ens_unknown_step': ensemble bad_ens_unknown_step contains "
        "models that are not available or ambiguous: no_such_model\n",
    ),
    "bad_ens_cycle": (500, "failed to load 'bad_ens_cycle', failed to poll from model repository"),
    "bad_ens_dtype": (
        400,
        "load failed for model 'bad_ens_dtype': in ensemble bad_ens_dtype, ensemble tensor IN: "
        "inconsistent data type: TYPE_INT32 is inferred from model bad_ens_dtype while "
        "TYPE_FP32 is inferred from model vec_add_one\n",
    ),
}


@pytest.mark.parametrize("model", sorted(BAD_ENSEMBLES))
def test_ensemble_load_errors(servers: Servers, model: str) -> None:
    status, error = BAD_ENSEMBLES[model]

    def scenario(port: int) -> Any:
        return post(port, f"/v2/repository/models/{model}/load")

    def triton_text_first(observed: Any) -> Any:
        """Deliberate difference: after Triton's text we say which step and what to change."""
        text = observed["body"]["error"]
        if text != error:
            assert text.startswith(error.removesuffix("\n") + "; ") and text.endswith("\n")
            return {**observed, "body": {"error": error}}
        return observed

    expected = {"status": status, "body": {"error": error}}
    check(servers, scenario, expected, deliberate=triton_text_first)


# --- decoupled model through generate_stream ------------------------------------------------

STREAM = "/v2/models/decoupled_repeat/generate_stream"
EVENT_STREAM = "text/event-stream; charset=utf-8"


def _event(out: int) -> str:
    payload = {"OUT": out, "model_name": "decoupled_repeat", "model_version": "1"}
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


@pytest.mark.parametrize("count", [3, 0])
def test_generate_stream(servers: Servers, count: int) -> None:
    """One ``data:`` event per response; the bare final flag adds nothing."""
    body = "".join(_event(i) for i in range(count))
    expected = {"status": 200, "content_type": EVENT_STREAM, "chunked": True, "body": body}
    check(servers, lambda port: stream(port, STREAM, {"COUNT": count}), expected)


def test_generate_stream_error_response(servers: Servers) -> None:
    error = 'data: {"error":"COUNT must not be negative"}\n\n'
    expected = {"status": 400, "content_type": EVENT_STREAM, "chunked": True, "body": error}
    check(servers, lambda port: stream(port, STREAM, {"COUNT": -1}), expected)


@pytest.mark.parametrize("count", [1, 3])
def test_generate_on_a_decoupled_model(servers: Servers, count: int) -> None:
    """``generate`` wants exactly one response; otherwise a 200 (!) with an error body."""
    path = "/v2/models/decoupled_repeat/generate"
    if count == 1:
        body = '{"OUT":0,"model_name":"decoupled_repeat","model_version":"1"}'
    else:
        body = (
            '{"error":"generate expects model to produce exactly 1 response, use generate '
            'stream for model that generates various number of responses"}'
        )
    expected = {"status": 200, "content_type": "application/json", "chunked": True, "body": body}
    check(servers, lambda port: stream(port, path, {"COUNT": count}), expected)


def test_infer_on_a_decoupled_model(servers: Servers) -> None:
    def scenario(port: int) -> Any:
        tensor = {"name": "COUNT", "shape": [1], "datatype": "INT32", "data": [2]}
        return infer(port, "decoupled_repeat", [tensor])

    error = "HTTP end point doesn't support models with decoupled transaction policy"
    check(servers, scenario, {"status": 501, "body": {"error": error}})


# --- response cache ---------------------------------------------------------------------------


def test_response_cache_hits_and_misses(servers: Servers) -> None:
    """A hit answers without running the model: inference/execution counts do not move."""

    def scenario(port: int) -> Any:
        def run() -> list[Any]:
            return [
                outputs(infer(port, "cached_add_one", _vec([1, 2, 3, 4]), id="first")),
                outputs(infer(port, "cached_add_one", _vec([1, 2, 3, 4]), id="again")),
                outputs(infer(port, "cached_add_one", _vec([1, 2, 3, 5]))),
            ]

        return with_stats(port, ("cached_add_one",), run)

    replies = [{"OUT": [2.0, 3.0, 4.0, 5.0]}] * 2 + [{"OUT": [2.0, 3.0, 4.0, 6.0]}]
    stats = {**_one_of_each(2), "success": 3, "queue": 3, "cache_hit": 1, "cache_miss": 2}
    check(servers, scenario, (replies, {"cached_add_one": stats}))

"""Record what real Triton 2.51 answers, as JSON reference files for the workbench server.

Run from the repository root (peers are prepared on the way)::

    python tests/integration/capture_golden.py [--out tests/assets/conformance_golden]

It starts real tritonserver on a copy of ``tests/assets/conformance_repo`` (explicit model
control, all models loaded), sends each request below over plain HTTP and writes one
``<case>.json`` per request: ``{"case", "note", "request": {...}, "response": {"status",
"headers", "body"}}``. Bodies that are JSON are stored parsed; other bodies as text, or as
``{"json_header": ..., "binary_tail_base64": ...}`` for binary-extension responses. The order
matters: statistics are taken after exactly one inference on a fresh server.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.peers import (
    PYTRITON_VERSION,
    REPO_ROOT,
    TRITON_VERSION,
    TritonServerProcess,
    copy_repository,
    prepare,
)

CONFORMANCE_REPO = REPO_ROOT / "tests" / "assets" / "conformance_repo"
GOLDEN_DIR = REPO_ROOT / "tests" / "assets" / "conformance_golden"
# Headers that change from run to run or say nothing about behaviour.
_VOLATILE_HEADERS = {"date", "connection", "keep-alive"}


@dataclass
class Case:
    """One request to send; ``body`` is JSON-encoded unless it is ``bytes``."""

    name: str
    method: str
    path: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    note: str = ""
    settle: bool = False  # first wait until no model is LOADING/UNLOADING


def _fp32_json(shape: list[int], data: list[float], name: str = "INPUT0") -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": "FP32", "data": data}


def _infer_body(*inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"inputs": list(inputs), **extra}


ONES16 = [1.0] * 16
ADD_ONE_INFER = "/v2/models/add_one/infer"


def _binary_request(
    data: bytes, declared_size: int, *, header_length_delta: int = 0
) -> tuple[bytes, dict[str, str]]:
    """A binary-extension add_one request; the declared sizes may lie on purpose."""
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": declared_size},
            }
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    encoded = json.dumps(header).encode()
    length = len(encoded) + header_length_delta
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(length),
    }
    return encoded + data, headers


def _identity_all_json() -> dict[str, Any]:
    values: dict[str, list[Any]] = {
        "BOOL": [True, False], "INT8": [-128, 127], "INT16": [-32768, 32767],
        "INT32": [-5, 6], "INT64": [-(2**40), 2**40], "UINT8": [0, 255],
        "UINT16": [0, 65535], "UINT32": [0, 2**32 - 1], "UINT64": [0, 2**63],
        "FP32": [1.5, -2.25], "FP64": [1e300, -0.5], "BYTES": ["abc", "zé"],
    }  # fmt: skip
    inputs = [
        {"name": f"IN_{dtype}", "shape": [1, 2], "datatype": dtype, "data": data}
        for dtype, data in values.items()
    ]
    return {"inputs": inputs}


def ok_cases() -> list[Case]:
    ones = _fp32_json([1, 16], ONES16)
    binary_body, binary_headers = _binary_request(struct.pack("<16f", *range(16)), 64)
    return [
        Case("infer_add_one_json", "POST", ADD_ONE_INFER, _infer_body(ones, id="req-1"),
             note="JSON in, JSON out; the request id is echoed"),
        Case("model_stats_add_one_after_one_infer", "GET", "/v2/models/add_one/stats",
             note="after exactly one inference (the case above) on a fresh server"),
        Case("model_stats_all", "GET", "/v2/models/stats"),
        Case("infer_add_one_binary_output", "POST", ADD_ONE_INFER, binary_body,
             binary_headers, note="binary input and output (binary tensor extension)"),
        Case("infer_add_one_versioned", "POST", "/v2/models/add_one/versions/1/infer",
             _infer_body(ones)),
        Case("infer_add_one_batch_8", "POST", ADD_ONE_INFER,
             _infer_body(_fp32_json([8, 16], ONES16 * 8))),
        Case("infer_echo_bytes_json", "POST", "/v2/models/echo_bytes/infer",
             _infer_body({"name": "INPUT0", "shape": [1, 2], "datatype": "BYTES",
                          "data": ["abc", "hello"]})),
        Case("infer_identity_all_json_all_dtypes_but_fp16", "POST",
             "/v2/models/identity_all/infer", _identity_all_json()),
        Case("infer_identity_all_json_fp16", "POST", "/v2/models/identity_all/infer",
             _infer_body({"name": "IN_FP16", "shape": [1, 2], "datatype": "FP16",
                          "data": [1.5, -2.0]}),
             note="FP16 sent as JSON numbers"),
        Case("infer_identity_all_subset_requested_output", "POST",
             "/v2/models/identity_all/infer",
             _infer_body({"name": "IN_INT32", "shape": [1, 2], "datatype": "INT32",
                          "data": [1, 2]}, outputs=[{"name": "OUT_INT32"}])),
    ]  # fmt: skip


def metadata_cases() -> list[Case]:
    cases = [
        Case("server_metadata", "GET", "/v2", note="extensions list included"),
        Case("health_live", "GET", "/v2/health/live"),
        Case("health_ready", "GET", "/v2/health/ready"),
        Case("model_ready_add_one", "GET", "/v2/models/add_one/ready"),
        Case("model_version_ready_add_one_v1", "GET", "/v2/models/add_one/versions/1/ready"),
        Case("model_metadata_add_one_v1", "GET", "/v2/models/add_one/versions/1"),
        Case("repository_index", "POST", "/v2/repository/index", b""),
        Case("repository_index_ready_only", "POST", "/v2/repository/index", {"ready": True}),
        Case("logging_settings", "GET", "/v2/logging"),
        Case("trace_settings", "GET", "/v2/trace/setting"),
        Case("trace_settings_add_one", "GET", "/v2/models/add_one/trace/setting"),
    ]
    for model in ("add_one", "echo_bytes", "identity_all", "fails_on_negative"):
        cases.append(Case(f"model_metadata_{model}", "GET", f"/v2/models/{model}"))
        cases.append(Case(f"model_config_{model}", "GET", f"/v2/models/{model}/config",
                          note="the normalised (auto-completed) configuration"))  # fmt: skip
    return cases


def error_cases() -> list[Case]:
    ones = _fp32_json([1, 16], ONES16)
    short_body, short_headers = _binary_request(b"\0" * 32, 64)
    lying_body, lying_headers = _binary_request(b"\0" * 64, 64, header_length_delta=1000)
    neg = _infer_body(_fp32_json([1, 2], [1.0, -1.0]))
    return [
        Case("error_infer_unknown_model", "POST", "/v2/models/nope/infer", _infer_body(ones)),
        Case("error_metadata_unknown_model", "GET", "/v2/models/nope"),
        Case("error_trace_unknown_model", "GET", "/v2/models/nope/trace/setting"),
        Case("error_trace_file_not_updatable", "POST", "/v2/trace/setting",
             {"trace_file": "/tmp/trace.json"}),
        Case("error_trace_needs_a_file", "POST", "/v2/trace/setting",
             {"trace_level": ["TIMESTAMPS"]}, note="the server has no trace file"),
        Case("error_config_unknown_model", "GET", "/v2/models/nope/config"),
        Case("error_ready_unknown_model", "GET", "/v2/models/nope/ready"),
        Case("error_stats_unknown_model", "GET", "/v2/models/nope/stats"),
        Case("error_metadata_unknown_version", "GET", "/v2/models/add_one/versions/7"),
        Case("error_ready_unknown_version", "GET", "/v2/models/add_one/versions/7/ready"),
        Case("error_infer_unknown_version", "POST", "/v2/models/add_one/versions/7/infer",
             _infer_body(ones)),
        Case("error_infer_wrong_dtype", "POST", ADD_ONE_INFER,
             _infer_body({"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
                          "data": [1] * 16})),
        Case("error_infer_wrong_shape", "POST", ADD_ONE_INFER,
             _infer_body(_fp32_json([1, 15], [1.0] * 15))),
        Case("error_infer_batch_too_large", "POST", ADD_ONE_INFER,
             _infer_body(_fp32_json([9, 16], ONES16 * 9)), note="max_batch_size is 8"),
        Case("error_infer_data_count_mismatch", "POST", ADD_ONE_INFER,
             _infer_body(_fp32_json([1, 16], [1.0, 2.0, 3.0]))),
        Case("error_infer_missing_input", "POST", ADD_ONE_INFER, _infer_body()),
        Case("error_infer_unknown_input", "POST", ADD_ONE_INFER,
             _infer_body(ones, _fp32_json([1, 16], ONES16, name="EXTRA"))),
        Case("error_infer_unknown_output", "POST", ADD_ONE_INFER,
             _infer_body(ones, outputs=[{"name": "NOPE"}])),
        Case("error_infer_malformed_json", "POST", ADD_ONE_INFER, b"{not json"),
        Case("error_infer_empty_body", "POST", ADD_ONE_INFER, b""),
        Case("error_infer_binary_data_short", "POST", ADD_ONE_INFER, short_body, short_headers,
             note="binary_data_size 64 declared, 32 bytes sent"),
        Case("error_infer_header_length_beyond_body", "POST", ADD_ONE_INFER, lying_body,
             lying_headers, note="Inference-Header-Content-Length is 1000 past the body"),
        Case("error_infer_fails_on_negative", "POST", "/v2/models/fails_on_negative/infer",
             neg, note="the model returns an error response (pb_utils.TritonError)"),
        Case("error_infer_fails_on_nan_raises", "POST", "/v2/models/fails_on_negative/infer",
             b'{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"FP32","data":[NaN]}]}',
             note="Triton's JSON reader accepts NaN; the model raises, the whole batch fails"),
        Case("error_load_nonexistent_model", "POST", "/v2/repository/models/nope/load", b""),
        Case("error_unload_unknown_model", "POST", "/v2/repository/models/nope/unload", b""),
        Case("error_get_on_infer", "GET", ADD_ONE_INFER),
        Case("error_unknown_path", "GET", "/v2/nope"),
    ]  # fmt: skip


def lifecycle_cases() -> list[Case]:
    return [
        Case("unload_add_one", "POST", "/v2/repository/models/add_one/unload", b""),
        Case("repository_index_after_unload", "POST", "/v2/repository/index", b"",
             settle=True, note="after the unload has completed (it returns while UNLOADING)"),
        Case("model_ready_add_one_after_unload", "GET", "/v2/models/add_one/ready"),
        Case("error_infer_unloaded_model", "POST", ADD_ONE_INFER,
             _infer_body(_fp32_json([1, 16], ONES16))),
        Case("load_add_one", "POST", "/v2/repository/models/add_one/load", b""),
        Case("model_ready_add_one_after_reload", "GET", "/v2/models/add_one/ready"),
    ]  # fmt: skip


def _decode_body(raw: bytes, headers: dict[str, str]) -> Any:
    header_length = headers.get("inference-header-content-length")
    if header_length is not None:
        split = int(header_length)
        return {
            "json_header": json.loads(raw[:split]),
            "binary_tail_base64": base64.b64encode(raw[split:]).decode(),
        }
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _describe_request(case: Case) -> dict[str, Any]:
    if isinstance(case.body, bytes):
        try:
            body: Any = case.body.decode()
        except UnicodeDecodeError:
            body = {"base64": base64.b64encode(case.body).decode()}
    else:
        body = case.body
    return {"method": case.method, "path": case.path, "headers": case.headers, "body": body}


def send(port: int, case: Case) -> dict[str, Any]:
    """Send ``case`` to ``127.0.0.1:port``; return status, stable headers and decoded body."""
    body = case.body
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    headers = dict(case.headers)
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(case.method, case.path, body=body, headers=headers)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    got = {k.lower(): v for k, v in response.getheaders() if k.lower() not in _VOLATILE_HEADERS}
    return {"status": response.status, "headers": got, "body": _decode_body(raw, got)}


def _settle(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    index = Case("index", "POST", "/v2/repository/index", b"")
    while time.monotonic() < deadline:
        states = {entry.get("state") for entry in send(port, index)["body"]}
        if not states & {"LOADING", "UNLOADING"}:
            return
        time.sleep(0.05)
    raise TimeoutError(f"models still loading or unloading after {timeout_s}s")


def capture(server: TritonServerProcess, out_dir: Path, log: Callable[[str], None]) -> int:
    """Send every case in order, write ``out_dir/<case>.json``; return how many were written."""
    cases = ok_cases() + metadata_cases() + error_cases() + lifecycle_cases()
    for case in cases:
        if case.settle:
            _settle(server.http_port)
        response = send(server.http_port, case)
        result = {
            "case": case.name,
            "note": case.note,
            "server": f"tritonserver {TRITON_VERSION} (nvidia-pytriton {PYTRITON_VERSION})",
            "request": _describe_request(case),
            "response": response,
        }
        path = out_dir / f"{case.name}.json"
        text = json.dumps(result, indent=2, ensure_ascii=False)
        # Tracebacks name model.py by absolute path; keep the files machine-independent.
        text = text.replace(str(server.model_repository), "<repo>/tests/assets/conformance_repo")
        path.write_text(text + "\n")
        log(f"{response['status']}  {case.method:4} {case.path}  -> {path.name}")
    metrics = _get_text(server.metrics_port, "/metrics")
    (out_dir / "metrics_after_capture.txt").write_text(metrics)
    return len(cases) + 1


def _get_text(port: int, path: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR)
    args = parser.parse_args(argv)
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.json"):
        stale.unlink()
    peers = prepare()
    workdir = Path(tempfile.mkdtemp(prefix="capture-golden-"))
    repository = copy_repository(CONFORMANCE_REPO, workdir / "conformance_repo")
    with TritonServerProcess(peers, repository, log_path=workdir / "tritonserver.log") as s:
        count = capture(s, out_dir, print)
    shutil.rmtree(workdir)  # kept when anything above failed, for its tritonserver.log
    print(f"wrote {count} files to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Workbench facade against the embedded server on loopback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http
from tritonclient.grpc.model_config_pb2 import ModelConfig

import workbench as wb
from tests.notebook.conftest import copy_linear, linear_reference
from workbench.errors import InternalError, InvalidArgumentError, NotFoundError, UnavailableError
from workbench.notebook import Workbench
from workbench.notebook.triton_http import STATS_COLUMNS
from workbench.notebook.workbench import MODEL_COLUMNS

pytestmark = pytest.mark.integration


def test_lazy_export_and_light_import() -> None:
    code = (
        "import sys, workbench as wb; "
        "heavy = [m for m in ('torch', 'onnxruntime', 'pandas', 'ipywidgets', 'plotly') "
        "if m in sys.modules]; "
        "assert heavy == [], heavy; "
        "assert wb.Workbench.__name__ == 'Workbench' and wb.ConfigEditor.__name__ == "
        "'ConfigEditor'; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Workbench" in wb.__all__ and "ConfigEditor" in wb.__all__


def test_endpoints_are_ephemeral_loopback(bench: Workbench) -> None:
    assert bench.url.startswith("http://127.0.0.1:") and not bench.url.endswith(":8000")
    assert requests.get(f"{bench.url}/v2/health/ready", timeout=5).status_code == 200
    client = bench.client("http")
    try:
        assert client.is_model_ready("linear")
    finally:
        client.close()
    with pytest.raises(ValueError, match="'http' or 'grpc'"):
        bench.client("websocket")


def test_grpc_client_and_metrics_follow_the_server(bench: Workbench) -> None:
    assert bench.grpc_url == f"127.0.0.1:{bench.server.grpc_port}"
    client = bench.client("grpc")
    try:
        assert client.is_model_ready("linear")
    finally:
        client.close()
    assert bench.metrics_url is not None
    text = requests.get(bench.metrics_url, timeout=5).text
    assert 'nv_inference_count{model="linear",version="1"}' in text


def test_endpoints_turned_off_are_none(repository: Path) -> None:
    with Workbench(repository, allow_grpc=False, allow_metrics=False) as bench:
        assert bench.grpc_url is None and bench.metrics_url is None
        with pytest.raises(UnavailableError, match="no gRPC endpoint"):
            bench.client("grpc")


def test_models_dataframe(bench: Workbench) -> None:
    frame = bench.models()
    assert list(frame.columns) == list(MODEL_COLUMNS)
    rows = {row["name"]: row for row in frame.to_dict("records")}
    assert rows["linear"]["state"] == "READY" and rows["linear"]["version"] == "1"
    assert rows["linear"]["backend"] == "onnxruntime"
    assert rows["linear"]["platform"] == "onnxruntime_onnx"
    assert rows["linear"]["max_batch_size"] == 8
    assert rows["add"]["backend"] == "python" and rows["add"]["reason"] == ""


def test_config_is_the_served_protobuf(bench: Workbench) -> None:
    config = bench.config("linear")
    assert isinstance(config, ModelConfig)
    assert config.name == "linear" and config.max_batch_size == 8
    assert [t.name for t in config.input] == ["INPUT"]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100


def test_infer_returns_numpy_arrays(bench: Workbench) -> None:
    x = np.arange(8, dtype=np.float64).reshape(2, 4)  # float64 is cast to the declared FP32
    out = bench.infer("linear", {"INPUT": x})
    assert set(out) == {"OUTPUT"}
    assert out["OUTPUT"].dtype == np.float32 and out["OUTPUT"].shape == (2, 3)
    np.testing.assert_allclose(out["OUTPUT"], linear_reference(x), rtol=1e-5)
    added = bench.infer("add", {"INPUT0": [[1, 2, 3, 4]]}, outputs=["OUTPUT0"])
    np.testing.assert_array_equal(added["OUTPUT0"], np.array([[2, 3, 4, 5]], np.float32))


def test_bad_input_gets_tritons_status_and_the_server_stays_up(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError, match=r"\[400\].*INPUT"):
        bench.infer("linear", {"INPUT": np.ones((1, 5), np.float32)})
    with pytest.raises(InvalidArgumentError, match=r"\[400\]"):
        bench.infer("linear", {"WRONG": np.ones((1, 4), np.float32)})
    assert bench.infer("linear", {"INPUT": np.ones((1, 4))})["OUTPUT"].shape == (1, 3)


def test_load_with_config_override_then_unload(
    bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    override = bench.config(name)
    override.max_batch_size = 2
    override.ClearField("dynamic_batching")
    bench.load(name, config=override)
    served = bench.config(name)
    assert served.max_batch_size == 2 and not served.HasField("dynamic_batching")
    disk = (bench.repository / name / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in disk  # an override never touches the file
    bench.load(name, config=f'name: "{name}" backend: "onnxruntime" max_batch_size: 4')
    assert bench.config(name).max_batch_size == 4
    bench.unload(name)
    row = next(r for r in bench.models().to_dict("records") if r["name"] == name)
    assert row["state"] == "UNAVAILABLE"
    with pytest.raises(NotFoundError, match=r"\[404\].*no available versions"):
        bench.infer(name, {"INPUT": np.ones((1, 4))})


def test_failed_load_says_why(bench: Workbench) -> None:
    with pytest.raises(InternalError, match=r"\[500\].*not_there"):
        bench.load("not_there")
    copy_linear(bench.repository, "broken")
    config = bench.repository / "broken" / "config.pbtxt"
    config.write_text(config.read_text() + '\ndefault_model_filename: "missing.onnx"\n')
    with pytest.raises(InvalidArgumentError, match="missing.onnx"):
        bench.load("broken")
    row = next(r for r in bench.models().to_dict("records") if r["name"] == "broken")
    assert row["state"] == "UNAVAILABLE" and "missing.onnx" in row["reason"]
    assert row["platform"] == "onnxruntime_onnx"  # from the file on disk


def test_stats_dataframe(bench: Workbench) -> None:
    for _ in range(3):
        bench.infer("linear", {"INPUT": np.ones((1, 4))})
    frame = bench.stats("linear")
    assert list(frame.columns) == list(STATS_COLUMNS)
    row = frame.to_dict("records")[0]
    assert row["name"] == "linear" and row["version"] == "1"
    assert row["success"] >= 3 and row["inference_count"] >= 3
    assert row["compute_infer_us"] > 0
    everything = bench.stats()
    assert {"linear", "add"} <= set(everything["name"])
    with pytest.raises(InvalidArgumentError, match=r"\[400\].*nope"):
        bench.stats("nope")


def test_repr_html_and_text(bench: Workbench) -> None:
    page = bench._repr_html_()
    assert bench.url in page and "<table>" in page
    assert "<td>linear</td>" in page and "<td>READY</td>" in page
    text = repr(bench)
    assert text.startswith(f"Workbench('{bench.repository}', running)")
    assert bench.url in text
    assert any(line.split()[:3] == ["linear", "1", "READY"] for line in text.splitlines())


def test_stop_is_idempotent_and_releases_the_port(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    copy_linear(repository, "linear")
    bench = Workbench(repository)
    url = bench.url
    assert bench.running
    bench.stop()
    bench.stop()
    assert not bench.running
    assert repr(bench) == f"Workbench('{repository}', stopped)"
    assert "stopped" in bench._repr_html_()
    with pytest.raises(UnavailableError, match="stopped"):
        bench.models()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v2/health/live", timeout=2)


def test_stops_at_interpreter_exit(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    copy_linear(repository, "linear")
    script = textwrap.dedent(
        f"""
        import atexit
        from workbench.notebook import Workbench

        # registered first, so it runs after the bench's own exit hook (atexit is LIFO)
        atexit.register(lambda: print("running at exit:", bench.running, flush=True))
        bench = Workbench({str(repository)!r})
        print("url", bench.url, flush=True)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "running at exit: False" in result.stdout
    url = result.stdout.split("url ", 1)[1].split()[0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v2/health/live", timeout=2)


def test_tritonclient_sees_the_same_server(bench: Workbench) -> None:
    client = tritonclient.http.InferenceServerClient(url=bench.url.removeprefix("http://"))
    try:
        assert client.get_model_config("linear")["max_batch_size"] == 8
    finally:
        client.close()

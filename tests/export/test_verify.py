"""Verification on real tritonserver 2.51 (the nvidia-pytriton build: python backend only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.export.conftest import snapshot
from workbench.export import PromoteVerificationError, find_tritonserver, promote
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance, pytest.mark.slow]


def test_finds_the_pytriton_build_and_its_backends(tritonserver_path: Path) -> None:
    binary = find_tritonserver(tritonserver_path)
    assert binary.backends == {"python", "ensemble"}
    assert (binary.backend_dir / "python" / "triton_python_backend_stub").is_file()
    assert "LD_LIBRARY_PATH" in binary.env and binary.problems == ()


def test_python_models_verify_and_others_are_not_verifiable_here(
    source: Path, served: Server, tritonserver_path: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "prod"
    report = promote(
        source, dest, server_address=served.http_address, tritonserver=tritonserver_path
    )
    status = {m.model: m.check.status for m in report.models if m.check}
    assert status == {
        "linear_onnx": "not verifiable here",
        "linear_torchscript": "not verifiable here",
        "postprocess": "passed",
        "preprocess": "passed",
        "text_classifier": "not verifiable here",  # its linear_onnx step
        "text_python": "passed",
    }
    assert report.ok and report.committed and report.triton_version == "2.51.0"
    assert sorted(report.verified) == ["postprocess", "preprocess", "text_python"]
    assert str(report).splitlines()[0].endswith("; 3 of 6 verified on tritonserver 2.51.0")
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert manifest["triton"]["verified_with"] == "2.51.0"
    assert manifest["triton"]["verification"]["text_python"] == "passed"
    assert not list(dest.rglob("__pycache__"))  # Triton ran on a linked copy, not the export


def test_a_changed_model_is_caught_as_a_mismatch(
    source: Path, served: Server, tritonserver_path: Path, tmp_path: Path
) -> None:
    # The server loaded the original; the file on disk now upper-cases nothing.
    model = source / "text_python" / "1" / "model.py"
    model.write_text(model.read_text().replace(".upper()", ".lower()"))
    assert ".lower()" in model.read_text()
    dest = tmp_path / "prod"
    options = {"server_address": served.http_address, "tritonserver": tritonserver_path}

    with pytest.raises(PromoteVerificationError, match="text_python: mismatch") as caught:
        promote(source, dest, models=["text_python"], verify=True, **options)

    assert caught.value.report.checks[0].status == "mismatch"
    assert "output 'UPPER'" in caught.value.report.checks[0].detail
    assert snapshot(dest) == {} and not caught.value.report.committed
    warned = promote(source, dest, models=["text_python"], verify="warn", **options)
    assert warned.committed and not warned.ok and (dest / "text_python" / "1").is_dir()

"""deploy="kubernetes": manifests validated offline against the Kubernetes schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workbench.config import parse_pbtxt
from workbench.export import promote
from workbench.export.kubernetes import HPA_METRIC, IMAGE, gpus_needed, kubernetes_documents

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate (test extra) validates the manifests"
)
K8S_VERSION = "1.29"
GPU_CONFIG = 'name: "g" backend: "onnxruntime" instance_group [ { kind: KIND_GPU count: 1 } ]'


def _validate(document: dict) -> None:
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_promote_writes_valid_manifests(source: Path, tmp_path: Path) -> None:
    report = promote(
        source, tmp_path / "prod", models=["text_python"], verify=False, deploy="kubernetes"
    )
    files = {Path(p).name: Path(p) for p in report.deploy_files}
    assert set(files) == {"triton.yaml", "inferenceservice.yaml"}
    assert all(Path(p).parent == tmp_path / "deploy" for p in report.deploy_files)
    documents = list(yaml.safe_load_all(files["triton.yaml"].read_text()))
    assert [d["kind"] for d in documents] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    for document in documents:
        _validate(document)
    deployment, service, hpa = documents
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # CPU-only configs
    assert sorted(p["port"] for p in service["spec"]["ports"]) == [8000, 8001, 8002]
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == HPA_METRIC
    (isvc,) = yaml.safe_load_all(files["inferenceservice.yaml"].read_text())
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["spec"]["predictor"]["triton"]["storageUri"].startswith("pvc://")


def test_gpu_configs_request_gpus_and_a_uri_is_pulled() -> None:
    config = parse_pbtxt(GPU_CONFIG)
    assert gpus_needed([config]) == 1
    documents = kubernetes_documents("s3://bucket/prod", [config])
    deployment = documents["triton.yaml"][0]
    _validate(deployment)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--model-repository=s3://bucket/prod" in container["args"]
    assert "volumes" not in deployment["spec"]["template"]["spec"]
    predictor = documents["inferenceservice.yaml"][0]["spec"]["predictor"]["triton"]
    assert predictor["storageUri"] == "s3://bucket/prod"
    # KServe's CRD schema is not in kubernetes-validate: check its resources as a container's.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "isvc-resources"},
        "spec": {
            "containers": [{"name": "c", "image": IMAGE, "resources": predictor["resources"]}]
        },
    }
    _validate(pod)


def test_an_invalid_manifest_is_caught_by_the_validator() -> None:
    deployment = kubernetes_documents("/models", [])["triton.yaml"][0]
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)

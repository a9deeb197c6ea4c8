"""Kubernetes manifests for serving a promoted repository with real Triton.

``triton.yaml``: a Deployment of ``nvcr.io/nvidia/tritonserver:<tag>-py3`` (the repository
from the promote's URI, or mounted from a PersistentVolumeClaim for a local folder), a Service
for 8000/8001/8002, readiness/liveness/startup probes on ``/v2/health/*``, and a
HorizontalPodAutoscaler on Triton's ``nv_inference_pending_request_count`` (served to the HPA
by a Prometheus adapter; the pods carry the usual scrape annotations). ``nvidia.com/gpu`` is
requested when a config asks for GPU instances. ``inferenceservice.yaml``: the KServe
alternative. Files are YAML when PyYAML is installed, else JSON (which is valid YAML).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.export.tritonserver import NGC_TAG

IMAGE = f"nvcr.io/nvidia/tritonserver:{NGC_TAG}-py3"
PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))
HPA_METRIC = "nv_inference_pending_request_count"
MOUNT = "/models"
_REMOTE = ("s3://", "gs://", "as://")


def gpus_needed(configs: Sequence[ModelConfig]) -> int:
    """1 when any config asks for GPU instances (``KIND_GPU``, or ``gpus`` listed), else 0."""
    for config in configs:
        for group in config.instance_group:
            if group.kind == ModelInstanceGroup.KIND_GPU or list(group.gpus):
                return 1
        if config.backend == "tensorrt" or config.platform == "tensorrt_plan":
            return 1
    return 0


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "tritonserver"}


def _resources(gpus: int) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": "2", "memory": "4Gi"}
    limits: dict[str, Any] = {"memory": "8Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
        limits["nvidia.com/gpu"] = gpus
    return {"requests": requests, "limits": limits}


def _probe(path: str, **timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, **timing}


def _container(repository: str, gpus: int) -> dict[str, Any]:
    return {
        "name": "tritonserver",
        "image": IMAGE,
        "args": [
            "tritonserver",
            f"--model-repository={repository}",
            "--model-control-mode=none",
            "--strict-readiness=true",
            "--exit-timeout-secs=30",
        ],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in PORTS],
        "readinessProbe": _probe("/v2/health/ready", periodSeconds=5, failureThreshold=3),
        "livenessProbe": _probe("/v2/health/live", periodSeconds=10, failureThreshold=3),
        "startupProbe": _probe("/v2/health/ready", periodSeconds=10, failureThreshold=60),
        "resources": _resources(gpus),
    }


def deployment(name: str, repository: str, gpus: int) -> dict[str, Any]:
    remote = repository.startswith(_REMOTE)
    container = _container(repository if remote else MOUNT, gpus)
    spec: dict[str, Any] = {"containers": [container]}
    if not remote:
        container["volumeMounts"] = [{"name": "model-repository", "mountPath": MOUNT}]
        spec["volumes"] = [
            {
                "name": "model-repository",
                "persistentVolumeClaim": {"claimName": f"{name}-models", "readOnly": True},
            }
        ]
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8002",
        "prometheus.io/path": "/metrics",
        # where the promote wrote the repository; copy it into the claim for a local folder
        "workbench.triton/repository": repository,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": _labels(name)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels(name)},
            "template": {
                "metadata": {"labels": _labels(name), "annotations": annotations},
                "spec": spec,
            },
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": _labels(name)},
        "spec": {
            "selector": _labels(name),
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in PORTS],
        },
    }


def autoscaler(name: str, pending_per_pod: int = 10) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": _labels(name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": HPA_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(pending_per_pod)},
                    },
                }
            ],
        },
    }


def inference_service(name: str, repository: str, gpus: int) -> dict[str, Any]:
    """KServe's ``InferenceService`` with its Triton predictor (needs a remote URI or a
    ``pvc://`` one; a local folder is given as ``pvc://<name>-models``)."""
    storage = repository if repository.startswith(_REMOTE) else f"pvc://{name}-models"
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "predictor": {
                "triton": {
                    "storageUri": storage,
                    "runtimeVersion": f"{NGC_TAG}-py3",
                    "resources": _resources(gpus),
                }
            }
        },
    }


def kubernetes_documents(
    repository: str, configs: Sequence[ModelConfig], name: str = "tritonserver"
) -> dict[str, list[dict[str, Any]]]:
    """The manifests by file name."""
    gpus = gpus_needed(configs)
    return {
        "triton.yaml": [deployment(name, repository, gpus), service(name), autoscaler(name)],
        "inferenceservice.yaml": [inference_service(name, repository, gpus)],
    }


def _dump(documents: list[dict[str, Any]]) -> str:
    try:
        import yaml
    except ImportError:
        return "\n---\n".join(json.dumps(doc, indent=2) for doc in documents) + "\n"
    return str(yaml.safe_dump_all(documents, sort_keys=False))


def write_kubernetes(
    folder: Path, repository: str, configs: Sequence[ModelConfig], name: str = "tritonserver"
) -> list[Path]:
    """Write the manifests into ``folder``; returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, documents in kubernetes_documents(repository, configs, name).items():
        path = folder / filename
        path.write_text(_dump(documents), encoding="utf-8")
        written.append(path)
    return written


__all__ = [
    "HPA_METRIC",
    "IMAGE",
    "gpus_needed",
    "kubernetes_documents",
    "write_kubernetes",
]

"""Verify a staged export on real Triton before it is committed.

Real tritonserver serves a hard-linked copy of the promoted models on loopback (its python
stubs write ``__pycache__`` there, not into the export); every model must be READY at its new
version, and the same requests (recorded ones, or synthesised from the model's metadata) must
give the same outputs from the workbench's server and from Triton. A model whose backend the
binary lacks, or whose requests cannot be replayed stand-alone (decoupled, sequence batching),
is "not verifiable here": never counted as passed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException

from workbench.bench.synthetic_inputs import synthesize_inputs
from workbench.config import backend_name, is_ensemble
from workbench.errors import InvalidArgumentError
from workbench.export.output_match import DEFAULT_TOLERANCE, Tolerance, outputs_mismatch
from workbench.export.triton_process import TritonProcess
from workbench.export.tritonserver import TritonBinary

PASSED = "passed"
MISMATCH = "mismatch"
FAILED = "failed"
NOT_VERIFIABLE = "not verifiable here"
#: synthesised requests per model (seeds 0, 1, 2)
SYNTHETIC_REQUESTS = 3

Inputs = Mapping[str, Any]


@dataclass(frozen=True)
class VerifyTarget:
    """A promoted model: its versions in the source and at the destination, its config."""

    name: str
    source_version: int
    dest_version: int
    config: ModelConfig


@dataclass
class ModelCheck:
    """The verdict for one model."""

    model: str
    status: str
    detail: str = ""
    requests: int = 0

    @property
    def ok(self) -> bool:
        return self.status == PASSED


def unverifiable_reason(
    target: VerifyTarget, targets: Mapping[str, VerifyTarget], backends: frozenset[str]
) -> str:
    """Why ``target`` cannot be checked with this binary ("" when it can)."""
    config = target.config
    backend = backend_name(config)
    if backend not in backends:
        have = ", ".join(sorted(backends))
        return f"backend '{backend}' is not in this tritonserver (it has: {have})"
    if config.model_transaction_policy.decoupled:
        return "decoupled model: responses are streamed, replay needs gRPC streaming"
    if config.HasField("sequence_batching"):
        return "sequence batching: requests need recorded sequences with correlation IDs"
    if is_ensemble(config):
        for step in config.ensemble_scheduling.step:
            inner = targets.get(step.model_name)
            why = "not promoted" if inner is None else unverifiable_reason(inner, targets, backends)
            if why:
                return f"step model '{step.model_name}': {why}"
    return ""


def verify_export(
    stage: Path,
    targets: Sequence[VerifyTarget],
    *,
    source_address: str,
    binary: TritonBinary,
    requests: Mapping[str, Sequence[Inputs]] | None = None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    log_path: Path | None = None,
) -> tuple[list[ModelCheck], str]:
    """Check every target; returns the verdicts and the Triton version that served them."""
    by_name = {target.name: target for target in targets}
    checks: dict[str, ModelCheck] = {}
    runnable: list[VerifyTarget] = []
    for target in targets:
        why = unverifiable_reason(target, by_name, binary.backends)
        if why:
            checks[target.name] = ModelCheck(target.name, NOT_VERIFIABLE, why)
        else:
            runnable.append(target)
    version = ""
    if runnable:
        version = _run_checks(stage, runnable, source_address, binary, requests or {}, tolerance,
                              log_path, checks)  # fmt: skip
    return [checks[target.name] for target in targets], version


def _run_checks(
    stage: Path,
    runnable: Sequence[VerifyTarget],
    source_address: str,
    binary: TritonBinary,
    requests: Mapping[str, Sequence[Inputs]],
    tolerance: Tolerance,
    log_path: Path | None,
    checks: dict[str, ModelCheck],
) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="workbench-verify-"))
    try:
        repository = workdir / "repository"
        for target in runnable:
            shutil.copytree(stage / target.name, repository / target.name, copy_function=_link)
        log = log_path or workdir / "tritonserver.log"
        names = [target.name for target in runnable]
        with TritonProcess(repository, binary=binary, log_path=log, load_models=names) as triton:
            source = httpclient.InferenceServerClient(url=source_address, network_timeout=120.0)
            real = httpclient.InferenceServerClient(url=triton.http_address, network_timeout=120.0)
            try:
                for target in runnable:
                    checks[target.name] = _check_model(
                        target, source, real, requests.get(target.name), tolerance, triton
                    )
                return str(real.get_server_metadata().get("version", ""))
            finally:
                source.close()
                real.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _link(source: str, target: str) -> None:
    """Hard-link where possible: Triton only reads the files (its stubs add ``__pycache__``)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _check_model(
    target: VerifyTarget,
    source: httpclient.InferenceServerClient,
    real: httpclient.InferenceServerClient,
    recorded: Sequence[Inputs] | None,
    tolerance: Tolerance,
    triton: TritonProcess,
) -> ModelCheck:
    name, dest_version = target.name, str(target.dest_version)
    if not real.is_model_ready(name, dest_version):
        reason = _index_reason(real, name) or triton.log_text()[-1500:]
        why = f"not READY on tritonserver at version {dest_version}: {reason}"
        return ModelCheck(name, FAILED, why)
    try:
        metadata = source.get_model_metadata(name, str(target.source_version))
        batch = requests_for(metadata, target.config.max_batch_size, recorded)
    except InvalidArgumentError as exc:
        return ModelCheck(name, NOT_VERIFIABLE, f"no request to replay: {exc}")
    except InferenceServerException as exc:
        return ModelCheck(name, FAILED, f"the workbench server: {exc.message()}")
    for number, inputs in enumerate(batch):
        try:
            expected = _infer(source, name, str(target.source_version), metadata, inputs)
            actual = _infer(real, name, dest_version, metadata, inputs)
        except InferenceServerException as exc:
            return ModelCheck(name, FAILED, f"request {number}: {exc.message()}", number)
        why = outputs_mismatch(expected, actual, tolerance)
        if why:
            return ModelCheck(name, MISMATCH, f"request {number}: {why}", number + 1)
    return ModelCheck(name, PASSED, f"{len(batch)} requests, outputs match", len(batch))


def requests_for(
    metadata: Mapping[str, Any], max_batch_size: int, recorded: Sequence[Inputs] | None
) -> list[dict[str, Any]]:
    """The recorded requests, else ``SYNTHETIC_REQUESTS`` made up from the metadata."""
    if recorded:
        return [dict(inputs) for inputs in recorded]
    return [
        synthesize_inputs(metadata, max_batch_size=max_batch_size, seed=seed)
        for seed in range(SYNTHETIC_REQUESTS)
    ]


def _infer(
    client: httpclient.InferenceServerClient,
    name: str,
    version: str,
    metadata: Mapping[str, Any],
    inputs: Inputs,
) -> dict[str, np.ndarray]:
    declared = {spec["name"]: spec["datatype"] for spec in metadata.get("inputs", [])}
    tensors = []
    for key, value in inputs.items():
        array = np.asarray(value)
        if declared.get(key) == "BYTES" and array.dtype.kind in "US":
            array = np.vectorize(lambda item: str(item).encode(), otypes=[object])(array)
        tensor = httpclient.InferInput(key, list(array.shape), declared.get(key, "FP32"))
        tensor.set_data_from_numpy(array, binary_data=True)
        tensors.append(tensor)
    wanted = [spec["name"] for spec in metadata.get("outputs", [])]
    outputs = [httpclient.InferRequestedOutput(out, binary_data=True) for out in wanted]
    result = client.infer(name, tensors, model_version=version, outputs=outputs)
    arrays = {out: result.as_numpy(out) for out in wanted}
    missing = [out for out, array in arrays.items() if array is None]
    if missing:
        raise InferenceServerException(f"the response has no output(s) {', '.join(missing)}")
    return {out: array for out, array in arrays.items() if array is not None}


def _index_reason(client: httpclient.InferenceServerClient, name: str) -> str:
    try:
        index = client.get_model_repository_index()
    except InferenceServerException:
        return ""
    return "; ".join(e.get("reason", "") for e in index if e.get("name") == name).strip("; ")


__all__ = [
    "FAILED",
    "MISMATCH",
    "NOT_VERIFIABLE",
    "PASSED",
    "ModelCheck",
    "VerifyTarget",
    "requests_for",
    "unverifiable_reason",
    "verify_export",
]

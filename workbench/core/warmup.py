"""Model warmup: the sample requests of a config's ``model_warmup``, run on every instance.

Triton builds each sample once per instance and runs it before the model is READY:
``batch_size`` separate requests (batch 1 each for batching models) executed together as one
batch, ``count`` times (0 means once); a sample with ``batch_size: 0`` is skipped. Inputs are
``zero_data``, ``random_data`` (random bytes; zeros for ``TYPE_STRING``) or ``input_data_file``
read from ``<model>/warmup/`` (raw bytes; ``TYPE_STRING`` as 4-byte-length-prefixed elements).
The first failing sample fails the load with ``failed to run warmup sample '<name>': ...``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelWarmup

from workbench._types import Tensor, split_bytes
from workbench.backends.base import ExecResult
from workbench.config.dtypes import ELEMENT_SIZE, config_to_wire, numpy_dtype
from workbench.core.request import InferRequest
from workbench.errors import InternalError, InvalidArgumentError, WorkbenchError

log = logging.getLogger("workbench.core")

#: Triton's folder (next to the version folders) holding ``input_data_file`` contents.
WARMUP_FOLDER = "warmup"
#: How Triton prefixes request-level messages for a request without an id.
_NO_ID = "[request id: <id_unknown>] "

#: Runs requests as one execution on instance ``index``, bypassing the schedulers.
RunOnInstance = Callable[[int, list[InferRequest]], Awaitable[list[ExecResult]]]


@dataclass(frozen=True, slots=True)
class WarmupSample:
    """One ``model_warmup`` entry, ready to run: ``count`` executions of ``batch_size`` requests."""

    name: str
    model_name: str
    count: int
    batch_size: int
    #: the inputs of each request (read-only arrays, shared by every request)
    inputs: tuple[Tensor, ...]

    def requests(self) -> list[InferRequest]:
        """Fresh request objects for one execution (the core may rewrite a request's inputs)."""
        return [
            InferRequest(model_name=self.model_name, inputs={t.name: t for t in self.inputs})
            for _ in range(self.batch_size)
        ]


def warmup_samples(config: ModelConfig, model_path: Path) -> list[WarmupSample]:
    """Build the samples of ``config.model_warmup``; bad settings raise as Triton does."""
    samples = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            log.debug("skipping batch 0 warmup sample '%s'", setting.name)
            continue
        inputs = tuple(
            _input_tensor(config, model_path, name, setting.inputs[name])
            for name in _input_order(config, setting)
        )
        samples.append(
            WarmupSample(
                name=setting.name,
                model_name=config.name,
                count=max(setting.count, 1),
                batch_size=setting.batch_size,
                inputs=inputs,
            )
        )
    return samples


async def warm_up(
    config: ModelConfig, model_path: Path, instance_count: int, run_on_instance: RunOnInstance
) -> None:
    """Run every warmup sample on every instance (instances in parallel, as Triton loads them).

    Raises the first instance's error (``InvalidArgumentError``) once every instance is done.
    """
    samples = warmup_samples(config, model_path)
    if not samples:
        return
    outcomes = await asyncio.gather(
        *(_warm_up_instance(samples, index, run_on_instance) for index in range(instance_count)),
        return_exceptions=True,
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def _warm_up_instance(
    samples: list[WarmupSample], index: int, run_on_instance: RunOnInstance
) -> None:
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug(
                "model '%s' instance %d is running warmup sample '%s' for iteration %d",
                sample.model_name,
                index,
                sample.name,
                iteration,
            )
            errors = await _run_once(sample, index, run_on_instance)
            if errors:
                # Triton stops at the first failing sample and joins every response's error.
                detail = "".join(f"{error}; " for error in errors)
                raise InvalidArgumentError(f"failed to run warmup sample '{sample.name}': {detail}")


async def _run_once(sample: WarmupSample, index: int, run_on_instance: RunOnInstance) -> list[str]:
    """One execution of ``sample``; returns the error messages of its responses."""
    requests = sample.requests()
    try:
        results = await run_on_instance(index, requests)
    except WorkbenchError as exc:
        return [str(exc)]
    except Exception as exc:  # a bug in model code must fail the load, not the server
        return [f"{type(exc).__name__}: {exc}"]
    if len(results) != len(requests):
        return [f"expected {len(requests)} responses, got {len(results)}"]
    return [str(result.error) for result in results if result.error is not None]


def _input_order(config: ModelConfig, setting: ModelWarmup) -> list[str]:
    """Model inputs in config order first, then control inputs (sequence batching) by name."""
    declared = [spec.name for spec in config.input if spec.name in setting.inputs]
    return declared + sorted(set(setting.inputs) - set(declared))


def _input_tensor(
    config: ModelConfig, model_path: Path, name: str, meta: ModelWarmup.Input
) -> Tensor:
    dims = list(meta.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(
            f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )
    if meta.data_type == 0:  # TYPE_INVALID: the setting names no data type
        raise InvalidArgumentError(f"warmup setting expects input '{name}' to have a data_type")
    datatype = config_to_wire(meta.data_type)
    # Control inputs (not model inputs) get no batch dimension, as in Triton.
    is_model_input = any(spec.name == name for spec in config.input)
    shape = ([1] if config.max_batch_size > 0 and is_model_input else []) + dims
    array = _input_array(meta, datatype, shape, model_path, name)
    array.flags.writeable = False
    return Tensor(name=name, datatype=datatype, array=array)


def _input_array(
    meta: ModelWarmup.Input, datatype: str, shape: list[int], model_path: Path, name: str
) -> np.ndarray:
    count = math.prod(shape)
    kind = meta.WhichOneof("input_data_type")
    if kind == "zero_data" or (kind == "random_data" and datatype == "BYTES"):
        # Triton feeds BYTES zeros for random data too: 4 zero bytes = an empty element.
        if datatype == "BYTES":
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=numpy_dtype(datatype))
    if kind == "random_data":
        raw = np.random.default_rng().bytes(count * ELEMENT_SIZE[datatype])
        return _from_bytes(raw, datatype, shape)
    if kind == "input_data_file":
        return _file_array(model_path, meta.input_data_file, datatype, shape)
    raise InvalidArgumentError(
        f"{_NO_ID}warmup setting expects input '{name}' to have input_data_type set"
    )


def _file_array(model_path: Path, file_name: str, datatype: str, shape: list[int]) -> np.ndarray:
    path = model_path / WARMUP_FOLDER / file_name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InternalError(
            f"failed to open text file for read {path}: {exc.strerror or exc}"
        ) from exc
    count = math.prod(shape)
    if datatype == "BYTES":
        return _decode_bytes(data, count, file_name).reshape(shape)
    needed = count * ELEMENT_SIZE[datatype]
    if len(data) < needed:
        # Triton's wording, including its missing space before "only".
        raise InvalidArgumentError(
            f"{_NO_ID}warmup setting expects {needed} bytes, but the data provided from "
            f"{file_name}only has {len(data)} bytes"
        )
    return _from_bytes(data[:needed], datatype, shape)


def _from_bytes(raw: bytes, datatype: str, shape: list[int]) -> np.ndarray:
    if datatype == "BOOL":
        # Any non-zero byte is true; numpy booleans must hold exactly 0 or 1.
        return (np.frombuffer(raw, dtype=np.uint8) != 0).reshape(shape)
    return np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(shape)


def _decode_bytes(data: bytes, count: int, file_name: str) -> np.ndarray:
    """``count`` serialised BYTES elements from a warmup data file."""
    try:
        elements = split_bytes(data, count)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"{_NO_ID}warmup setting expects {count} BYTES elements, but the data provided "
            f"from {file_name} {exc}"
        ) from None
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array


__all__ = ["WARMUP_FOLDER", "RunOnInstance", "WarmupSample", "warm_up", "warmup_samples"]

"""Checks of an inference request against the model configuration.

Messages follow Triton's (``core/src/infer_request.cc``) so that users and tests that match on
them carry over.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.config.dtypes import config_to_wire
from workbench.core.request import InferRequest
from workbench.errors import InvalidArgumentError

_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(
        d == -1 or d == s for s, d in zip(shape, dims, strict=True)
    )


class _UnprefixedError(InvalidArgumentError):
    """An input error Triton reports without the request id (an unknown input name)."""


class RequestChecker:
    """Precomputed view of a config's I/O used to check each request quickly."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = config.name
        self.max_batch_size = config.max_batch_size
        self.inputs = {i.name: i for i in config.input}
        self.outputs = {o.name: o for o in config.output}
        self.required = [i.name for i in config.input if not i.optional]
        self._wire = {i.name: config_to_wire(i.data_type) for i in config.input}
        self._dims = {i.name: tuple(i.dims) for i in config.input}
        #: the names of a request that sends exactly the model's inputs (the usual case)
        self._names = self.inputs.keys()
        #: inputs and outputs with a ``reshape`` (most models have none: nothing to do)
        self.input_reshapes = any(i.HasField("reshape") for i in config.input)
        self.output_reshapes = any(o.HasField("reshape") for o in config.output)

    def check(self, request: InferRequest) -> int:
        """Raise ``InvalidArgumentError`` on a bad request; return its batch size."""
        for name in request.requested_outputs or ():
            if name not in self.outputs:
                raise InvalidArgumentError(
                    f"unexpected inference output '{name}' for model '{self.model}'"
                )
        try:
            if request.inputs.keys() != self._names:
                self._check_names(request)
            batch = 0
            declared = request.declared_shapes
            for tensor in request.inputs.values():
                if declared and tensor.name in declared:
                    self._refuse_declared(tensor, *declared[tensor.name], batch)
                batch = self._check_tensor(tensor, batch)
        except _UnprefixedError:
            raise
        except InvalidArgumentError as exc:
            # Triton prefixes input errors with the request id (all but one).
            raise InvalidArgumentError(
                f"[request id: {request.id or '<id_unknown>'}] {exc}"
            ) from None
        return max(batch, 1)

    def _check_names(self, request: InferRequest) -> None:
        # Triton's order: the count first (more than the model has, or fewer than it needs),
        # then each name, then what is still missing (possible with optional inputs).
        count = len(request.inputs)
        if count > len(self.inputs) or count < len(self.required):
            raise self._count_error(request)
        for name in request.inputs:
            if name not in self.inputs:
                raise _UnprefixedError(
                    f"unexpected inference input '{name}' for model '{self.model}'"
                )
        if any(name not in request.inputs for name in self.required):
            raise self._count_error(request)

    def _count_error(self, request: InferRequest) -> InvalidArgumentError:
        missing = [name for name in self.required if name not in request.inputs]
        got = ",".join(f"'{n}'" for n in sorted(request.inputs))
        # Triton 2.51 prints "missing required input(s) ]" when none is missing (its join
        # drops the bracket); mirrored so that clients matching the text see the same.
        want = "[" + ",".join(f"'{n}'" for n in missing) if missing else ""
        return InvalidArgumentError(
            f"expected {len(self.required)} inputs but got {len(request.inputs)} inputs "
            f"for model '{self.model}'. Got input(s) [{got}], but missing required "
            f"input(s) {want}]. Please provide all required input(s)."
        )

    def _check_tensor(self, tensor: Tensor, batch: int) -> int:
        self._check_type(tensor)
        shape = tensor.shape
        dims = self._dims[tensor.name]
        if self.max_batch_size > 0:
            if not shape:
                raise self._no_batch_dim(tensor.name)
            batch = self._check_batch(tensor.name, shape[0], batch)
            shape = shape[1:]
        if shape != dims and not _matches(shape, dims):
            raise self._shape_error(tensor.name, tensor.shape)
        return batch

    def _check_type(self, tensor: Tensor) -> None:
        expected = self._wire[tensor.name]
        if tensor.datatype != expected:
            raise InvalidArgumentError(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                f"but model '{self.model}' expects '{expected}'"
            )

    def _refuse_declared(
        self, tensor: Tensor, shape: tuple[int, ...], received: int, batch: int
    ) -> None:
        """A shape with negative dims, in Triton's order: type, batch, the shape against the
        config (a -1 on either side matches anything), then -1s, then the byte size."""
        self._check_type(tensor)
        rest = shape
        if self.max_batch_size > 0:
            if not shape:
                raise self._no_batch_dim(tensor.name)
            if shape[0] != -1:
                self._check_batch(tensor.name, shape[0], batch)
            rest = shape[1:]
        dims = self._dims[tensor.name]
        fits = len(rest) == len(dims) and all(
            -1 in (got, want) or got == want for got, want in zip(rest, dims, strict=True)
        )
        if not fits:
            raise self._shape_error(tensor.name, shape)
        if -1 in rest:  # a -1 batch passes here (Triton keeps the batch size as uint32) ...
            raise InvalidArgumentError(
                f"All input dimensions should be specified for input '{tensor.name}' for "
                f"model '{self.model}', got {_shape_str(shape)}"
            )
        sized = [shape[0] % (1 << 32), *rest] if self.max_batch_size > 0 else list(shape)
        raise InvalidArgumentError(  # ... and wraps into its byte size
            f"input byte size mismatch for input '{tensor.name}' for model '{self.model}'. "
            f"Expected {math.prod(sized) * tensor.array.dtype.itemsize}, got {received}"
        )

    def _no_batch_dim(self, name: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"inference input '{name}' for model '{self.model}' has no batch "
            "dimension but the model supports batching (max_batch_size > 0)"
        )

    def _shape_error(self, name: str, shape: Sequence[int]) -> InvalidArgumentError:
        dims = self._dims[name]
        full = [-1, *dims] if self.max_batch_size > 0 else list(dims)
        return InvalidArgumentError(
            f"unexpected shape for input '{name}' for model '{self.model}'. "
            f"Expected {_shape_str(full)}, got {_shape_str(shape)}. "
            + (_BATCH_NOTE if self.max_batch_size > 0 else "")
        )

    def _check_batch(self, name: str, size: int, batch: int) -> int:
        if size < 1 or size > self.max_batch_size:
            raise InvalidArgumentError(
                f"inference request batch-size must be <= {self.max_batch_size} for '{self.model}'"
            )
        if batch and size != batch:
            raise InvalidArgumentError(
                f"input '{name}' batch size {size} does not match the other inputs' "
                f"batch size {batch} for model '{self.model}'"
            )
        return size


def reshape_inputs(config: ModelConfig, request: InferRequest, batched: bool) -> None:
    """Apply the config's ``reshape`` to inputs, in place (the model sees the new shape)."""
    for spec in config.input:
        tensor = request.inputs.get(spec.name)
        if tensor is None or not spec.HasField("reshape"):
            continue
        lead = tensor.array.shape[:1] if batched else ()
        tensor.array = np.reshape(tensor.array, (*lead, *spec.reshape.shape))


def reshape_outputs(config: ModelConfig, outputs: list[Tensor], batched: bool) -> None:
    """Give outputs with a ``reshape`` their declared ``dims`` shape back, in place."""
    specs = {o.name: o for o in config.output if o.HasField("reshape")}
    for tensor in outputs:
        spec = specs.get(tensor.name)
        if spec is not None:
            lead = tensor.array.shape[:1] if batched else ()
            tensor.array = np.reshape(tensor.array, (*lead, *spec.dims))

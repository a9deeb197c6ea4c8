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
from workbench.config.dtypes import ELEMENT_SIZE, config_to_wire
from workbench.core.request import DeferredInput, InferRequest
from workbench.errors import InvalidArgumentError
from workbench.memo import remember

_UINT32 = 2**32
_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


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
        #: the batch size of each decoding plan whose requests passed (``InferRequest.plan``)
        self._passed: dict[object, int] = {}

    def check(self, request: InferRequest) -> int:
        """Raise ``InvalidArgumentError`` on a bad request; return its batch size.

        A request cut out by a plan that passed before is not checked again: its inputs and
        outputs are those of the first. Only a plan that passed is remembered: a request of
        one that failed is checked, and refused, each time.
        """
        plan = request.plan
        if plan is None:
            return self._check(request)
        rows = self._passed.get(plan)
        if rows is None:
            rows = remember(self._passed, plan, self._check(request))
        return rows

    def _check(self, request: InferRequest) -> int:
        """``check``, every time.

        Triton's order (``InferenceRequest::Normalize``): the outputs, the input count; each
        input's name, then (batching) its batch dim; the batch size; then each input's type,
        shape and byte size. Triton keeps the inputs in an ``unordered_map``, which libstdc++
        walks newest first for two inputs (with more the names' hashes decide): newest first
        here too, so that a request with two faults hears about the same one.
        """
        if request.requested_outputs:
            self._check_outputs(request.requested_outputs)
        inputs = request.inputs
        tensors = list(reversed(inputs.values())) if len(inputs) > 1 else list(inputs.values())
        deferred = request.deferred_inputs or {}
        try:
            if inputs.keys() != self._names:
                self._check_count(request)
            batch = self._batch_size(tensors, deferred)
            for tensor in tensors:
                self._check_tensor(tensor, deferred.get(tensor.name), batch)
            if inputs.keys() != self._names:
                self._check_required(request)
        except _UnprefixedError:
            raise
        except InvalidArgumentError as exc:
            # Triton prefixes input errors with the request id (all but one).
            raise InvalidArgumentError(
                f"[request id: {request.id or '<id_unknown>'}] {exc}"
            ) from None
        return max(batch, 1)

    def _check_outputs(self, names: Sequence[str]) -> None:
        # Triton keeps the requested outputs in a std::set: checked in sorted order.
        for name in sorted(set(names)):
            if name not in self.outputs:
                raise InvalidArgumentError(
                    f"unexpected inference output '{name}' for model '{self.model}'"
                )

    def _check_count(self, request: InferRequest) -> None:
        # More inputs than the model has, or fewer than it needs (``ValidateRequestInputs``).
        count = len(request.inputs)
        if count > len(self.inputs) or count < len(self.required):
            raise self._count_error(request)

    def _check_required(self, request: InferRequest) -> None:
        # Not one of Normalize's checks: asked once all of them pass.
        if any(name not in request.inputs for name in self.required):
            raise self._count_error(request)

    def _count_error(self, request: InferRequest) -> InvalidArgumentError:
        missing = [name for name in self.required if name not in request.inputs]
        got = ",".join(f"'{n}'" for n in reversed(request.inputs))  # the map's order
        # Triton 2.51 prints "missing required input(s) ]" when none is missing (its join
        # drops the bracket); mirrored so that clients matching the text see the same.
        want = "[" + ",".join(f"'{n}'" for n in missing) if missing else ""
        return InvalidArgumentError(
            f"expected {len(self.required)} inputs but got {len(request.inputs)} inputs "
            f"for model '{self.model}'. Got input(s) [{got}], but missing required "
            f"input(s) {want}]. Please provide all required input(s)."
        )

    def _batch_size(self, tensors: list[Tensor], deferred: dict[str, DeferredInput]) -> int:
        """Triton's first pass: each name known and, with batching, each input's batch dim
        the same; then the batch size against ``max_batch_size``. 0 without batching."""
        batch = 0
        for tensor in tensors:
            if tensor.name not in self.inputs:
                raise _UnprefixedError(
                    f"unexpected inference input '{tensor.name}' for model '{self.model}'"
                )
            if self.max_batch_size <= 0:
                continue
            shape = _shape_of(tensor, deferred.get(tensor.name))
            if not shape:
                raise InvalidArgumentError(
                    f"input '{tensor.name}' has no shape but model requires batch dimension "
                    f"for '{self.model}'"
                )
            if batch == 0:
                batch = shape[0] % _UINT32  # Triton's batch size is a uint32 ...
            elif shape[0] != batch:
                raise InvalidArgumentError(
                    f"input '{tensor.name}' batch size does not match other inputs for "
                    f"'{self.model}'"
                )
        signed = batch - _UINT32 if batch >= _UINT32 // 2 else batch  # ... compared as an int
        if signed > self.max_batch_size:
            raise InvalidArgumentError(
                f"inference request batch-size must be <= {self.max_batch_size} for '{self.model}'"
            )
        return batch

    def _check_tensor(self, tensor: Tensor, deferred: DeferredInput | None, batch: int) -> None:
        """Triton's second pass over one input: its type, its shape, its byte size."""
        self._check_type(tensor)
        shape = _shape_of(tensor, deferred)
        batching = self.max_batch_size > 0
        dims = shape[1:] if batching else shape
        if deferred is not None or dims != self._dims[tensor.name]:
            self._check_dims(tensor.name, shape, dims)
        if deferred is not None or (batching and (batch == 0 or shape[0] != batch)):
            # the byte size against the shape with the batch dim as Triton counts it: none
            # when the batch size is 0, a -1 batch as 2^32-1
            self._refuse_data(tensor, deferred, [batch, *dims] if batch else list(dims))

    def _check_type(self, tensor: Tensor) -> None:
        expected = self._wire[tensor.name]
        if tensor.datatype != expected:
            raise InvalidArgumentError(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                f"but model '{self.model}' expects '{expected}'"
            )

    def _check_dims(self, name: str, shape: tuple[int, ...], dims: tuple[int, ...]) -> None:
        """The shape past the batch dim against the config's: a -1 in the config matches
        anything; a -1 in the request is refused unless a mismatch comes first."""
        config = self._dims[name]
        if len(dims) != len(config):
            raise self._shape_error(name, shape)
        for got, want in zip(dims, config, strict=True):
            if got == -1:
                raise InvalidArgumentError(
                    f"All input dimensions should be specified for input '{name}' for "
                    f"model '{self.model}', got {_shape_str(shape)}"
                )
            if want not in (-1, got):
                raise self._shape_error(name, shape)

    def _refuse_data(
        self, tensor: Tensor, deferred: DeferredInput | None, shape: list[int]
    ) -> None:
        """An input that cannot run (its data does not fit the shape, or its batch dim is not
        the request's): Triton's byte-size or element-count message, else the codec's."""
        if tensor.datatype == "BYTES":
            count = math.prod(shape) if shape else 0
            if deferred is None and tensor.array.size != count:
                raise InvalidArgumentError(
                    f"expected {count} string elements for inference input '{tensor.name}' "
                    f"for model '{self.model}', got {tensor.array.size}"
                )
        else:
            expected = _int64(math.prod(shape) * ELEMENT_SIZE[tensor.datatype]) if shape else 0
            received = tensor.array.nbytes if deferred is None else deferred.byte_size
            if received != expected:
                raise InvalidArgumentError(
                    f"input byte size mismatch for input '{tensor.name}' for model "
                    f"'{self.model}'. Expected {expected}, got {received}"
                )
        if deferred is not None:  # what the codec found, said now that the shape is right
            if deferred.error is not None:  # with its request id already, where it has one
                raise _UnprefixedError(str(deferred.error)) from None
            raise self._unusable(tensor.name, deferred)
        # an empty batch whose bytes add up: Triton would run it; refused as before
        raise InvalidArgumentError(
            f"inference request batch-size must be <= {self.max_batch_size} for '{self.model}'"
        )

    def _unusable(self, name: str, deferred: DeferredInput) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"unexpected shape {list(deferred.shape)} for input '{name}' for model "
            f"'{self.model}': no tensor of {deferred.byte_size} bytes has that shape"
        )

    def _shape_error(self, name: str, shape: Sequence[int]) -> InvalidArgumentError:
        dims = self._dims[name]
        full = [-1, *dims] if self.max_batch_size > 0 else list(dims)
        return InvalidArgumentError(
            f"unexpected shape for input '{name}' for model '{self.model}'. "
            f"Expected {_shape_str(full)}, got {_shape_str(shape)}. "
            + (_BATCH_NOTE if self.max_batch_size > 0 else "")
        )


def _shape_of(tensor: Tensor, deferred: DeferredInput | None) -> tuple[int, ...]:
    return tensor.shape if deferred is None else deferred.shape


def _int64(value: int) -> int:
    """``value`` wrapped as a C ``int64_t`` product wraps."""
    return (value + 2**63) % 2**64 - 2**63


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

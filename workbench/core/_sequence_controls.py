"""What the sequence batcher reads from a request and adds to it: ids, controls, states.

Triton 2.51 (``sequence_batch_scheduler.cc``, ``sequence_state.cc``), as observed over HTTP:

- Each control (``CONTROL_SEQUENCE_START``/``_END``/``_READY``) is one value taken from its
  ``int32_false_true``/``fp32_false_true``/``bool_false_true`` pair; ``CONTROL_SEQUENCE_CORRID``
  carries the sequence id in its ``data_type``. Shape ``[1]``, or ``[1, 1]`` when the model
  batches (``max_batch_size > 0``).
- A state input starts as ``initial_state`` (``zero_data`` or ``initial_state/<data_file>``),
  else zeros (Triton leaves that memory uninitialised); a variable state dim starts as 1.

Configuration mistakes raise ``ConfigError`` with Triton's load-time messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelSequenceBatching

from workbench._types import Tensor, split_bytes
from workbench.config.dtypes import config_to_wire, numpy_dtype
from workbench.core.request import InferRequest
from workbench.errors import ConfigError, InvalidArgumentError

#: a correlation id: Triton's ``sequence_id`` request parameter (uint64 or string)
SequenceKey = int | str

_UINT64_MAX = 2**64 - 1
_Kind = ModelSequenceBatching.Control
_PAIRS = (("int32_false_true", "INT32"), ("fp32_false_true", "FP32"), ("bool_false_true", "BOOL"))


@dataclass(frozen=True, slots=True)
class _Flag:
    """A boolean control input: its tensor name and its false/true values."""

    name: str
    wire: str
    false: np.ndarray
    true: np.ndarray

    def tensor(self, value: bool) -> Tensor:
        return Tensor(self.name, self.wire, (self.true if value else self.false).copy())


class SequenceControls:
    """The control inputs a model's ``sequence_batching.control_input`` asks for."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = config.name
        self._shape = (1, 1) if config.max_batch_size > 0 else (1,)
        batching = config.sequence_batching
        self._start = self._flag(batching, _Kind.CONTROL_SEQUENCE_START)
        self._end = self._flag(batching, _Kind.CONTROL_SEQUENCE_END)
        self._ready = self._flag(batching, _Kind.CONTROL_SEQUENCE_READY)
        corrid = _find(batching, _Kind.CONTROL_SEQUENCE_CORRID, config.name)
        #: (tensor name, wire type) of the CORRID control, if the model has one
        self.corrid = None if corrid is None else (corrid[0], config_to_wire(corrid[1].data_type))

    def _flag(self, batching: ModelSequenceBatching, kind: int) -> _Flag | None:
        found = _find(batching, kind, self.model)
        if found is None:
            return None
        name, control = found
        label = f"{_Kind.Kind.Name(kind)} for {self.model}"
        pairs = [(field, wire) for field, wire in _PAIRS if len(getattr(control, field))]
        if not pairs:
            raise ConfigError(
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
                f"or 'bool_false_true' for {label}"
            )
        if len(pairs) > 1:
            raise ConfigError(
                "sequence batching specifies more than one from 'int32_false_true', "
                f"'fp32_false_true' and 'bool_false_true' for {label}"
            )
        field, wire = pairs[0]
        values = list(getattr(control, field))
        if len(values) != 2:
            raise ConfigError(
                f"sequence batching control '{field}' must have exactly 2 entries for {label}"
            )
        dtype = numpy_dtype(wire)
        return _Flag(
            name,
            wire,
            np.full(self._shape, values[0], dtype=dtype),
            np.full(self._shape, values[1], dtype=dtype),
        )

    def sequence_key(self, request: InferRequest, batch_size: int) -> SequenceKey:
        """The request's sequence id; raises Triton's error for a request it refuses."""
        if batch_size > 1:
            raise InvalidArgumentError(
                f"inference request to model '{self.model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        key = request.parameters.get("sequence_id", 0)
        if not key or not isinstance(key, int | str) or isinstance(key, bool):
            raise InvalidArgumentError(
                f"inference request to model '{self.model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if isinstance(key, int) and key > _UINT64_MAX:
            raise InvalidArgumentError(f"sequence_id {key} does not fit an unsigned 64-bit integer")
        self._check_corrid_type(request, key)
        return key

    def _check_corrid_type(self, request: InferRequest, key: SequenceKey) -> None:
        # Triton 2.51 hands the model garbage for a mismatched id (or crashes); Triton 2.54
        # refuses the request with this message (core commit eeb283a).
        if self.corrid is None:
            return
        name, wire = self.corrid
        sent = "BYTES" if isinstance(key, str) else "UINT64"
        if (sent == "BYTES") != (wire == "BYTES"):
            raise InvalidArgumentError(
                f"[request id: {request.id or '<id_unknown>'}] sequence batching control "
                f"'{name}' data-type is '{sent}', but model '{self.model}' expects '{wire}'"
            )

    def tensors(self, start: bool, end: bool, key: SequenceKey | None) -> list[Tensor]:
        """The controls of a real request (``key``), or of a null one (``key`` None)."""
        ready = key is not None
        flags = ((self._start, start and ready), (self._end, end and ready), (self._ready, ready))
        tensors = [flag.tensor(value) for flag, value in flags if flag is not None]
        if self.corrid is not None:
            name, wire = self.corrid
            tensors.append(Tensor(name, wire, self._corrid_array(wire, key)))
        return tensors

    def _corrid_array(self, wire: str, key: SequenceKey | None) -> np.ndarray:
        if wire == "BYTES":
            text = key if isinstance(key, str) else ""
            return np.full(self._shape, text.encode(), dtype=object)
        value = key if isinstance(key, int) else 0
        # Triton copies the low bytes of the uint64 id into a narrower CORRID type.
        wide = np.full(self._shape, value, dtype=np.uint64)
        return wide.astype(numpy_dtype(wire), casting="unsafe")


def _find(
    batching: ModelSequenceBatching, kind: int, model: str
) -> tuple[str, ModelSequenceBatching.Control] | None:
    """The (tensor name, control) of ``kind``; Triton allows each kind once."""
    found = [(c.name, ctl) for c in batching.control_input for ctl in c.control if ctl.kind == kind]
    if len(found) > 1:
        raise ConfigError(
            f"sequence batching specifies multiple {_Kind.Kind.Name(kind)} tensors for {model}"
        )
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One ``sequence_batching.state`` entry with its initial value (batch dim included)."""

    input_name: str
    output_name: str
    wire: str
    initial: np.ndarray

    def tensor(self, array: np.ndarray) -> Tensor:
        return Tensor(self.input_name, self.wire, array)


def state_specs(config: ModelConfig, model_path: Path | None) -> list[StateSpec]:
    """The model's implicit states; raises ``ConfigError`` as Triton's load does."""
    lead = [1] if config.max_batch_size > 0 else []
    specs = []
    for state in config.sequence_batching.state:
        if len(state.initial_state) > 1:
            raise ConfigError(
                f"initial_state field for state input '{state.input_name}' must contain exactly "
                f"one or zero element. Found '{len(state.initial_state)}' elements."
            )
        wire = config_to_wire(state.data_type)
        if state.initial_state:
            values = _initial_values(state, wire, model_path)
        else:
            values = _zeros(wire, [1 if d == -1 else d for d in state.dims])
        specs.append(
            StateSpec(
                state.input_name, state.output_name, wire, values.reshape(lead + [*values.shape])
            )
        )
    return specs


def _zeros(wire: str, dims: list[int]) -> np.ndarray:
    if wire == "BYTES":
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype=numpy_dtype(wire))


def _initial_values(
    state: ModelSequenceBatching.State, wire: str, model_path: Path | None
) -> np.ndarray:
    initial = state.initial_state[0]
    problem = next(_initial_problems(state), None)
    if problem is not None:
        raise ConfigError(problem)
    dims = list(initial.dims)
    if initial.WhichOneof("state_data") == "zero_data":
        return _zeros(wire, dims)
    if initial.WhichOneof("state_data") != "data_file":
        raise ConfigError(
            f"initial_state setting expects state'{state.input_name}' to have state_data set"
        )
    if model_path is None:
        raise ConfigError(
            f"initial_state '{initial.name}' reads '{initial.data_file}' but the model's "
            "folder is unknown"
        )
    data = (model_path / "initial_state" / initial.data_file).read_bytes()
    if wire == "BYTES":
        return np.array(split_bytes(data), dtype=object).reshape(dims)
    size = int(np.prod(dims)) * numpy_dtype(wire).itemsize
    if size > len(data):
        # Triton's text, including its missing space before "only".
        raise ConfigError(
            f"initial_state setting expects {size} bytes, but the data provided from "
            f"{initial.data_file}only has {len(data)} bytes."
        )
    return np.frombuffer(data[:size], dtype=numpy_dtype(wire)).reshape(dims).copy()


def _initial_problems(state: ModelSequenceBatching.State) -> Iterator[str]:
    initial, name = state.initial_state[0], state.input_name
    if initial.data_type != state.data_type:
        yield (
            f"The data type used for 'initial_state' field of state '{name}' does not match "
            "the state data type."
        )
    if not initial.name:
        yield f"Field 'name' must be set when using initial_state for state input '{name}'."
    if len(initial.dims) != len(state.dims):
        yield (
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(initial.dims)} != {len(state.dims)}"
        )
    for have, want in zip(initial.dims, state.dims, strict=False):
        if have == -1:
            yield (
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if want != -1 and have != want:
            yield (
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {have} != {want}"
            )

"""A ``triton_python_backend_utils`` that runs unchanged Triton Python models.

The Python backend (in a stub process, or in-process when asked to) installs this module as
``sys.modules["triton_python_backend_utils"]`` before it imports a ``model.py``, so
``import triton_python_backend_utils as pb_utils`` gets these classes. Names, signatures and
error texts follow Triton's python_backend (the pure Python helpers of
``triton_python_backend_utils.py`` and the C++ ``c_python_backend_utils`` types); tensors live
in host memory as numpy arrays.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench import threads
from workbench._types import serialize_bytes, split_bytes
from workbench.backends.python._model_bls import InferenceTrace, ResponseIterator
from workbench.backends.python._model_config import ModelConfig
from workbench.backends.python._model_dlpack import array_from_dlpack, array_to_dlpack
from workbench.backends.python._model_errors import TritonError, TritonModelException
from workbench.backends.python._model_metrics import (
    Logger,
    LogLevel,
    Metric,
    MetricFamily,
    MetricKind,
)
from workbench.backends.python._model_sender import FINAL_FLAG, Deliver, InferenceResponseSender
from workbench.config.dtypes import WIRE_TO_NUMPY, config_to_wire, wire_to_config_enum
from workbench.threads import Work

if TYPE_CHECKING:
    from workbench.backends.base import RequestTrace

TRITON_STRING_TO_NUMPY = {
    f"TYPE_{'STRING' if wire == 'BYTES' else wire}": (bool if wire == "BOOL" else dt.type)
    for wire, dt in WIRE_TO_NUMPY.items()
    if wire != "BF16"
}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL_FLAG
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2


@dataclass
class _ModelScope:
    """What the code of one model instance may reach: its folder and the server (BLS)."""

    model_dir: str
    client: Any = None


#: Set by the backend around every call into model code (see ``ModelRunner``).
_scope: contextvars.ContextVar[_ModelScope | None] = contextvars.ContextVar(
    "triton_python_model_scope", default=None
)
#: In a stub process (one model per process) the scope of every thread, even those the
#: model starts itself, which do not inherit ``_scope``.
_process_scope: _ModelScope | None = None


def _current_scope() -> _ModelScope | None:
    return _scope.get() or _process_scope


#: numpy dtype -> ``TRITONSERVER_DataType`` number, for every type but BYTES and BF16
_DTYPE_TO_TRITON = {
    dt: wire_to_config_enum(wire)
    for wire, dt in WIRE_TO_NUMPY.items()
    if wire not in ("BYTES", "BF16")
}


#: wire name -> ``TRITONSERVER_DataType`` number
_WIRE_TO_TRITON = {wire: wire_to_config_enum(wire) for wire in WIRE_TO_NUMPY}


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype -> ``TRITONSERVER_DataType`` number (``np.float32`` -> 11), None if none."""
    if data_type is None:  # np.dtype(None) would be float64
        return None
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in "OS":  # object arrays and fixed-width bytes are Triton strings
        return 13
    return _DTYPE_TO_TRITON.get(dtype)


def triton_to_numpy_type(data_type: int) -> Any:
    """``TRITONSERVER_DataType`` number -> numpy type (``11`` -> ``np.float32``)."""
    if not 1 <= data_type <= 13:
        return None
    return WIRE_TO_NUMPY[config_to_wire(data_type)].type


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32``."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray) -> Any:
    """Flatten a bytes tensor into 4-byte-length-prefixed elements, in C order."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    return serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes | memoryview) -> np.ndarray:
    """The inverse of ``serialize_byte_tensor``: a 1-D object array of ``bytes``."""
    items = split_bytes(encoded_tensor)
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


class Tensor:
    """An input or output tensor of a Python model, held as a host numpy array."""

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = np.ascontiguousarray(numpy_array)
        dtype = _DTYPE_TO_TRITON.get(array.dtype)  # the common case, without ``np.dtype()``
        if dtype is None:
            dtype = numpy_to_triton_type(array.dtype)
        if dtype is None:
            raise TritonModelException("NumPy dtype is not supported.")
        self._name = name
        self._array = array
        self._dtype = dtype

    @classmethod
    def _from_wire(cls, name: str, datatype: str, array: np.ndarray) -> Tensor:
        tensor = cls.__new__(cls)
        tensor._name, tensor._array = name, array
        tensor._dtype = _WIRE_TO_TRITON[datatype]
        return tensor

    def name(self) -> str:
        """The tensor name."""
        return self._name

    def triton_dtype(self) -> int:
        """The ``TRITONSERVER_DataType`` number of the tensor (``TYPE_BF16`` is 14)."""
        return self._dtype

    def as_numpy(self) -> np.ndarray:
        """The values as a numpy array (BF16 has none: use ``to_dlpack``)."""
        if self._dtype == 14:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                "from_dlpack() instead."
            )
        return self._array

    def shape(self) -> list[int]:
        """The dimensions of the tensor."""
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        """Always True: tensors of python models live in host memory."""
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the tensor (BF16 through torch)."""
        if self._dtype == 13:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return array_to_dlpack(self._array, bf16=self._dtype == 14)

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with ``__dlpack__`` (torch, numpy)."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array, bf16 = array_from_dlpack(tensor)
        if bf16:
            return Tensor._from_wire(name, "BF16", array)
        return Tensor(name, array)

    def _wire_type(self) -> str:
        return config_to_wire(self._dtype)

    def __repr__(self) -> str:
        return f"Tensor(name={self._name!r}, dtype={self._wire_type()}, shape={self.shape()})"


class PreferredMemory:
    """Accepted for compatibility; results of BLS calls always land in host memory."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceResponse:
    """The response to one request: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        tensors = list(output_tensors) if output_tensors else []
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException('"output_tensors" must be a list of Tensor objects.')
        self._output_tensors = tensors
        self._error = error
        self._parameters = dict(parameters) if parameters else {}

    def output_tensors(self) -> list[Tensor]:
        """The output tensors."""
        return self._output_tensors

    def has_error(self) -> bool:
        """Whether the response carries an error."""
        return self._error is not None

    def error(self) -> TritonError | None:
        """The error, or None."""
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string."""
        return json.dumps(self._parameters)


class InferenceRequest:
    """A request handed to ``execute``, or (built by the model) a BLS request to run."""

    # What ``_received`` leaves at its default (``__init__`` sets every one of them).
    _correlation_id: int | str = 0
    model_name = ""
    model_version = -1
    _flags = 0
    _timeout = 0
    _sender: InferenceResponseSender | None = None
    #: set by the backend for decoupled models: where sent responses go
    _deliver: Deliver | None = None
    #: the request's trace (received), or the trace a BLS request is a child of
    _trace: RequestTrace | None = None

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Iterable[Tensor] = (),
        requested_output_names: Iterable[str] = (),
        model_name: str | bytes = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = list(requested_output_names)
        # Triton takes a name as bytes too (e.g. read from a BYTES tensor)
        self.model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self.model_version = model_version
        self._flags = flags
        self._timeout = timeout
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        self._parameters: dict[str, Any] = dict(parameters or {})  # type: ignore[arg-type]
        self._sender = None
        self._deliver = None
        self._trace = trace._trace if isinstance(trace, InferenceTrace) else None

    @classmethod
    def _received(
        cls,
        request_id: str,
        inputs: list[Tensor],
        requested_output_names: list[str],
        trace: RequestTrace | None = None,
    ) -> InferenceRequest:
        """A request without parameters for ``execute``, from checked values the backend owns.

        Skips ``__init__``'s checks and copies, and leaves the other fields at their class
        defaults: this runs for every request of every call.
        """
        request = cls.__new__(cls)
        request._request_id = request_id
        request._inputs = inputs
        request._requested_output_names = requested_output_names
        request._parameters = {}
        request._trace = trace
        return request

    def inputs(self) -> list[Tensor]:
        """The input tensors."""
        return self._inputs

    def request_id(self) -> str:
        """The request ID ("" when none)."""
        return self._request_id

    def correlation_id(self) -> int | str:
        """The sequence correlation ID (0 outside a sequence)."""
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        """The outputs to compute (every model output when the client named none)."""
        return self._requested_output_names

    def flags(self) -> int:
        """``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`` / ``_END`` bits."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        """Set the request flags (for BLS requests to sequence models)."""
        self._flags = flags

    def timeout(self) -> int:
        """The timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string."""
        return json.dumps(self._parameters)

    def trace(self) -> InferenceTrace:
        """The request's trace: pass it to a BLS ``InferenceRequest(..., trace=...)`` to trace
        that request as this one's child."""
        return InferenceTrace._of(self._trace)

    def is_cancelled(self) -> bool:
        """Always False: cancellation does not reach python models yet."""
        return False

    def set_release_flags(self, flags: int) -> None:
        """Only ``TRITONSERVER_REQUEST_RELEASE_ALL`` (the default) is supported."""
        if flags != TRITONSERVER_REQUEST_RELEASE_ALL:
            raise TritonModelException("request rescheduling is not supported by Triton Workbench")

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses (one, unless the model is decoupled)."""
        if self._sender is None:
            self._sender = InferenceResponseSender(self._deliver)
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on the server (BLS) and wait for its response.

        With ``decoupled=True`` a ``ResponseIterator`` over every response (several from a
        decoupled model; the last may be empty, Triton's "final" flag); it waits for the first.
        """
        scope = _current_scope()
        if scope is None or scope.client is None:
            raise TritonModelException("BLS requests need a running server; none is attached")
        from workbench.backends.python._model_bridge import run_bls, run_bls_stream

        if decoupled:
            return run_bls_stream(scope.client, self)
        return run_bls(scope.client, self)

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[Any]:
        """Like ``exec`` but awaitable; runs on the stub's pool for BLS calls."""
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return loop.run_in_executor(threads.pool(Work.BLS), context.run, self.exec, decoupled)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input tensor called ``name``, or None."""
    for tensor in inference_request.inputs():  # a loop: most models call this per request
        if tensor._name == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The output tensor called ``name``, or None."""
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry called ``name`` of a model configuration dict, or None."""
    return next((i for i in model_config.get("input", []) if i["name"] == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry called ``name`` of a model configuration dict, or None."""
    return next((o for o in model_config.get("output", []) if o["name"] == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the configuration asks for the decoupled transaction policy."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def get_model_dir() -> str:
    """The folder of the running ``model.py`` (its version folder, as in Triton)."""
    scope = _current_scope()
    if scope is None:
        raise TritonModelException("get_model_dir() is only available inside a model")
    return scope.model_dir


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether ``model_name`` is loaded and ready on the server."""
    scope = _current_scope()
    if scope is None or scope.client is None:
        raise TritonModelException("is_model_ready needs a running server; none is attached")
    return bool(scope.client.is_model_ready(model_name, int(model_version or -1)))


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Not supported yet: model control from inside a model."""
    raise TritonModelException("load_model is not supported by Triton Workbench yet")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Not supported yet: model control from inside a model."""
    raise TritonModelException("unload_model is not supported by Triton Workbench yet")


__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "InferenceTrace",
    "ResponseIterator",
    "InferenceResponseSender",
    "Logger",
    "LogLevel",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

"""Data type tables: config enum names, KServe wire names and numpy dtypes.

Triton has three spellings of one type: ``TYPE_FP32`` in ``config.pbtxt``, ``FP32`` on the
wire, and ``numpy.float32`` in Python. Everything converts through these tables.
"""

from __future__ import annotations

import numpy as np

from workbench.errors import InvalidArgumentError

#: wire name -> numpy dtype. BYTES are object arrays of bytes; BF16 is carried as raw uint16 bits.
WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}

#: wire names in the order of ``inference.DataType`` (TYPE_BOOL = 1 ... TYPE_BF16 = 14).
_CONFIG_ORDER = [
    "INVALID",
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "STRING",
    "BF16",
]

#: Byte size of one element; BYTES has none (variable length).
ELEMENT_SIZE: dict[str, int] = {
    name: dt.itemsize for name, dt in WIRE_TO_NUMPY.items() if name != "BYTES"
}


def config_to_wire(data_type: int | str) -> str:
    """``TYPE_FP32`` (or its enum number) -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    name = _CONFIG_ORDER[data_type] if isinstance(data_type, int) else data_type
    name = name.removeprefix("TYPE_")
    if name == "STRING":
        return "BYTES"
    if name not in WIRE_TO_NUMPY:
        raise InvalidArgumentError(f"unknown data type '{data_type}'")
    return name


def wire_to_config_enum(datatype: str) -> int:
    """``FP32`` -> the ``inference.DataType`` enum number of ``TYPE_FP32``."""
    name = "STRING" if datatype == "BYTES" else datatype
    if datatype not in WIRE_TO_NUMPY:
        raise InvalidArgumentError(f"unknown data type '{datatype}'")
    return _CONFIG_ORDER.index(name)


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype that holds values of wire type ``datatype``."""
    try:
        return WIRE_TO_NUMPY[datatype]
    except KeyError:
        raise InvalidArgumentError(f"unknown data type '{datatype}'") from None


def wire_from_numpy(dtype: np.dtype | type) -> str:
    """The wire name for a numpy dtype (object and bytes/str arrays -> BYTES)."""
    dt = np.dtype(dtype)
    if dt.kind in ("O", "S", "U"):
        return "BYTES"
    for name, candidate in WIRE_TO_NUMPY.items():
        if candidate == dt and name != "BF16":
            return name
    raise InvalidArgumentError(f"numpy dtype '{dt}' has no Triton data type")

"""DLPack exchange for python-model tensors (numpy for the common types, torch for BF16)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.errors import MissingDependencyError


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an optional extra
        raise MissingDependencyError("torch", "torch") from None
    return torch


def array_to_dlpack(array: np.ndarray, *, bf16: bool = False) -> Any:
    """A DLPack capsule over ``array`` (``bf16``: the uint16 bits reinterpreted by torch)."""
    if bf16:
        torch = _torch()
        bits = torch.from_numpy(np.ascontiguousarray(array).view(np.int16))
        return torch.utils.dlpack.to_dlpack(bits.view(torch.bfloat16))
    return array.__dlpack__()


def array_from_dlpack(source: Any) -> tuple[np.ndarray, bool]:
    """A host numpy array from a capsule or ``__dlpack__`` object, and whether it is BF16.

    Device tensors are copied to host memory: in-process models always exchange host arrays.
    """
    if isinstance(source, np.ndarray):
        return source, False
    if hasattr(source, "__dlpack__") and _is_torch_tensor(source) is False:
        try:
            return np.from_dlpack(source), False
        except (RuntimeError, TypeError, BufferError):
            pass
    torch = _torch()
    tensor = source if _is_torch_tensor(source) else torch.utils.dlpack.from_dlpack(source)
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16), True
    return tensor.numpy(), False


def _is_torch_tensor(source: Any) -> bool:
    return type(source).__module__.startswith("torch")

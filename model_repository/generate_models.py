"""Regenerate the binary models of this repository (seeded, idempotent).

    python model_repository/generate_models.py

writes ``linear_onnx/1/model.onnx`` (needs ``onnx``) and ``linear_torchscript/1/model.pt``
(needs ``torch``); a file is rewritten only when its bytes would change.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 0
IN_FEATURES, OUT_FEATURES = 4, 3


def linear_weights() -> tuple[np.ndarray, np.ndarray]:
    """The seeded ``W`` (4x3) and ``b`` (3) that ``linear_onnx`` computes ``x @ W + b`` with."""
    rng = np.random.default_rng(SEED)
    weight = rng.standard_normal((IN_FEATURES, OUT_FEATURES)).astype(np.float32)
    bias = rng.standard_normal(OUT_FEATURES).astype(np.float32)
    return weight, bias


def onnx_bytes() -> bytes:
    """A MatMul + Add graph, opset 17, IR version 8 (readable by onnxruntime >= 1.12)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight, bias = linear_weights()
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT", "W"], ["XW"]),
            helper.make_node("Add", ["XW", "B"], ["OUTPUT"]),
        ],
        "linear",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", IN_FEATURES])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", OUT_FEATURES])],
        initializer=[numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="workbench"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def torchscript_bytes() -> bytes:
    """A scripted ``nn.Linear(4, 3)`` seeded with ``torch.manual_seed(0)``."""
    import torch

    torch.manual_seed(SEED)
    module = torch.jit.script(torch.nn.Linear(IN_FEATURES, OUT_FEATURES).eval())
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def same_torchscript(path: Path, data: bytes) -> bool:
    """Whether two TorchScript archives hold the same code and weights.

    ``torch.jit.save`` stamps each archive with a random serialization id, so bytes differ.
    """
    import torch

    old, new = torch.jit.load(str(path)), torch.jit.load(io.BytesIO(data))
    old_state, new_state = old.state_dict(), new.state_dict()
    return (
        old.code == new.code
        and old_state.keys() == new_state.keys()
        and all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    )


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` unless it already holds that model; True if written."""
    if path.is_file():
        same = same_torchscript if path.suffix == ".pt" else lambda p, d: p.read_bytes() == d
        if same(path, data):
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def main() -> None:
    targets = {
        HERE / "linear_onnx" / "1" / "model.onnx": onnx_bytes,
        HERE / "linear_torchscript" / "1" / "model.pt": torchscript_bytes,
    }
    for path, build in targets.items():
        state = "written" if write_if_changed(path, build()) else "unchanged"
        print(f"{path.relative_to(HERE)}: {state}")


if __name__ == "__main__":
    main()

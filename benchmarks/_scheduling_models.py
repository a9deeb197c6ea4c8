"""The models ``scheduling.py`` serves, written at run time into temporary repositories.

- ``mlp_batching`` / ``mlp_no_batching``: the same batch-friendly ONNX MLP (FP32[width] through
  ``layers`` x (MatMul width x width + Relu), fixed-seed numpy weights, ``max_batch_size: 32``),
  with ``dynamic_batching`` and without it.
- ``cpu_burn_1`` / ``cpu_burn_2``: a Python-backend model whose ``execute`` spends a fixed
  number of pure-Python loop iterations per request (no sleep, GIL held throughout),
  ``max_batch_size: 0``, no dynamic batching, one and two instances.

Nothing here is committed as a binary: the ONNX file is generated with ``onnx.helper``.
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import numpy as np

MLP_BATCHING = "mlp_batching"
MLP_NO_BATCHING = "mlp_no_batching"
CPU_BURN = {1: "cpu_burn_1", 2: "cpu_burn_2"}
BURN_PARAMETER = "BURN_ITERATIONS"
#: about 5 ms of :func:`burn` on the reference machine (Xeon @ 2.5 GHz, CPython 3.11), uncontended
DEFAULT_BURN_ITERATIONS = 55_000

_MLP_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{batching}"""

_BURN_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
parameters {{ key: "{parameter}" value: {{ string_value: "{iterations}" }} }}
"""

_BURN_MODEL = '''\
"""CPU-bound: burns {parameter} pure-Python loop iterations per request, then adds one."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


{burn_source}

class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.iterations = int(parameters["{parameter}"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            # The checksum is never negative: adding the comparison keeps the loop's result used.
            out = (data + np.float32(1 + (burn(self.iterations) < 0))).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''


# --- ONNX MLP --------------------------------------------------------------------------------


def mlp_onnx(width: int, layers: int, seed: int = 0) -> bytes:
    """A serialized ONNX MLP with a dynamic batch dimension; weights from a fixed seed."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise RuntimeError("the ONNX part needs onnx: pip install -e '.[onnx]'") from error
    rng = np.random.default_rng(seed)
    nodes, weights, current = [], [], "INPUT0"
    for layer in range(layers):
        # Scaled so that activations keep their magnitude through the layers.
        weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"W{layer}"))
        output = "OUTPUT0" if layer == layers - 1 else f"hidden{layer}"
        nodes.append(helper.make_node("MatMul", [current, f"W{layer}"], [f"matmul{layer}"]))
        nodes.append(helper.make_node("Relu", [f"matmul{layer}"], [output]))
        current = output
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", width])],
        weights,
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="workbench-benchmarks")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def write_mlp_repository(
    root: Path, *, width: int, layers: int, max_batch_size: int, queue_delay_us: int
) -> Path:
    """Both MLP models (same graph; with and without dynamic batching) under ``root``."""
    graph = mlp_onnx(width, layers)
    batching = f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"
    for name, section in ((MLP_BATCHING, batching), (MLP_NO_BATCHING, "")):
        config = _MLP_CONFIG.format(
            name=name, max_batch_size=max_batch_size, width=width, batching=section
        )
        _write_model(root / name, config, "model.onnx", graph)
    return root


# --- CPU-bound Python model ------------------------------------------------------------------


def burn(iterations: int) -> int:
    # Every intermediate stays below 2**30 (one CPython digit): the cost per iteration is flat.
    total = 0
    for i in range(iterations):
        total = (total * 31 + i) % 1000003
    return total


def calibrate_burn(target_ms: float, probe_iterations: int = 10_000) -> int:
    """Iterations of :func:`burn` that take ``target_ms`` here, uncontended.

    Short probes, best of many: on a shared machine a ~1 ms probe often runs without being
    preempted, a long one rarely does.
    """
    best_ms = time_burn(probe_iterations, repeats=200)
    return max(1, round(probe_iterations * target_ms / best_ms))


def time_burn(iterations: int, repeats: int = 10) -> float:
    """Best-of-``repeats`` milliseconds of ``burn(iterations)`` in this process."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        burn(iterations)
        best = min(best, time.perf_counter() - started)
    return best * 1000.0


def write_burn_repository(root: Path, iterations: int) -> Path:
    """``cpu_burn_1`` and ``cpu_burn_2`` (one and two instances) under ``root``."""
    source = _BURN_MODEL.format(parameter=BURN_PARAMETER, burn_source=inspect.getsource(burn))
    for count, name in CPU_BURN.items():
        config = _BURN_CONFIG.format(
            name=name, count=count, parameter=BURN_PARAMETER, iterations=iterations
        )
        _write_model(root / name, config, "model.py", source.encode())
    return root


def _write_model(folder: Path, config: str, filename: str, content: bytes) -> None:
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / filename).write_bytes(content)

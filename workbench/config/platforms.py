"""Backends, platforms and default model file names, as Triton pairs them.

Triton names a framework twice: ``backend`` (the shared library that runs it) and the older
``platform``. These tables mirror ``constants.h`` and ``GetBackendTypeFromPlatform`` in
triton-inference-server/core so that validation and auto-completion agree with real Triton.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

ENSEMBLE_PLATFORM = "ensemble"
PYTHON_BACKEND = "python"
PYTHON_FILENAME = "model.py"
#: the python backend's parameter naming a model's Python environment, and the keyword in its
#: value that Triton replaces with the model's folder (``python_be.cc``)
EXECUTION_ENV_PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_KEYWORD = "$$TRITON_MODEL_DIRECTORY"

#: backend -> the platforms Triton accepts with it, each with its default model file name.
#: The first platform is the one auto-completion picks when only the backend is given.
BACKEND_PLATFORMS: dict[str, dict[str, str]] = {
    "tensorrt": {"tensorrt_plan": "model.plan"},
    "onnxruntime": {"onnxruntime_onnx": "model.onnx"},
    "pytorch": {"pytorch_libtorch": "model.pt", "torch_aoti": "model.pt2"},
    "tensorflow": {
        "tensorflow_savedmodel": "model.savedmodel",
        "tensorflow_graphdef": "model.graphdef",
    },
}

#: platform -> backend (``libtorch`` is Triton's legacy alias of ``pytorch_libtorch``).
PLATFORM_BACKENDS: dict[str, str] = {
    platform: backend for backend, platforms in BACKEND_PLATFORMS.items() for platform in platforms
} | {"libtorch": "pytorch"}

#: Files whose presence in the first version folder tells Triton the backend, in the order
#: ``AutoCompleteBackendFields`` probes them.
BACKEND_FILES: tuple[tuple[str, str], ...] = (
    ("model.plan", "tensorrt"),
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.py", PYTHON_BACKEND),
)


def execution_env_path(config: ModelConfig, model_path: Path) -> str | None:
    """The model's ``EXECUTION_ENV_PATH``, its model-directory keyword replaced (None: unset)."""
    parameter = config.parameters.get(EXECUTION_ENV_PARAMETER)
    if parameter is None or not parameter.string_value:
        return None
    return parameter.string_value.replace(MODEL_DIRECTORY_KEYWORD, str(model_path), 1)


def is_ensemble(config: ModelConfig) -> bool:
    """Whether the configuration describes an ensemble (``platform: "ensemble"``)."""
    return config.platform == ENSEMBLE_PLATFORM


def backend_name(config: ModelConfig) -> str:
    """The backend that runs this model: ``python``, ``onnxruntime``, ``pytorch``, ``tensorrt``,
    ``ensemble`` (or a custom backend's name); ``""`` when neither field says.
    """
    if config.backend:
        return config.backend
    if is_ensemble(config):
        return ENSEMBLE_PLATFORM
    return PLATFORM_BACKENDS.get(config.platform, "")


def version_folders(model_path: Path) -> list[Path]:
    """The numeric version folders of a model directory, lowest version first."""
    if not model_path.is_dir():
        return []
    found = [p for p in model_path.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def backend_from_files(model_path: Path) -> str:
    """The backend Triton infers from the files of the first version folder, or ``""``.

    Triton looks only at the first sub-folder in name order and accepts ``model.onnx`` as a
    file or a folder, the other model files as plain files only.
    """
    folders = sorted(p for p in model_path.iterdir() if p.is_dir()) if model_path.is_dir() else []
    if not folders:
        return ""
    for filename, backend in BACKEND_FILES:
        candidate = folders[0] / filename
        if candidate.is_file() or (backend == "onnxruntime" and candidate.exists()):
            return backend
    return ""

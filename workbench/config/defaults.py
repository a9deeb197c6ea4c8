"""The backend-independent part of Triton's config auto-completion and normalisation.

Mirrors, in order, ``AutoCompleteBackendFields``, ``NormalizeModelConfig`` and
``NormalizeInstanceGroup`` (triton-inference-server/core, src/model_config_utils.cc), plus
the ``model_transaction_policy`` an ensemble gets when it loads. The result is what real
Triton 2.51 returns from ``GET /v2/models/{m}/config``; ``tests/config/test_defaults.py``
compares against JSON captured from tritonserver 2.51 (python backend, no GPU).
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.config.platforms import (
    BACKEND_PLATFORMS,
    PLATFORM_BACKENDS,
    PYTHON_BACKEND,
    PYTHON_FILENAME,
    backend_from_files,
    is_ensemble,
)

#: ``SEQUENCE_IDLE_DEFAULT_MICROSECONDS`` in Triton's constants.h.
SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000
#: Backends whose CPU instance groups default to two instances (``SetDefaultInstanceCount``).
TWO_CPU_INSTANCE_BACKENDS = frozenset({"onnxruntime", "tensorflow"})

_KIND_AUTO = ModelInstanceGroup.KIND_AUTO
_KIND_CPU = ModelInstanceGroup.KIND_CPU
_KIND_GPU = ModelInstanceGroup.KIND_GPU


def fill_defaults(
    config: ModelConfig,
    *,
    gpu_count: int = 0,
    model_name: str | None = None,
    model_path: Path | None = None,
) -> None:
    """Complete ``config`` in place the way Triton does before it serves and shows a model.

    ``gpu_count`` is the number of usable GPUs (ids ``0..gpu_count-1``). ``model_name`` fills
    an empty ``name``; ``model_path`` lets the backend be inferred from the model files when
    the config names neither backend nor platform.
    """
    if not config.name and model_name:
        config.name = model_name
    _complete_backend_fields(config, model_path)
    _normalize(config)
    if is_ensemble(config):
        # Triton sets this from the composing models when it builds the ensemble (decoupled
        # if any step is); the runtime should overwrite it once it knows them.
        config.model_transaction_policy.SetInParent()
    else:
        _normalize_instance_groups(config, gpu_count)


# --- AutoCompleteBackendFields -------------------------------------------------------------


def detect_backend(config: ModelConfig, model_path: Path | None = None) -> None:
    """Fill ``backend``, ``platform`` and ``default_model_filename`` in place, as Triton does.

    The backend comes from ``platform``, else from ``default_model_filename``, else from the
    files of the first version folder under ``model_path`` (``model.py`` -> python, ...). The
    first step of ``fill_defaults``, for callers that need the backend before the rest.
    """
    _complete_backend_fields(config, model_path)


def _complete_backend_fields(config: ModelConfig, model_path: Path | None) -> None:
    if is_ensemble(config):
        return
    if not config.backend:
        config.backend = _infer_backend(config, model_path)
    if config.backend == "pytorch":
        _complete_pytorch(config)
    elif config.backend in BACKEND_PLATFORMS:
        platforms = BACKEND_PLATFORMS[config.backend]
        if not config.platform:
            config.platform = next(iter(platforms))
        if not config.default_model_filename:
            config.default_model_filename = platforms.get(config.platform, "")
    elif config.backend == PYTHON_BACKEND and not config.default_model_filename:
        config.default_model_filename = PYTHON_FILENAME


def _infer_backend(config: ModelConfig, model_path: Path | None) -> str:
    """Backend from platform, then from ``default_model_filename``, then from the files."""
    if config.platform in PLATFORM_BACKENDS:
        return PLATFORM_BACKENDS[config.platform]
    for backend, platforms in BACKEND_PLATFORMS.items():
        if config.default_model_filename in platforms.values():
            return backend
    if config.default_model_filename == PYTHON_FILENAME:
        return PYTHON_BACKEND
    if config.platform or config.default_model_filename or model_path is None:
        return ""
    backend = backend_from_files(model_path)
    if backend == "pytorch":
        # Triton sets the platform together with the backend here, and therefore (quirk
        # kept on purpose) leaves default_model_filename empty.
        config.platform = "pytorch_libtorch"
    return backend


def _complete_pytorch(config: ModelConfig) -> None:
    # Triton fills the file name only when it also fills the platform, or for torch_aoti.
    if not config.platform:
        config.platform = "pytorch_libtorch"
        if not config.default_model_filename:
            config.default_model_filename = "model.pt"
    elif config.platform == "torch_aoti" and not config.default_model_filename:
        config.default_model_filename = "model.pt2"


# --- NormalizeModelConfig ------------------------------------------------------------------


def _normalize(config: ModelConfig) -> None:
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        _default_preferred(config, config.dynamic_batching.preferred_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sequence.HasField("oldest"):
            _default_preferred(config, sequence.oldest.preferred_batch_size)
    if not config.HasField("ensemble_scheduling"):
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True


def _default_preferred(config: ModelConfig, preferred: list[int]) -> None:
    """An empty preferred batch size list becomes ``[max_batch_size]`` (when batching)."""
    if not preferred and config.max_batch_size > 0:
        preferred.append(config.max_batch_size)


# --- NormalizeInstanceGroup ----------------------------------------------------------------


def _normalize_instance_groups(config: ModelConfig, gpu_count: int) -> None:
    # Backends also hand Triton "preferred groups"; for python, onnxruntime, pytorch and
    # tensorrt they only say KIND_GPU when GPUs exist, which the KIND_AUTO rule below gives
    # anyway. A backend that prefers other counts or GPU subsets would need a table here.
    if not config.instance_group:
        # The implicit group is named after the model itself, not "<model>_0".
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == _KIND_AUTO:
            group.kind = _resolve_auto_kind(group, gpu_count)
        if group.count < 1:
            group.count = _default_count(group, config.backend)
        if group.kind == _KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpu_count))


def _resolve_auto_kind(group: ModelInstanceGroup, gpu_count: int) -> int:
    """KIND_AUTO is GPU when GPUs exist and every listed GPU id is one of them, else CPU."""
    if gpu_count > 0 and all(0 <= gpu < gpu_count for gpu in group.gpus):
        return int(_KIND_GPU)
    return int(_KIND_CPU)


def _default_count(group: ModelInstanceGroup, backend: str) -> int:
    if group.kind == _KIND_CPU and backend in TWO_CPU_INSTANCE_BACKENDS:
        return 2
    return 1

"""The backend-independent part of Triton's config normalisation (``NormalizeModelConfig``).

After this, ``/config`` shows what real Triton shows for the same model: backend/platform
pairs filled in, default version policy, named instance groups with a resolved kind,
preferred batch size, pinned-memory flags and the default model file name.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.config.model_config import is_ensemble

#: backend -> (platform Triton fills in, default model file name)
BACKEND_DEFAULTS = {
    "onnxruntime": ("onnxruntime_onnx", "model.onnx"),
    "pytorch": ("pytorch_libtorch", "model.pt"),
    "tensorrt": ("tensorrt_plan", "model.plan"),
    "python": ("", "model.py"),
}
_PLATFORM_TO_BACKEND = {platform: b for b, (platform, _) in BACKEND_DEFAULTS.items() if platform}


def detect_backend(config: ModelConfig, model_path: Path | None) -> None:
    """Set ``backend`` from ``platform``, or from the model files when both are empty."""
    if config.backend or is_ensemble(config):
        return
    if config.platform in _PLATFORM_TO_BACKEND:
        config.backend = _PLATFORM_TO_BACKEND[config.platform]
        return
    if config.platform or model_path is None:
        return
    for backend, (_, filename) in BACKEND_DEFAULTS.items():
        if any(path.is_file() for path in model_path.glob(f"[1-9]*/{filename}")):
            config.backend = backend
            return


def fill_defaults(config: ModelConfig, *, gpu_count: int = 0) -> None:
    """Normalise ``config`` in place as Triton does before serving it."""
    if not is_ensemble(config) and config.backend in BACKEND_DEFAULTS:
        platform, filename = BACKEND_DEFAULTS[config.backend]
        if not config.platform:
            config.platform = platform
        if not config.default_model_filename:
            config.default_model_filename = filename
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if is_ensemble(config):
        return
    _fill_optimization(config)
    _fill_dynamic_batching(config)
    _fill_instance_groups(config, gpu_count)


def _fill_optimization(config: ModelConfig) -> None:
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True


def _fill_dynamic_batching(config: ModelConfig) -> None:
    batching = config.dynamic_batching
    if config.HasField("dynamic_batching") and not batching.preferred_batch_size:
        if config.max_batch_size > 0:
            batching.preferred_batch_size.append(config.max_batch_size)


def _fill_instance_groups(config: ModelConfig, gpu_count: int) -> None:
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.count < 1:
            group.count = 1
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            group.kind = ModelInstanceGroup.KIND_GPU if gpu_count else ModelInstanceGroup.KIND_CPU
        if group.kind == ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpu_count))

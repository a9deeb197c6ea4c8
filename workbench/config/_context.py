"""What every validation check receives, and the ``Problem`` it reports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration.

    ``field`` is a dotted path such as ``input[0].dims`` or
    ``dynamic_batching.preferred_batch_size``; ``message`` names the model and says what to do.
    """

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Context:
    """The configuration under check, how to name it, and where its files are."""

    config: ModelConfig
    model: str
    model_name: str | None
    model_path: Path | None

    def problem(self, field: str, message: str) -> Problem:
        return Problem(field, f"model '{self.model}': {message}")

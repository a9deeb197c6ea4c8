"""``pb_utils.ModelConfig`` (auto-complete) and the config <-> JSON dict conversion.

Python models see the configuration as Triton's JSON: protobuf field names, enum names,
every field present (defaults included) and 64-bit integers as numbers.
"""

from __future__ import annotations

import json
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.config.model_config import from_json, to_json_dict
from workbench.errors import ConfigError

_INPUT_KEYS = ("name", "data_type", "dims", "optional")
_OUTPUT_KEYS = ("name", "data_type", "dims")


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The configuration as Triton hands it to Python models (``args["model_config"]``)."""
    return to_json_dict(config)


def config_from_dict(data: dict[str, Any]) -> model_config_pb2.ModelConfig:
    """Parse a configuration dict (as returned by auto-complete) into the protobuf."""
    try:
        return from_json(data)
    except ConfigError as exc:
        raise ConfigError(f"auto-completed configuration is invalid: {exc}") from None


class ModelConfig:
    """The configuration handed to ``TritonPythonModel.auto_complete_config``.

    Only ``max_batch_size``, inputs, outputs, the dynamic batcher and the transaction policy
    may change, with Triton's checks and messages.
    """

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        data = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._model_config: dict[str, Any] = data
        data.setdefault("input", [])
        data.setdefault("output", [])
        data.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict (read it; change it through the methods)."""
        return self._model_config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size``; it may not go below a non-zero configured value."""
        current = self._model_config["max_batch_size"]
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name()}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher, unless another scheduler is configured."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if self._model_config.get(scheduler):
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's name
        """Add an input, or complete the configured input of the same name."""
        self._add("input", input, _INPUT_KEYS)

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output, or complete the configured output of the same name."""
        self._add("output", output, _OUTPUT_KEYS)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled``)."""
        if set(transaction_policy_dict) - {"decoupled"}:
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{self._name()}' contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            new = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != new:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name()}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = new

    def _add(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        self._check_properties(kind, tensor, allowed)
        for current in self._model_config[kind]:
            if current["name"] == tensor["name"]:
                self._merge(kind, current, tensor)
                return
        self._model_config[kind].append(tensor)

    def _check_properties(
        self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]
    ) -> None:
        where = f"in auto-complete-config function for model '{self._name()}'"
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        for key in tensor:
            if key not in allowed:
                names = ", ".join(f"'{k}'" for k in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor['name']}' {where} contains property other than {names}."
                )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{kind} '{tensor['name']}' {where} is missing '{key}' property.")

    def _merge(self, kind: str, current: dict[str, Any], tensor: dict[str, Any]) -> None:
        name, model = tensor["name"], self._name()
        configured = current.get("data_type", "TYPE_INVALID")
        if configured != "TYPE_INVALID" and configured != tensor["data_type"]:
            raise ValueError(
                f"unable to load model '{model}', configuration expects datatype {configured} "
                f"for {kind} '{name}', model provides {tensor['data_type']}"
            )
        if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
            raise ValueError(
                f"model '{model}', tensor '{name}': the model expects dims {tensor['dims']} "
                f"but the model configuration specifies dims {current['dims']}"
            )
        current["data_type"] = tensor["data_type"]
        current["dims"] = tensor["dims"]
        if "optional" in tensor:
            current["optional"] = tensor["optional"]

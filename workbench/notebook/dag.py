"""The graph of an ensemble, as plain data: what ``Workbench.dag`` draws.

``build_graph`` turns an ensemble's ``ModelConfig``, what is known of each step's model and
the validators' problems into nodes (ensemble inputs, steps, ensemble outputs, and a node for
every tensor that nothing produces) in topological layers and edges labelled with tensor name,
data type and shape. Every problem lands on the node or edge it is about, or on the graph when
it is about the whole ensemble. No plotly here: ``dag_figure`` draws this.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

from workbench.config import Problem, backend_name
from workbench.config.dtypes import config_to_wire

INPUT, STEP, OUTPUT, MISSING = "input", "step", "output", "missing"

_STEP_FIELD = re.compile(r"^ensemble_scheduling\.step\[(\d+)\]")
_IO_FIELD = re.compile(r"^(input|output)\[(\d+)\]")
_STEP_TEXT = re.compile(r"step (\d+) \(model ")
_TENSOR_MISMATCH = re.compile(r"ensemble tensor (\S+): inconsistent")


@dataclass(frozen=True)
class StepModel:
    """What is known of the model a step calls: its config (served, else on disk; None when
    it is nowhere), its state and reason from the repository index, and its statistics."""

    config: ModelConfig | None
    state: str = ""
    reason: str = ""
    #: ``queue_us``, ``compute_infer_us``, ... per request and ``success``, after traffic
    stats: Mapping[str, float] | None = None


@dataclass
class DagNode:
    id: str
    kind: str
    label: str
    layer: int = 0
    details: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class DagEdge:
    source: str
    target: str
    tensor: str
    datatype: str = ""
    shape: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``features FP32 [-1,4]``."""
        return " ".join(part for part in (self.tensor, self.datatype, self.shape) if part)


@dataclass
class EnsembleGraph:
    name: str
    #: READY, UNAVAILABLE, ... as the repository index says, and why it is not READY
    state: str = ""
    reason: str = ""
    nodes: dict[str, DagNode] = field(default_factory=dict)
    edges: list[DagEdge] = field(default_factory=list)
    #: problems about the ensemble as a whole
    problems: list[str] = field(default_factory=list)

    def layers(self) -> list[list[DagNode]]:
        depth = max((node.layer for node in self.nodes.values()), default=-1) + 1
        return [[n for n in self.nodes.values() if n.layer == layer] for layer in range(depth)]

    def all_problems(self) -> list[str]:
        found = list(self.problems)
        found += [p for node in self.nodes.values() for p in node.problems]
        found += [p for edge in self.edges for p in edge.problems]
        return list(dict.fromkeys(found))

    @property
    def ok(self) -> bool:
        return not self.all_problems()


def _dims(dims: Iterable[int], batching: bool) -> str:
    return "[" + ",".join(str(d) for d in ([-1] if batching else []) + list(dims)) + "]"


def _spec_labels(spec: ModelInput | ModelOutput, batching: bool) -> tuple[str, str]:
    return config_to_wire(spec.data_type), _dims(spec.dims, batching)


def _step_id(index: int) -> str:
    return f"{STEP}:{index}"


def _step_layers(config: ModelConfig, writers: Mapping[str, int]) -> dict[int, int]:
    """Steps by round: a step runs once all its written inputs exist (layer 1 = first)."""
    steps = config.ensemble_scheduling.step
    ready = {spec.name for spec in config.input}
    pending, layers, layer = set(range(len(steps))), {}, 1
    while pending:
        runnable = {
            i
            for i in pending
            if all(t in ready or t not in writers for t in steps[i].input_map.values())
        }
        if not runnable:
            break
        for index in runnable:
            layers[index] = layer
            ready.update(steps[index].output_map.values())
        pending -= runnable
        layer += 1
    # Steps on a cycle never become runnable: one layer after the rest, drawn in red.
    layers.update({index: layer for index in pending})
    return layers


def _step_details(step_index: int, version: int, model: StepModel | None) -> list[str]:
    details = [f"step {step_index}", f"version {'latest' if version < 0 else version}"]
    if model is None or model.config is None:
        return [*details, "not in the repository"]
    details.insert(1, backend_name(model.config) or "unknown backend")
    details.append(model.state or "not loaded")
    stats = model.stats
    if stats and stats.get("success"):
        queue, compute = stats.get("queue_us", 0.0), stats.get("compute_infer_us", 0.0)
        details.append(f"queue {queue:.0f} us, compute {compute:.0f} us per request")
        details.append(f"({int(stats['success'])} requests so far)")
    return details


class _Builder:
    def __init__(self, config: ModelConfig, steps: Mapping[str, StepModel]) -> None:
        self.config = config
        self.steps = steps
        self.graph = EnsembleGraph(config.name)
        self.writers: dict[str, int] = {}
        for index, step in enumerate(config.ensemble_scheduling.step):
            for tensor in step.output_map.values():
                self.writers.setdefault(tensor, index)

    def build(self) -> EnsembleGraph:
        batching = self.config.max_batch_size > 0
        for spec in self.config.input:
            dtype, shape = _spec_labels(spec, batching)
            self._add(DagNode(f"{INPUT}:{spec.name}", INPUT, spec.name, 0, [dtype, shape]))
        layers = _step_layers(self.config, self.writers)
        for index, step in enumerate(self.config.ensemble_scheduling.step):
            details = _step_details(index, step.model_version, self.steps.get(step.model_name))
            self._add(DagNode(_step_id(index), STEP, step.model_name, layers[index], details))
        last = max(layers.values(), default=0) + 1
        for spec in self.config.output:
            dtype, shape = _spec_labels(spec, batching)
            self._add(DagNode(f"{OUTPUT}:{spec.name}", OUTPUT, spec.name, last, [dtype, shape]))
        self._connect()
        return self.graph

    def _add(self, node: DagNode) -> None:
        self.graph.nodes.setdefault(node.id, node)

    def _source(self, tensor: str) -> str:
        """The node producing ``tensor``: a step, an ensemble input, or a 'missing' node."""
        if tensor in self.writers:
            return _step_id(self.writers[tensor])
        if any(spec.name == tensor for spec in self.config.input):
            return f"{INPUT}:{tensor}"
        node_id = f"{MISSING}:{tensor}"
        message = f"'{tensor}' is read but is neither an ensemble input nor written by any step"
        self._add(DagNode(node_id, MISSING, tensor, 0, ["not produced"], [message]))
        return node_id

    def _connect(self) -> None:
        for index, step in enumerate(self.config.ensemble_scheduling.step):
            model = self.steps.get(step.model_name)
            for model_input, tensor in sorted(step.input_map.items()):
                edge = DagEdge(self._source(tensor), _step_id(index), tensor)
                self._label(edge, model, model_input, "input")
                self.graph.edges.append(edge)
        for spec in self.config.output:
            if spec.name in self.writers:
                edge = DagEdge(
                    _step_id(self.writers[spec.name]), f"{OUTPUT}:{spec.name}", spec.name
                )
                edge.datatype, edge.shape = _spec_labels(spec, self.config.max_batch_size > 0)
                self.graph.edges.append(edge)

    def _label(self, edge: DagEdge, model: StepModel | None, name: str, io: str) -> None:
        """Data type and shape from the producer's declaration, else the consumer's."""
        source = self.graph.nodes[edge.source]
        spec = None
        if source.kind == INPUT:
            spec = next(s for s in self.config.input if s.name == edge.tensor)
            edge.datatype, edge.shape = _spec_labels(spec, self.config.max_batch_size > 0)
            return
        if source.kind == STEP:
            producer = self.config.ensemble_scheduling.step[self.writers[edge.tensor]]
            found = self._declared(
                self.steps.get(producer.model_name), "output", producer.output_map, edge.tensor
            )
            if found is not None:
                edge.datatype, edge.shape = found
                return
        found = self._declared(model, io, {name: edge.tensor}, edge.tensor)
        if found is not None:
            edge.datatype, edge.shape = found

    @staticmethod
    def _declared(
        model: StepModel | None, io: str, mapping: Mapping[str, str], tensor: str
    ) -> tuple[str, str] | None:
        if model is None or model.config is None:
            return None
        specs = model.config.input if io == "input" else model.config.output
        names = [key for key, value in mapping.items() if value == tensor]
        spec = next((s for s in specs if s.name in names), None)
        return None if spec is None else _spec_labels(spec, model.config.max_batch_size > 0)


def _attach(graph: EnsembleGraph, config: ModelConfig, field_path: str, message: str) -> None:
    """Put one problem where it belongs: a step, an input/output, tensor edges, or the graph."""
    step = _STEP_FIELD.match(field_path)
    io = _IO_FIELD.match(field_path)
    mismatch = _TENSOR_MISMATCH.search(message)
    named_steps = [int(i) for i in _STEP_TEXT.findall(message)]
    if step is not None and _step_id(int(step.group(1))) in graph.nodes:
        graph.nodes[_step_id(int(step.group(1)))].problems.append(message)
    elif io is not None:
        specs = config.input if io.group(1) == "input" else config.output
        node = graph.nodes.get(f"{io.group(1)}:{specs[int(io.group(2))].name}")
        (node.problems if node is not None else graph.problems).append(message)
    elif mismatch is not None and any(e.tensor == mismatch.group(1) for e in graph.edges):
        carrying = [e for e in graph.edges if e.tensor == mismatch.group(1)]
        named = {_step_id(i) for i in named_steps}
        at_fault = [e for e in carrying if e.source in named or e.target in named]
        for edge in at_fault or carrying:
            edge.problems.append(message)
    elif named_steps and all(_step_id(i) in graph.nodes for i in named_steps):
        for index in dict.fromkeys(named_steps):
            graph.nodes[_step_id(index)].problems.append(message)
    else:
        graph.problems.append(message)


def build_graph(
    config: ModelConfig,
    steps: Mapping[str, StepModel],
    problems: Sequence[Problem | str] = (),
    state: str = "",
    reason: str = "",
) -> EnsembleGraph:
    """The graph of ensemble ``config``; ``problems`` are the config validator's
    ``Problem``s and the load-time checks' messages (strings)."""
    graph = _Builder(config, steps).build()
    graph.state, graph.reason = state, reason
    for problem in problems:
        if isinstance(problem, Problem):
            _attach(graph, config, problem.field, problem.message)
        else:
            _attach(graph, config, "", problem)
    for index, step in enumerate(config.ensemble_scheduling.step):
        model = steps.get(step.model_name)
        if model is not None and model.config is not None and model.state not in ("", "READY"):
            why = f": {model.reason}" if model.reason else ""
            message = f"'{step.model_name}' is {model.state}{why}"
            graph.nodes[_step_id(index)].problems.append(message)
    return graph


__all__ = [
    "INPUT",
    "MISSING",
    "OUTPUT",
    "STEP",
    "DagEdge",
    "DagNode",
    "EnsembleGraph",
    "StepModel",
    "build_graph",
]

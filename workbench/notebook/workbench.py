"""``Workbench``: a model repository served in the background, driven from a notebook.

Everything after start-up goes through Triton's public HTTP API (``tritonclient.http``), so
what works here works against a real tritonserver. The server runs in its own thread and loop
(``workbench.server.hosting.Server``); this object is the synchronous face the kernel talks to.
The server stops on ``stop()``, at interpreter exit and so when the kernel shuts down.
"""

from __future__ import annotations

import atexit
import collections
import html
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench.bench import tables
from workbench.config import parse_pbtxt, read_config
from workbench.errors import NotFoundError, UnavailableError, UnsupportedError, WorkbenchError
from workbench.notebook.config_editor import ConfigEditor
from workbench.notebook.explain import explained, infer_details, model_details
from workbench.notebook.model_export import export_onnx, export_torch
from workbench.notebook.model_rows import MODEL_COLUMNS, model_rows
from workbench.notebook.remote import RemoteServer, refused_control
from workbench.notebook.trace_view import trace_directory
from workbench.notebook.triton_http import STATS_COLUMNS, TritonHttp
from workbench.server.hosting import Server

#: requests kept per model for promote's verification replay
HISTORY_LENGTH = 8


class Workbench:
    """Serve ``repository`` on loopback (ephemeral ports) and work with its models.

    Models load in Triton's ``explicit`` control mode with ``--load-model=*``: everything in the
    repository loads at start, and ``load``/``unload``/``edit`` change what serves afterwards.
    ``server_options`` go to ``Server`` (``cache_size``, ``rate_limit``, ...).

    ``engine="tritonserver"`` hosts real Triton instead (a ``tritonserver`` found as
    ``workbench.export.find_tritonserver`` does, or the ``tritonserver=`` path), on ephemeral
    loopback ports, its log in ``server.log_path``; it stops with ``stop()`` or the kernel.
    ``Workbench.attach()`` uses the Jupyter server extension's server and
    ``Workbench.connect(url, repository=...)`` a Triton server that runs elsewhere.
    """

    def __init__(
        self,
        repository: StrPath,
        *,
        host: str = "127.0.0.1",
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        start: bool = True,
        engine: str = "workbench",
        tritonserver: StrPath | None = None,
        **server_options: Any,
    ) -> None:
        self.repository = Path(repository)
        self.engine = engine
        #: the last sweep per model and recent ``infer`` inputs: ``promote`` evidence and replay
        self.sweeps: dict[str, Any] = {}
        self.history: dict[str, collections.deque[dict[str, Any]]] = {}
        self._http: TritonHttp | None = None
        self._traces = trace_directory()  # trace() reads the server's trace files there
        trace_config = [f"triton,file={self._traces / 'trace.json'}"]
        self.server: Any
        if engine != "workbench":
            from workbench.notebook.engine import triton_engine

            self.server = triton_engine(
                self.repository, engine, host, tritonserver, server_options, trace_config
            )
            if start:
                self.start()
            return
        options: dict[str, Any] = {
            "http_port": http_port,
            "grpc_port": grpc_port,
            "metrics_port": metrics_port,
            "host": host,
            "model_control_mode": "explicit",
            "load_model": ["*"],
            "trace_config": trace_config,
        }
        options.update(server_options)
        self.server = Server(self.repository, **options)
        if start:
            self.start()

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> Workbench:
        """Start the server (done by the constructor unless ``start=False``)."""
        if not self.server.running:
            self.server.start()
            atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop the server and unload every model; calling it again does nothing."""
        atexit.unregister(self.stop)
        if self._http is not None:
            self._http.close()
            self._http = None
        self.server.stop()
        shutil.rmtree(self._traces, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.server.running

    @property
    def remote(self) -> bool:
        """Whether the server runs elsewhere and cannot read this repository's files
        (``connect()``, or ``attach()`` to an extension whose engine is a URL): a new
        configuration then travels with its load, as an override."""
        from workbench.notebook.discovery import AttachedServer

        if isinstance(self.server, AttachedServer):
            return self.server.found.engine == "remote"
        return isinstance(self.server, RemoteServer)

    def __enter__(self) -> Workbench:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- endpoints -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (KServe v2 + Triton extensions)."""
        return self.server.url

    @property
    def grpc_url(self) -> str | None:
        """``127.0.0.1:PORT`` of the gRPC endpoint, or None when it is off (``allow_grpc``)."""
        return self.server.grpc_url if self.server.grpc_port else None

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus metrics URL, or None when it is off (``allow_metrics``)."""
        return self.server.metrics_url if self.server.metrics_port else None

    def client(self, protocol: str = "http") -> Any:
        """A new ``tritonclient`` client (``"http"`` or ``"grpc"``) pointed at this server."""
        if protocol == "http":
            import tritonclient.http

            return tritonclient.http.InferenceServerClient(url=self.server.http_address)
        if protocol == "grpc":
            if self.grpc_url is None:
                raise UnavailableError("this server has no gRPC endpoint")
            import tritonclient.grpc

            return tritonclient.grpc.InferenceServerClient(url=self.grpc_url)
        raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")

    @property
    def http(self) -> TritonHttp:
        """The facade's own HTTP link (plain values, library errors)."""
        if not self.running:
            raise UnavailableError("the workbench is stopped; call start()")
        if self._http is None:
            self._http = TritonHttp(self.server.http_address)
        return self._http

    # -- models --------------------------------------------------------------------------------
    def models(self) -> Any:
        """The repository index as a DataFrame: name, version, state, backend, platform,
        max_batch_size, reason (one row per version, one per model not loaded)."""
        return tables.to_frame(model_rows(self.http, self.model_dir), MODEL_COLUMNS)

    def config(self, name: str, version: str = "") -> ModelConfig:
        """The model's configuration as the server sees it (defaults filled in). A model that
        cannot answer raises with the reason (near names for an unknown one), short in a
        notebook."""
        try:
            return self.http.config(name, version)
        except WorkbenchError as exc:
            raise explained(exc, model_details(self.http, name, version)) from None

    def infer(
        self,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> dict[str, np.ndarray]:
        """One inference; ``inputs`` maps names to arrays (lists and strings are accepted).

        A failure raises the server's error with what the model expects and a suggestion
        where one is obvious (in a notebook: that short block, without library frames)."""
        try:
            result = self.http.infer(name, inputs, outputs, version)
        except WorkbenchError as exc:
            details = infer_details(exc, self.http, name, inputs, outputs, version)
            raise explained(exc, details) from None
        if not version:
            recent = self.history.setdefault(name, collections.deque(maxlen=HISTORY_LENGTH))
            recent.append(dict(inputs))
        return result

    def load(self, name: str, config: ModelConfig | str | None = None) -> None:
        """Load or reload ``name``; ``config`` (a ModelConfig or pbtxt text) overrides the
        file on disk for this load, as Triton's load API does. A failure keeps what was serving
        and raises with the server's reason."""
        if isinstance(config, str):
            config = parse_pbtxt(config, source=f"{name} (config override)")
        try:
            self.http.load(name, config)
        except WorkbenchError as exc:
            raise self._refused(exc) or type(exc)(self._with_reason(name, str(exc))) from None

    def _refused(self, exc: WorkbenchError) -> WorkbenchError | None:
        """``ModelControlRefused`` when the server is not in explicit model-control mode."""
        return refused_control(str(exc), self.url)

    def _with_reason(self, name: str, message: str) -> str:
        """Add what the index or the embedded server knows when Triton's answer is generic."""
        reason = self.http.reason(name)
        record = self.server.core.models.record(name) if self.server.core is not None else None
        if not reason and record is not None:
            reason = record.reason
        return f"{message.rstrip()}: {reason}" if reason and reason not in message else message

    def unload(self, name: str) -> None:
        """Unload ``name`` (it stays in the repository, UNAVAILABLE)."""
        try:
            self.http.unload(name)
        except WorkbenchError as exc:
            raise self._refused(exc) or exc from None

    def stats(self, name: str = "", version: str = "") -> Any:
        """Inference statistics per model version as a DataFrame (all models by default);
        durations are averages per request in microseconds."""
        return tables.to_frame(self.http.statistics(name, version), STATS_COLUMNS)

    def model_dir(self, name: str) -> Path:
        """The model's folder in the repository."""
        path = self.repository / name
        if not (path / "config.pbtxt").is_file():
            raise NotFoundError(f"model '{name}' has no config.pbtxt in '{self.repository}'")
        return path

    # -- editing and adding models -------------------------------------------------------------
    def edit(self, name: str) -> ConfigEditor:
        """A ``ConfigEditor`` for the model's ``config.pbtxt`` (a widget in a notebook).

        On a remote server ``apply()`` writes the local file, then loads it as an override."""
        return ConfigEditor(name, self.model_dir(name), reload=self._reload_edited)

    def _reload_edited(self, name: str) -> None:
        """Load the file the editor just wrote: a server that reads this repository reads it
        itself; a remote one gets its content with the load."""
        config = read_config(self.model_dir(name) / "config.pbtxt") if self.remote else None
        self.load(name, config)

    def trace(self, name: str, requests: int = 10, **options: Any) -> Any:
        """Trace ``requests`` inferences of ``name`` (Triton's trace extension): a ``TraceReport``
        draws each request's timeline (queue, compute, ensemble steps) and sums up where time
        goes. ``inputs=``/``shapes=`` as for ``sweep``; real Triton too (its file read here)."""
        from workbench.notebook.trace_view import trace_model

        return trace_model(self.server.http_address, name, requests, **options)

    def dag(self, name: str) -> Any:
        """The ensemble ``name`` as a plotly figure: inputs, steps and outputs in topological
        layers, tensors on the edges, the validator's problems in red, per-step times from
        the statistics. Works on an ensemble that does not load (its config is read from disk).
        """
        from workbench.notebook.dag_figure import draw_graph
        from workbench.notebook.dag_source import ensemble_graph

        return draw_graph(ensemble_graph(self, name))

    def sweep(
        self,
        name: str,
        *,
        max_batch_size: int | Sequence[int] | None = None,
        max_queue_delay_microseconds: int | Sequence[int] | None = None,
        instance_count: int | Sequence[int] | None = None,
        concurrency: int | Sequence[int] = (1, 4, 16),
        duration_s: float = 3.0,
        protocol: str = "http",
        inputs: Mapping[str, Any] | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        warmup_s: float | None = None,
        live: bool | None = None,
        trace_requests: int = 0,
    ) -> Any:
        """Measure ``name`` at every combination of the config settings and concurrency levels
        on a scratch copy (the model's files are untouched until ``result.apply_best()``).
        With ``trace_requests=N``, N requests are traced at each configuration after its
        warm-up (Triton's trace extension): ``result.trace(point)`` shows where time goes there.

        Returns a ``SweepResult``. In a notebook the sweep runs in the background, drawn live
        with a progress bar and a Stop button (``result.wait()`` blocks until it ends);
        elsewhere, or with ``live=False``, this returns when it is done. Inputs are made up
        from the model's metadata; dynamic dims need ``inputs=`` (arrays by input name) or
        ``shapes=`` (dims without the batch dimension).
        """
        from workbench.bench.runner import SweepSpec
        from workbench.notebook.sweep_session import run_sweep

        settings = {
            "max_batch_size": max_batch_size,
            "max_queue_delay_microseconds": max_queue_delay_microseconds,
            "instance_count": instance_count,
        }
        spec = SweepSpec.plan(
            name,
            self.model_dir(name),
            settings=settings,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            protocol=protocol,
            inputs=inputs,
            shapes=shapes,
            trace_requests=trace_requests,
        )
        self.sweeps[name] = result = run_sweep(self, spec, live=live)
        return result

    # -- production ----------------------------------------------------------------------------
    def promote(
        self,
        dest: StrPath,
        models: Sequence[str] | None = None,
        versions: Any = "latest",
        **options: Any,
    ) -> Any:
        """Export the READY models (or ``models``, ensembles with their steps) to the
        production repository ``dest`` and verify them on real Triton when a tritonserver is
        found; returns a ``PromoteReport``. Options are those of ``workbench.export.promote``
        (``on_conflict``, ``version_policy``, ``verify``, ``deploy``, ...); the sweeps run here
        become the manifest's evidence and recent ``infer`` inputs are replayed."""
        from workbench.export import promote

        options.setdefault("sweeps", self.sweeps)
        options.setdefault("requests", {k: list(v) for k, v in self.history.items()})
        return promote(
            self.repository,
            dest,
            models=models,
            versions=versions,
            server_address=self.server.http_address,
            index=self.http.index(),
            **options,
        )

    def compare(self, other: Workbench, name: str, **sweep_options: Any) -> Any:
        """Sweep ``name`` here and on ``other`` (e.g. ``engine="tritonserver"``) with the same
        options, one after the other; the ``EngineComparison``'s ``figure`` draws both."""
        from workbench.notebook.engine_compare import compare_engines

        return compare_engines([self, other], name, **sweep_options)

    def add_onnx(self, path: StrPath, name: str, **options: Any) -> Path:
        """Copy an ONNX file into this repository with a generated config, and load it."""
        self._require_shared_files("add_onnx")
        folder = export_onnx(path, self.repository, name, **options)
        self.load(name)
        return folder

    def add_torch(self, module: Any, example_inputs: Any, name: str, **options: Any) -> Path:
        """Export a torch module into this repository (``via="onnx"|"torchscript"``), load it."""
        self._require_shared_files("add_torch")
        folder = export_torch(module, example_inputs, self.repository, name, **options)
        self.load(name)
        return folder

    def _require_shared_files(self, action: str) -> None:
        if self.remote:
            raise UnsupportedError(
                f"{action}() writes a new model into {self.repository}, which the remote server "
                f"at {self.url} cannot read: copy the model into its repository, then load it"
            )

    @classmethod
    def attach(cls) -> Workbench:
        """The server of the Jupyter server extension (found through the Jupyter runtime dir,
        this Jupyter server's first), shared by every notebook and kept across kernel
        restarts: ``stop()`` detaches without stopping it. ``NotFoundError`` when none runs."""
        from workbench.notebook.discovery import AttachedServer, running_server

        found = running_server()
        bench = cls(found.model_repository, start=False)
        bench.server = AttachedServer(found)
        return bench

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        repository: StrPath,
        grpc_url: str | None = None,
        metrics_url: str | None = None,
    ) -> Workbench:
        """Drive the Triton server at ``url`` (``http://gpu-box:8000``) that runs elsewhere,
        with the same models, editor, sweeps and promote, as Model Analyzer's remote mode does.

        ``repository`` is your local copy of the server's model repository: configurations
        come from it and ``apply()``/``promote()`` write it; the server gets each new
        configuration as a ``config`` override of its load API and its own files are never
        touched. It must run in explicit model-control mode (``ModelControlRefused`` says so
        when it does not). A sweep reloads the model itself with each point's configuration
        and loads back what it served before. ``stop()`` only disconnects. gRPC and metrics
        addresses are not guessed; give them to use them (``grpc_url="gpu-box:8001"``)."""
        if not Path(repository).is_dir():
            raise NotFoundError(f"no local copy of the model repository at '{repository}'")
        bench = cls(repository, start=False)
        bench.server = RemoteServer(url, grpc_url, metrics_url)
        bench.engine = "remote"
        return bench.start()

    @classmethod
    def from_onnx(cls, path: StrPath, repository: StrPath, name: str, **options: Any) -> Workbench:
        """Write the ONNX model into ``repository`` (generated config) and serve it."""
        export_onnx(path, repository, name, **options)
        return cls(repository)

    @classmethod
    def from_torch(
        cls,
        module: Any,
        example_inputs: Any,
        repository: StrPath,
        name: str,
        *,
        via: str = "onnx",
        **options: Any,
    ) -> Workbench:
        """Export ``module`` into ``repository`` via ONNX or TorchScript and serve it."""
        export_torch(module, example_inputs, repository, name, via=via, **options)
        return cls(repository)

    # -- display -------------------------------------------------------------------------------
    def _endpoint_rows(self) -> list[dict[str, str]]:
        endpoints = [("HTTP", self.url), ("gRPC", self.grpc_url), ("metrics", self.metrics_url)]
        return [{"endpoint": kind, "url": url} for kind, url in endpoints if url]

    def _display_models(self) -> list[dict[str, Any]] | str:
        if not self.running:
            return "stopped"
        try:
            return model_rows(self.http, self.model_dir)
        except WorkbenchError as exc:
            return f"models unavailable: {exc}"

    def __repr__(self) -> str:
        head = f"Workbench('{self.repository}', {'running' if self.running else 'stopped'})"
        models = self._display_models()
        if isinstance(models, str):
            return head
        endpoints = tables.text_table(self._endpoint_rows(), ("endpoint", "url"))
        return f"{head}\n{endpoints}\n\n{tables.text_table(models, MODEL_COLUMNS)}"

    def _repr_html_(self) -> str:
        title = f"<b>Workbench</b> <code>{html.escape(str(self.repository))}</code>"
        models = self._display_models()
        if isinstance(models, str):
            return f"{title} ({html.escape(models)})"
        endpoints = tables.html_table(self._endpoint_rows(), ("endpoint", "url"))
        return f"{title}{endpoints}{tables.html_table(models, MODEL_COLUMNS)}"


__all__ = ["MODEL_COLUMNS", "Workbench"]

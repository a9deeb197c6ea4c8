"""The facade's promote, the tritonserver engine (a sweep on real Triton) and compare()."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench.errors import InvalidArgumentError
from workbench.notebook import Workbench

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"


@pytest.fixture
def text_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "text_python", root / "text_python")
    return root


@pytest.fixture(scope="module")
def tritonserver_path() -> Path:
    from tests.integration.peers import PeersUnavailable, prepare

    try:
        return prepare().tritonserver
    except PeersUnavailable as error:
        pytest.skip(f"real tritonserver unavailable: {str(error).splitlines()[-1]}")


def test_bench_promote_carries_sweep_evidence_and_replays_history(
    text_repo: Path, tmp_path: Path
) -> None:
    with Workbench(text_repo) as bench:
        bench.infer("text_python", {"TEXT": np.array([["Recorded"]], dtype=object)})
        result = bench.sweep(
            "text_python", max_batch_size=[4, 8], concurrency=[1], duration_s=0.3, live=False
        )
        best = result.apply_best(bench)
        report = bench.promote(tmp_path / "prod", verify=False)
    assert report.committed and [m.model for m in report.models] == ["text_python"]
    manifest = json.loads((tmp_path / "prod" / "MANIFEST.json").read_text())
    sweep = manifest["models"]["text_python"]["sweep"]
    assert sweep["settings"] == dict(best.settings) and sweep["applied"] is True
    assert sweep["throughput"] > 0 and sweep["p99_ms"] > 0 and sweep["points"] == 2
    assert 0 < sweep["host_cpu"] <= 1  # how busy this machine was at that point
    assert list(bench.history["text_python"])[0]["TEXT"].tolist() == [["Recorded"]]


def test_an_unknown_engine_is_refused(text_repo: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="engine must be one of"):
        Workbench(text_repo, engine="onnx", start=False)


def test_tritonserver_engine_runs_a_sweep_and_compares(
    text_repo: Path, tritonserver_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="no embedded-server options"):
        Workbench(text_repo, engine="tritonserver", tritonserver=tritonserver_path, cache_size=1)
    triton = Workbench(text_repo, engine="tritonserver", tritonserver=tritonserver_path)
    try:
        assert triton.running and triton.server.pid
        upper = triton.infer("text_python", {"TEXT": np.array([["abc"]], dtype=object)})
        assert upper["UPPER"].tolist() == [[b"ABC"]]
        result = triton.sweep(
            "text_python", max_batch_size=[4], concurrency=[1, 2], duration_s=0.3, live=False
        )
        assert len(result.rows) == 2 and all(row["throughput"] > 0 for row in result.rows)
        with Workbench(text_repo) as embedded:
            comparison = embedded.compare(triton, "text_python", concurrency=[1], duration_s=0.3)
        assert set(comparison.results) == {"workbench", "tritonserver"}
        assert sorted({t.name for t in comparison.figure.data}) == ["tritonserver", "workbench"]
        assert set(comparison.df["engine"]) == {"workbench", "tritonserver"}
        assert f"Started HTTPService at {triton.server.http_address}" in triton.server.log_text()
    finally:
        triton.stop()
    assert not triton.running

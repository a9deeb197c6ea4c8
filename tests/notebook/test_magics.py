"""``%load_ext workbench``: ``%workbench`` and ``%%pbtxt``, as a controller and in IPython."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.core.conftest import write_add_model
from workbench.errors import NotFoundError
from workbench.notebook import Workbench
from workbench.notebook.magics import MagicError, MagicSession


@pytest.fixture
def session(bench: Workbench) -> MagicSession:
    return MagicSession(namespace={"bench": bench, "other": 1})


def _cell(bench: Workbench, name: str, old: str, new: str) -> str:
    text = (bench.model_dir(name) / "config.pbtxt").read_text()
    assert old in text
    return text.replace(old, new, 1)


def test_pbtxt_writes_the_cell_and_reloads(
    session: MagicSession, bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    cell = "# tuned from a cell\n" + _cell(
        bench, name, "delay_microseconds: 100", "delay_microseconds: 250"
    )
    outcome = session.pbtxt(name, cell)
    assert outcome.applied and "+dynamic_batching { max_queue_delay_microseconds: 250 }" in (
        outcome.diff
    )
    assert (bench.model_dir(name) / "config.pbtxt").read_text() == cell  # comment kept
    assert bench.config(name).dynamic_batching.max_queue_delay_microseconds == 250
    assert session.pbtxt(name, cell).diff == ""  # the same cell again: nothing to do


def test_pbtxt_refuses_an_invalid_cell_naming_its_line(
    session: MagicSession, bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    before = (bench.model_dir(name) / "config.pbtxt").read_text()
    cell = _cell(bench, name, "dims: [ 4 ]", "dims: [ 5 ]")
    with pytest.raises(MagicError) as refused:
        session.pbtxt(name, cell)
    message = str(refused.value)
    assert message.startswith(f"{name}: not written, the config is invalid:\n  line 5: input")
    assert "the model expects 2 dimensions (shape [-1,4])" in message
    with pytest.raises(MagicError, match=r"does not parse as config.pbtxt: .*:3:"):
        session.pbtxt(name, 'name: "x"\nmax_batch_size: 8\ninput [ { name: }\n')
    assert (bench.model_dir(name) / "config.pbtxt").read_text() == before
    assert bench.models().set_index("name").loc[name, "state"] == "READY"


def test_pbtxt_dry_run_only_checks_and_diffs(
    session: MagicSession, bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    before = (bench.model_dir(name) / "config.pbtxt").read_text()
    cell = _cell(bench, name, "count: 1", "count: 2")
    outcome = session.pbtxt(f"{name} --dry-run", cell)
    assert not outcome.applied and "count: 2" in outcome.diff
    assert str(outcome).startswith("not written (--dry-run)")
    assert (bench.model_dir(name) / "config.pbtxt").read_text() == before


def test_magics_find_the_users_workbench_or_say_how_to_start_one(bench: Workbench) -> None:
    assert MagicSession(namespace={"mine": bench}).current() is bench
    with pytest.raises(MagicError, match="%workbench serve"):
        MagicSession(namespace={}).current()
    with pytest.raises(MagicError, match="unknown %workbench command 'strat'"):
        MagicSession().run_line("strat")
    assert "%%pbtxt MODEL" in MagicSession().run_line("")


def test_serve_status_stop(tmp_path: Path) -> None:
    write_add_model(tmp_path / "repo", "add")
    session = MagicSession()
    with pytest.raises(MagicError, match="no model repository at"):
        session.run_line(f"serve {tmp_path / 'missing'}")
    bench = session.run_line(f"serve {tmp_path / 'repo'} metrics_port=0")
    try:
        assert bench.running and session.run_line("status") is bench
        with pytest.raises(MagicError, match="already running"):
            session.run_line(f"serve {tmp_path / 'repo'}")
        assert bench.models().set_index("name").loc["add", "state"] == "READY"
    finally:
        assert session.run_line("stop") == f"stopped the server at {bench.url}"
    assert not bench.running


def test_attach_says_why_when_there_is_no_extension_server(bench: Workbench) -> None:
    def no_server() -> Workbench:
        raise NotFoundError("no Triton Workbench server of a Jupyter server was found")

    session = MagicSession(attacher=no_server)
    with pytest.raises(MagicError, match="^attach: no Triton Workbench server"):
        session.run_line("attach")
    attached = MagicSession(attacher=lambda: bench)
    assert attached.run_line("attach") is bench and attached.current() is bench
    with pytest.raises(MagicError, match=f"a server attached to {bench.url}; %workbench stop"):
        attached.run_line("attach")
    assert "%workbench attach" in attached.run_line("help")


def test_sweep_shorthand_runs_the_sweep(session: MagicSession) -> None:
    result = session.run_line("sweep add concurrency=1,2 duration_s=0.3 warmup_s=0 live=false")
    frame = result.df
    assert sorted(frame["concurrency"].tolist()) == [1, 2]
    with pytest.raises(MagicError, match="sweep: .*unexpected keyword argument 'speed'"):
        session.run_line("sweep add speed=3")


@pytest.fixture
def shell(bench: Workbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A terminal-less IPython shell (no kernel), its profile in a temporary folder."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    shell = InteractiveShell.instance(history_manager=None)
    shell.user_ns["bench"] = bench
    try:
        yield shell
    finally:
        InteractiveShell.clear_instance()


def test_ipython_registers_both_magics_and_errors_are_one_line(
    shell: object,
    bench: Workbench,
    new_model: Callable[[], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from IPython.core.error import UsageError

    name = new_model()
    run = shell.run_cell  # type: ignore[attr-defined]
    assert run("%load_ext workbench").success
    assert run("%workbench status").result is bench
    cell = _cell(bench, name, "count: 1", "count: 2")
    applied = run(f"%%pbtxt {name}\n{cell}")
    assert applied.success and applied.result.applied
    assert bench.config(name).instance_group[0].count == 2
    refused = run(f"%%pbtxt {name}\n" + cell.replace("dims: [ 4 ]", "dims: [ 5 ]"))
    assert isinstance(refused.error_in_exec, UsageError)
    shown = capsys.readouterr()
    assert "UsageError: " in shown.err + shown.out and "Traceback" not in shown.err + shown.out

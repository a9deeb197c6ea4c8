"""The distribution's metadata says what the code uses (issue #14).

Every third-party module that ``workbench`` imports (at the top of a module or inside a
function) comes from a declared dependency, every core dependency is imported by the package
itself, and the bounds tritonclient 2.51 forces are stated in the core dependencies. An
editable install builds without a warning from setuptools.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: modules of optional distributions that may not be installed here (GPU machines only)
NOT_INSTALLED_HERE = {"tensorrt": "tensorrt", "pynvml": "nvidia-ml-py"}
#: the python backend's module, provided by our shim to model code
PROVIDED = {"triton_python_backend_utils"}
#: declared for what they are, not for an import: the JupyterLab application itself,
#: onnx, which ``torch.onnx.export`` needs for ``from_torch(..., format="onnx")``, and
#: anywidget, which plotly's ``FigureWidget`` needs (plotly 6 raises ImportError without it)
NOT_IMPORTED = {"jupyterlab", "onnx", "anywidget"}
#: conda packages environment.yml adds to build the project itself (the JupyterLab extension),
#: not Python requirements
BUILD_TOOLS = {"nodejs"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _imports(folder: Path) -> set[str]:
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
            elif _is_import_module_call(node):
                found.add(node.args[0].value.split(".")[0])  # type: ignore[attr-defined]
    return found - set(sys.stdlib_module_names) - {"workbench", "__future__"} - PROVIDED


def _is_import_module_call(node: ast.AST) -> bool:
    """``importlib.import_module("name")`` with a literal name (an optional import)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def _distributions(modules: set[str]) -> dict[str, set[str]]:
    """Module → the distributions that provide it (normalised names)."""
    table = importlib.metadata.packages_distributions()
    result = {}
    for module in modules:
        names = table.get(module) or [NOT_INSTALLED_HERE.get(module, "")]
        result[module] = {re.sub(r"[-_.]+", "-", n).lower() for n in names if n}
    return result


CORE = {_name(r) for r in PROJECT["dependencies"]}
EXTRAS = {
    extra: {_name(r) for r in requirements}
    for extra, requirements in PROJECT["optional-dependencies"].items()
}
DECLARED = CORE.union(*EXTRAS.values())


def test_every_imported_module_comes_from_a_declared_distribution() -> None:
    undeclared = {
        module: dists
        for module, dists in _distributions(_imports(ROOT / "workbench")).items()
        if not dists & DECLARED
    }
    assert undeclared == {}


def test_every_core_dependency_is_imported_by_the_package() -> None:
    imported = set().union(*_distributions(_imports(ROOT / "workbench")).values())
    assert CORE - imported == set()


def test_every_runtime_extra_is_imported_by_the_package() -> None:
    """The extras users install for a feature (not ``test``, the tools the test command runs)."""
    imported = set().union(*_distributions(_imports(ROOT / "workbench")).values())
    runtime = set().union(*(d for extra, d in EXTRAS.items() if extra not in ("test", "all")))
    # onnxruntime-gpu provides the same ``onnxruntime`` module as onnxruntime
    assert runtime - imported - NOT_IMPORTED - {"onnxruntime-gpu"} == set()


def test_tritonclients_bounds_are_core_bounds() -> None:
    specs = {_name(r): Requirement(r).specifier for r in PROJECT["dependencies"]}
    assert not specs["numpy"].contains("2.0.0") and specs["numpy"].contains("1.26.4")
    assert not specs["protobuf"].contains("5.26.0") and specs["protobuf"].contains("4.25.3")


def _bounds(requirements: list[str]) -> dict[str, str]:
    table: dict[str, set[str]] = {}
    for line in requirements:
        requirement = Requirement(line)
        table.setdefault(_name(line), set()).add(str(requirement.specifier))
    assert all(len(specs) == 1 for specs in table.values()), table  # one bound per name
    return {name: specs.pop() for name, specs in table.items()}


def test_environment_yml_installs_what_pip_installs() -> None:
    import yaml

    environment = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    conda = [d for d in environment if isinstance(d, str) and d not in ("pip",)]
    conda = [d for d in conda if not d.startswith("python=") and _name(d) not in BUILD_TOOLS]
    pip = [d for d in environment if isinstance(d, dict)][0]["pip"]
    listed = _bounds(conda + [d for d in pip if not d.startswith("-e")])
    extras = PROJECT["optional-dependencies"]
    installed = [*PROJECT["dependencies"]]
    for extra in Requirement(extras["all"][0]).extras:  # what ".[all]" installs
        installed += extras[extra]
    assert listed == _bounds(installed)


def test_the_package_says_the_distribution_s_version() -> None:
    from workbench import __version__

    assert __version__ == PROJECT["version"]


#: what an editable build reads: the package, the metadata, setup.py and its data files
_BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "workbench", "jupyter-config")
_BUILD_EDITABLE = "from setuptools.build_meta import build_editable; print(build_editable('.'))"


def test_an_editable_install_builds_without_a_setuptools_warning(tmp_path: Path) -> None:
    """``pip install -e .`` runs this hook: with ``-W error`` a SetuptoolsDeprecationWarning
    (``project.license`` as a table) or the notice of an import-hook install is an error. The
    wheel puts the checkout on ``sys.path`` with one ``.pth`` line, no finder module."""
    pytest.importorskip("setuptools", reason="setuptools is not installed")
    project = tmp_path / "project"
    for name in _BUILD_INPUTS:
        source, target = ROOT / name, project / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    package_json = Path("extensions", "labextension", "package.json")
    (project / package_json).parent.mkdir(parents=True)
    shutil.copy2(ROOT / package_json, project / package_json)
    built = subprocess.run(
        [sys.executable, "-W", "error", "-c", _BUILD_EDITABLE],
        cwd=project,
        env={**os.environ, "WORKBENCH_SKIP_LABEXTENSION": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    with zipfile.ZipFile(project / built.stdout.splitlines()[-1]) as wheel:
        names = wheel.namelist()
        [pth] = [n for n in names if n.endswith(".pth")]
        assert wheel.read(pth).decode().strip() == str(project)
    assert not [n for n in names if n.endswith("_finder.py")], names

"""The wheel and sdist ``make dist`` builds install and run outside the checkout.

The build runs once per session: ``make dist`` itself, with the suite's interpreter as its
``.venv`` and a temporary folder as its ``dist/``. The wheel must carry every data file the package
reads at run time (the Valkey Lua scripts, the Avro schema, the console's templates and static
files: every file under ``src/lockgate`` that is not Python), and so must the sdist. Then the
wheel goes into a fresh virtualenv (pip fetches pydantic, from its cache when it can), and
that virtualenv's ``lockgate --version`` and an inline workflow run from a folder outside the
checkout, with nothing of the checkout on their path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import lockgate

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lockgate"
#: Seconds a build or an install may take on a loaded machine.
DEADLINE = 300

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import importlib.resources
    import sys

    import lockgate
    from lockgate import InlineWorkflowRunner, MemoryStore, WorkflowContext, step, workflow

    @step
    async def double(n: int) -> int:
        return 2 * n

    @workflow(name="dist_check")
    async def dist_check(ctx: WorkflowContext, n: int) -> int:
        return await double(n) + 1

    async def main() -> None:
        runner = InlineWorkflowRunner(store=MemoryStore(), workflows=[dist_check])
        handle = await runner.client.submit("dist_check", {"n": 20})
        print("result", await handle.result(timeout=30))

    asyncio.run(main())
    print("module", lockgate.__file__)
    # What the package reads at run time, read as it reads it: through importlib.resources.
    for name in sys.argv[1:]:
        text = importlib.resources.files("lockgate").joinpath(name).read_text()
        print("read", name, len(text))
    """
)


def data_files() -> list[str]:
    """Every file of the package that is not Python, relative to ``src/``."""
    return sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    )


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout built once: a folder with its wheel and sdist."""
    # make's VENV is the suite's environment: its bin/python must be there, or make would set
    # up a virtualenv in its place.
    if not (Path(sys.prefix) / "bin" / "python").is_file():
        pytest.fail(f"run the suite from a virtualenv (make test does): {sys.prefix}/bin/python")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        ["make", "-C", str(ROOT), "dist", f"VENV={sys.prefix}", f"DIST={out}"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def only(folder: Path, pattern: str) -> Path:
    [found] = folder.glob(pattern)
    return found


def test_the_wheel_and_the_sdist_carry_every_data_file(dist: Path) -> None:
    wanted = data_files()
    # The kinds the package cannot run without are among them.
    for kind in ("stores/valkey/lua/", "stores/kafka/run_event.avsc", "console/templates/"):
        assert any(kind in name for name in wanted), kind
    version = lockgate.__version__
    wheel = only(dist, f"lockgate-{version}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    assert [name for name in wanted if name not in in_wheel] == []
    sdist = only(dist, f"lockgate-{version}.tar.gz")
    with tarfile.open(sdist) as archive:
        in_sdist = {name.removeprefix(f"lockgate-{version}/src/") for name in archive.getnames()}
    assert [name for name in wanted if name not in in_sdist] == []


def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_checkout(
    dist: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=DEADLINE)
    python, command = venv / "bin" / "python", venv / "bin" / "lockgate"
    # Nothing of the checkout or of the suite's own environment may leak in.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not key.startswith("LOCKGATE_")
    }
    wheel = only(dist, "lockgate-*-py3-none-any.whl")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=DEADLINE,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    version = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, env=env, cwd=outside
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"lockgate {lockgate.__version__}"
    (outside / "check.py").write_text(SCRIPT)
    resources = [name.removeprefix("lockgate/") for name in data_files()]
    ran = subprocess.run(
        [str(python), "check.py", *resources],
        capture_output=True,
        text=True,
        env=env,
        cwd=outside,
        timeout=DEADLINE,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "result 41"
    module = Path(lines[1].removeprefix("module "))
    assert module.is_relative_to(venv), module  # the installed copy, not the checkout's
    read = [line.split()[1] for line in lines[2:]]
    assert read == resources
    # Each whole: as many characters as the checkout's copy.
    sizes = [len((PACKAGE / name).read_text()) for name in resources]
    assert [int(line.split()[2]) for line in lines[2:]] == sizes

"""The public doors: each package's ``__all__`` agrees with what it defines, all documented.

In the manner of httpx ``tests/test_exported_members.py``.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

import waitbound
import waitbound.provider
import waitbound.sim
import waitbound.stores
import waitbound.testing

PACKAGES = [waitbound, waitbound.stores, waitbound.sim, waitbound.testing, waitbound.provider]
IDS = [m.__name__ for m in PACKAGES]


def _ours(value: object) -> bool:
    """A class or function defined inside the waitbound package."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return False
    module = getattr(value, "__module__", "") or ""
    return module == "waitbound" or module.startswith("waitbound.")


def _exported(module: ModuleType) -> list[tuple[str, object]]:
    return [(name, getattr(module, name)) for name in module.__all__]


def _docstring(name: str, value: object) -> str:
    """The object's own docstring; a dataclass's generated signature does not count."""
    raw = vars(value).get("__doc__") if inspect.isclass(value) else inspect.getdoc(value)
    text = (raw or "").strip()
    if inspect.isclass(value) and text.startswith(f"{name}("):
        return ""  # dataclasses write "Name(field: type, ...)" when there is no docstring
    return text


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_all_is_sorted(module: ModuleType) -> None:
    """__all__ is in sorted order."""
    assert list(module.__all__) == sorted(module.__all__)


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_all_has_no_duplicates(module: ModuleType) -> None:
    """No name appears twice in __all__."""
    names = list(module.__all__)
    assert sorted({n for n in names if names.count(n) > 1}) == []


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_every_name_in_all_exists(module: ModuleType) -> None:
    """Every name in __all__ is an attribute of the package."""
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_every_public_class_and_function_is_in_all(module: ModuleType) -> None:
    """Each public class or function of ours at the package's top level is listed in __all__."""
    public = {
        name for name, value in vars(module).items() if not name.startswith("_") and _ours(value)
    }
    assert sorted(public - set(module.__all__)) == []


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_all_exports_only_public_names(module: ModuleType) -> None:
    """__all__ holds no private name except the dunder ``__version__``."""
    private = [n for n in module.__all__ if n.startswith("_") and n != "__version__"]
    assert private == []


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_every_exported_class_and_function_has_a_docstring(module: ModuleType) -> None:
    """Every class and function a package exports has its own docstring."""
    exported = [(name, value) for name, value in _exported(module) if _ours(value)]
    assert exported, "no classes or functions exported"
    assert [name for name, value in exported if not _docstring(name, value)] == []


@pytest.mark.parametrize("module", PACKAGES, ids=IDS)
def test_an_async_twin_is_named_async_after_its_blocking_one(module: ModuleType) -> None:
    """The naming convention (``wait`` / ``wait_async``): every exported ``X_async`` is a
    coroutine function (or, for an iterator such as ``as_completed_async``, an async
    generator function), and ``X`` is exported too and blocks (is not one)."""
    exported = dict(_exported(module))
    twins = [name for name in exported if name.endswith("_async")]

    def is_async(fn: object) -> bool:
        return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)

    assert [n for n in twins if not is_async(exported[n])] == []
    blocking = {
        name.removesuffix("_async"): exported.get(name.removesuffix("_async")) for name in twins
    }
    assert [n for n, v in blocking.items() if v is None or is_async(v)] == []


def test_deliver_due_blocks_and_deliver_due_async_does_not() -> None:
    """The delivery pass follows the convention: ``deliver_due`` blocks,
    ``deliver_due_async`` is its coroutine twin; no ``deliver_due_sync`` is left."""
    assert not inspect.iscoroutinefunction(waitbound.deliver_due)
    assert inspect.iscoroutinefunction(waitbound.deliver_due_async)
    assert not hasattr(waitbound, "deliver_due_sync")


def test_version_is_exported_and_a_string() -> None:
    """waitbound.__version__ is a dotted version string listed in __all__."""
    assert "__version__" in waitbound.__all__
    assert isinstance(waitbound.__version__, str)
    assert waitbound.__version__.count(".") >= 1


def test_docstring_check_rejects_a_generated_dataclass_doc() -> None:
    """The docstring check does not accept what @dataclass writes for an undocumented class."""
    from dataclasses import dataclass

    @dataclass
    class Undocumented:
        value: int

    @dataclass
    class Documented:
        """Has words."""

        value: int

    def bare() -> None:
        pass

    assert _docstring("Undocumented", Undocumented) == ""
    assert _docstring("Documented", Documented) == "Has words."
    assert _docstring("bare", bare) == ""


def test_the_package_and_cli_import_without_any_extra() -> None:
    """`pip install waitbound` alone (no serve, provider, mcp or postgres extra): the package,
    the CLI and its help load; an extra's library is imported only where it is used."""
    import subprocess
    import sys

    blocked = ["standardwebhooks", "starlette", "uvicorn", "sse_starlette", "httpx_sse",
               "jinja2", "itsdangerous", "multipart", "mcp", "psycopg", "psycopg_pool"]  # fmt: skip
    program = (
        "import sys\n"
        f"blocked = {blocked!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in blocked:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import waitbound, waitbound.cli\n"
        "from click.testing import CliRunner\n"
        "result = CliRunner().invoke(waitbound.cli._app.cli, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

"""``sparza package``: one zip of sparza and a job's own modules, for executors that do not have them.

Executors import ``task.class``/``app.class`` by dotted path and sparza's runtime by name. On a cluster
or a Spark Connect server they do not share the driver's working dir, so the code must travel with the
job: the zip goes to ``job.py.files`` (sparza adds it with ``SparkContext.addPyFile``, or
``spark.addArtifacts(pyfile=True)`` on Spark Connect), or to ``spark-submit --py-files``.

The zip holds sources only. Compiled dependencies (pyarrow, deltalake, rocksdict, the Azure SDK, ...)
must be installed on every executor: the requirements file written next to the zip lists them
(``pip install -r``), see ``docs/operations.md`` for images.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sparza.config import Config
from sparza.config.shared import APP_CLASS, TASK_CLASS
from sparza.errors import ConfigError

__all__ = ["Package", "build_package", "job_modules"]

_EPOCH = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same zip
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


@dataclass(frozen=True)
class Package:
    """What :func:`build_package` wrote: the zip, its requirements file and the top-level names it holds."""

    path: Path
    requirements: Path
    modules: tuple[str, ...]
    files: int


def job_modules(config: Config) -> list[str]:
    """Top-level modules a job's executors import besides sparza: those of ``task.class`` and ``app.class``."""
    names = []
    for setting in (TASK_CLASS, APP_CLASS):
        path = setting.get(config)
        if path:
            module = path.partition(":")[0] if ":" in path else path.rpartition(".")[0]
            top = module.split(".")[0]
            if top and top != "sparza" and top not in names:
                names.append(top)
    return names


def _source_of(name: str) -> Path:
    """Where top-level module or package ``name`` is imported from here (a dir, or one .py file)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ConfigError("--module", name, "an importable module (run from the project dir)") from exc
    if spec is None:
        raise ConfigError("--module", name, "an importable module (run from the project dir, or fix task.class)")
    if spec.submodule_search_locations:
        # A namespace package also lists entries inside zips on sys.path (SparkContext.addPyFile puts a
        # packaged job there, on the driver too): package the directory the sources live in.
        locations = [Path(location) for location in spec.submodule_search_locations if Path(location).is_dir()]
        if not locations:
            raise ConfigError("--module", name, "a package whose sources are in a directory (not only in a zip)")
        return locations[0]
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    raise ConfigError("--module", name, "a pure-Python module or package (compiled ones must be installed)")


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for filename in sorted(filenames):
            if not filename.endswith((".pyc", ".pyo")) and not filename.startswith("."):
                yield Path(dirpath) / filename


def _requirements() -> list[str]:
    """sparza's dependencies without pyspark: the cluster provides Spark, and a pip-installed pyspark would
    shadow the one matching its JVM."""
    try:
        declared = metadata.requires("sparza") or []
    except metadata.PackageNotFoundError:
        return []
    kept = [r for r in declared if "extra ==" not in r and not r.lower().startswith("pyspark")]
    import pyspark

    return [f"# pyspark: provided by the cluster (Spark 4.2 or newer; built with {pyspark.__version__})", *kept]


def build_package(output: str | os.PathLike[str], modules: Iterable[str]) -> Package:
    """Write a zip of sparza plus ``modules`` (top-level names) to ``output`` and the requirements file
    ``<output stem>.requirements.txt`` next to it."""
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = ["sparza", *[m for m in dict.fromkeys(modules) if m != "sparza"]]
    count = 0
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        dirs: set[str] = set()
        for name in names:
            root = _source_of(name)
            base = root.parent
            for path in _files(root):
                arcname = path.relative_to(base).as_posix()
                parts = arcname.split("/")[:-1]
                for i in range(1, len(parts) + 1):  # zipimport finds namespace packages by their dir entries
                    entry = "/".join(parts[:i]) + "/"
                    if entry not in dirs:
                        dirs.add(entry)
                        archive.writestr(zipfile.ZipInfo(entry, _EPOCH), b"")
                info = zipfile.ZipInfo(arcname, _EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, path.read_bytes())
                count += 1
    os.replace(tmp, out)
    requirements = out.with_name(out.stem + ".requirements.txt")
    requirements.write_text("".join(f"{r}\n" for r in _requirements()), encoding="utf-8")
    return Package(out, requirements, tuple(names), count)

"""The config reference, generated from the keys each package declares with ``define_key``.

``make docs`` (``python -m sparza.config.reference > docs/config-reference.md``) regenerates the page; a
test fails when the committed page differs from the code, so the docs cannot drift.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import sparza
from sparza.config import ConfigKey, defined_keys
from sparza.config.samza import SAMZA_UNUSED

__all__ = ["import_all_packages", "render"]


def import_all_packages() -> None:
    """Import every sparza module so each declares its keys (CLI and test helpers excluded)."""
    for info in pkgutil.walk_packages(sparza.__path__, "sparza."):
        name = info.name
        if name.startswith(("sparza.cli", "sparza.testing")) or name.rsplit(".", 1)[-1].startswith("__"):
            continue
        importlib.import_module(name)


def _default(key: ConfigKey[Any]) -> str:
    """The default column: the value, the key it falls back to, or a dash for none."""
    if key.fallback is not None:
        return f"as `{key.fallback.key}`"
    return "—" if key.default is None else f"`{key.default}`"


def render() -> str:
    """The reference page as Markdown: one table per package."""
    import_all_packages()
    lines = ["# Config reference", "",
             "Generated from the code by `make docs` (`python -m sparza.config.reference`); do not edit by hand. "
             "Placeholders in "
             "angle brackets: `<system>` a system name, `<stream>` a stream id, `<store>` a store name.", ""]
    package = None
    for key in defined_keys():
        if key.package != package:
            package = key.package
            lines += ["", f"## `{package}`", "", "| key | default | value | meaning |", "|---|---|---|---|"]
        lines.append(f"| `{key.key}` | {_default(key)} | {key.kind.shown if key.typed else ''} | "
                     f"{key.description.replace('|', '/')} |")
    lines += ["", "## Samza keys sparza does not use", "",
              "Accepted in a Samza job config with a warning (printed once by `sparza run`), never silently "
              "ignored; see [config](config.md).", "", "| key | why |", "|---|---|"]
    lines += [f"| `{key}` | {why.replace('|', '/')} |" for key, why in sorted(SAMZA_UNUSED.items())]
    return "\n".join(lines).strip() + "\n"


if __name__ == "__main__":
    print(render(), end="")

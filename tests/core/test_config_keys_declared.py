"""Every config key sparza reads or writes is declared, and sparza reads its keys only through the declared
key objects (so the declaration holds the one default): a scan of every module's source under src/."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from sparza.config import ConfigKey, defined_keys, find_key
from sparza.config.check import OWNED_NAMESPACES
from sparza.config.reference import import_all_packages
from sparza.config.registry import _compiled
from sparza.config.samza import SAMZA_UNUSED

SRC = Path(__file__).resolve().parents[2] / "src"
HOLE = "\x00"
KEY_LIKE = re.compile(r"^(?:{})\.[A-Za-z0-9_.<>*\x00-]*[A-Za-z0-9_>*\x00]$".format("|".join(OWNED_NAMESPACES)))

NOT_KEYS = {
    "systems.delta", "systems.kafka", "systems.azureblob", "systems.eventhubs",  # package labels of the registry
    "job.json", "job.yaml", "metrics.jsonl",  # file names
    "blob.out",  # the harness's blob output stream (system.stream)
}
"""Strings that look like keys of an owned namespace and are not config keys."""

STRING_GETTERS = frozenset(("get_str", "get_int", "get_float", "get_bool", "get_list", "get_bytes",
                            "get_duration_ms", "get_choice"))

STRING_GETTERS_ALLOWED = {
    # Job code: applications, the harness's jobs and the demo read their own app.* settings, as a user's job.
    "sparza/api/examples.py", "sparza/cli/demo.py", "sparza/testing/jobs.py",
    # The Config class itself.
    "sparza/config/core.py",
}
"""Modules that may still read config through the string getters (``config.get_int("key", default)``)."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(SRC)), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted((SRC / "sparza").rglob("*.py"))]


def _key_text(node: ast.AST) -> str | None:
    """The text of a string literal, or of an f-string with each replacement field as HOLE."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    return None


def _checkable(text: str) -> bool:
    # A key whose last segment is computed (f"stores.{s}.{suffix}") is checked where the suffix is chosen.
    return bool(KEY_LIKE.match(text)) and text not in NOT_KEYS and text.rsplit(".", 1)[-1] != HOLE


def _declared(text: str, declared: list[ConfigKey[Any]], unused: list[re.Pattern[str]]) -> bool:
    """True when a declared pattern (or a Samza key sparza does not use) covers ``text``: the text with its
    computed parts as ``x`` matches the pattern, or the text (computed parts matching anything) matches an
    instance of the pattern (``samza.{which}.serde`` and ``samza.key.serde``)."""
    probe = text.replace(HOLE, "x")
    if find_key(probe, declared) is not None or any(p.match(probe) for p in unused):
        return True
    regex = re.compile("^" + ".+".join(re.escape(part) for part in text.split(HOLE)) + "$")
    return any(regex.match(re.sub(r"<[a-z]+>|\*", "x", entry.key)) for entry in declared)


def test_every_key_named_in_the_source_is_declared() -> None:
    import_all_packages()
    declared = defined_keys()
    unused = [_compiled(p) for p in SAMZA_UNUSED]
    undeclared = []
    seen = 0
    for name, tree in _modules():
        for node in ast.walk(tree):
            text = _key_text(node)
            if text is None or not _checkable(text):
                continue
            seen += 1
            if not _declared(text, declared, unused):
                undeclared.append(f"{name}:{getattr(node, 'lineno', '?')}: {text.replace(HOLE, '{…}')}")
    assert seen > 150, "the scan found too few keys to be looking at the right source"
    assert not undeclared, "keys read or written but declared by no package (define_key):\n" + "\n".join(undeclared)


def test_the_scan_sees_an_undeclared_key() -> None:
    tree = ast.parse('config.get(f"systems.{name}.delta.no.such.key")\nx = "task.no.such.key"\n')
    texts = [t for node in ast.walk(tree) if (t := _key_text(node)) is not None and _checkable(t)]
    import_all_packages()
    assert texts and not any(_declared(t, defined_keys(), []) for t in texts)


def test_sparza_reads_its_keys_through_declared_key_objects() -> None:
    users: dict[str, list[int]] = {}
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in STRING_GETTERS:
                users.setdefault(name, []).append(node.lineno)
    unexpected = {name: lines for name, lines in users.items() if name not in STRING_GETTERS_ALLOWED}
    assert not unexpected, ("read these keys through the object define_key returns (KEY.get(config)), not "
                            f"config.get_*(key, default): {unexpected}")
    stale = sorted(STRING_GETTERS_ALLOWED - set(users))
    assert not stale, f"no longer use the string getters: remove them from STRING_GETTERS_ALLOWED: {stale}"

"""Checks a whole job config before anything runs: every key known, every value usable.

sparza owns the namespaces in :data:`OWNED_NAMESPACES`; a key there that no package declares (with
``define_key``), that is no pass-through (:data:`PASS_THROUGH`) and no Samza key sparza knows and
deliberately does not use (:data:`~sparza.config.samza.SAMZA_UNUSED`) is an error naming the closest known key, so a
misspelled key fails at start instead of being ignored. ``app.*`` and ``spark.*`` stay free-form;
keys of other namespaces are reported as unused. Samza's spellings are translated first
(:mod:`sparza.config.samza`).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparza.config import Config, ConfigKey, define_key, defined_checks, defined_keys, find_key, is_secret_key
from sparza.config.registry import _compiled
from sparza.config.samza import SAMZA_UNUSED, Note, translate
from sparza.errors import ConfigError

__all__ = [
    "OWNED_NAMESPACES",
    "PASS_THROUGH",
    "CheckReport",
    "KeyReport",
    "Migration",
    "UnknownKeyError",
    "check_config",
    "migrate_config",
    "validate_for_run",
]

_PKG = "pass-through"

OWNED_NAMESPACES = ("job", "task", "systems", "streams", "stores", "blob", "metrics", "serializers", "azure",
                    "sensitive", "processor")
"""First key segments sparza owns: an undeclared key there is an error (``blob`` stands for ``blob.store``)."""

FREE_FORM = ("app.", "spark.")
"""Prefixes whose keys are never checked (application settings, Spark settings)."""

PASS_THROUGH: dict[str, str] = {
    "streams.<stream>.eventhubs.*": "Event Hubs streams: passed to the Event Hubs mapping as is.",
    "sensitive.streams.<stream>.eventhubs.*": "Event Hubs secrets (SAS keys): passed as is, never shown.",
}
"""Namespaces whose keys a client library interprets, declared here for want of a package that reads them
(every declared ``prefix.*`` key, like Kafka's ``systems.<system>.consumer.*``, is a pass-through too)."""

for _pattern, _meaning in PASS_THROUGH.items():
    define_key(_pattern, None, _meaning, _PKG)

def _declared() -> list[ConfigKey[Any]]:
    from sparza.config.reference import import_all_packages

    import_all_packages()
    return defined_keys()


@dataclass(frozen=True, slots=True)
class KeyReport:
    """One key of a checked config: its value (masked for secrets), the declared pattern it matches,
    what it means, its default, the package that reads it, and its status."""

    key: str
    value: str
    status: Literal["ok", "pass-through", "free-form", "job-code", "samza-unused", "unused", "unknown"]
    pattern: str | None = None
    meaning: str = ""
    default: str | None = None
    package: str | None = None


@dataclass
class CheckReport:
    """Everything :func:`check_config` found: each key, the translation notes, problems and warnings."""

    config: Config
    keys: list[KeyReport] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    problems: list[ConfigError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing stops the job from starting."""
        return not self.problems


class UnknownKeyError(ConfigError):
    """A key in a namespace sparza owns that no package declares (usually a typo)."""

    def __init__(self, key: str, suggestion: str | None) -> None:
        hint = f": did you mean '{suggestion}'?" if suggestion else \
            ": no sparza package reads it (see docs/config-reference.md); remove it or fix its spelling"
        super().__init__(key, None, "a known key", message=f"unknown config key '{key}'{hint}")
        self.suggestion = suggestion


def _match(key: str, declared: Sequence[ConfigKey[Any]]) -> ConfigKey[Any] | None:
    # The most specific pattern wins: fewest placeholders, then longest literal text.
    return find_key(key, declared)


def _names(config: Mapping[str, str]) -> dict[str, set[str]]:
    systems = {k.split(".")[1] for k in config if k.startswith("systems.") and k.count(".") >= 2}
    stores = {k.split(".")[1] for k in config if k.startswith("stores.") and k.count(".") >= 2}
    streams: set[str] = set()
    for key in ("task.inputs", "task.broadcast.inputs"):
        for item in config.get(key, "").split(","):
            _, _, stream = item.strip().partition(".")
            if stream:
                streams.add(stream.split("#")[0])
    for k in config:
        parts = k.split(".")
        if len(parts) > 4 and parts[0] == "systems" and parts[2] == "streams":
            streams.add(parts[3])
    return {"system": systems, "container": systems, "store": stores, "stream": streams}


def suggest(key: str, config: Mapping[str, str], patterns: Iterable[str]) -> str | None:
    """The known key closest to ``key``: each pattern filled with the names this config uses."""
    names = _names(config)
    candidates: set[str] = set()
    for pattern in patterns:
        holes = re.findall(r"<([a-z]+)>", pattern)
        if any(h not in names for h in holes) or "*" in pattern:
            continue
        pools = [sorted(names[h]) for h in holes]
        for combo in itertools.islice(itertools.product(*pools), 500):
            text = pattern
            for hole, value in zip(holes, combo, strict=True):
                text = text.replace(f"<{hole}>", value, 1)
            candidates.add(text)
    close = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.8)
    return close[0] if close else None


def check_config(config: Mapping[str, str]) -> CheckReport:
    """Translate ``config`` from Samza's spelling and check every key and every value sparza can check
    without touching storage: unknown keys, unsupported Samza classes, and the runtime's own validation."""
    translation = translate(config)
    report = CheckReport(translation.config, notes=list(translation.notes))
    declared = _declared()
    patterns = [d.key for d in declared]
    for note in translation.notes:
        if note.level == "error":
            text = note.message if f"'{note.key}'" in note.message else f"config key '{note.key}': {note.message}"
            report.problems.append(ConfigError(note.key, None, note.message, message=text))
        elif note.level == "warning":
            report.warnings.append(f"{note.key}: {note.message}")
    translated = translation.config
    read_by_job = keys_read_by_job_code(translated)
    for key in sorted(translated):
        value = "<redacted>" if is_secret_key(key) else translated[key]
        entry = _match(key, declared)
        if entry is not None:
            status: Literal["ok", "pass-through"] = "pass-through" if entry.key.endswith(".*") else "ok"
            report.keys.append(KeyReport(key, value, status, entry.key, entry.description, entry.default,
                                         entry.package))
            continue
        unused = next((p for p in SAMZA_UNUSED if _compiled(p).match(key)), None)
        if unused is not None:
            report.keys.append(KeyReport(key, value, "samza-unused", unused, SAMZA_UNUSED[unused]))
            report.warnings.append(f"{key}: a Samza key sparza does not use ({SAMZA_UNUSED[unused]})")
            continue
        if key.startswith(FREE_FORM):
            report.keys.append(KeyReport(key, value, "free-form", meaning="application or Spark setting"))
            continue
        if key.split(".", 1)[0] not in OWNED_NAMESPACES:
            if key in read_by_job:
                report.keys.append(KeyReport(key, value, "job-code", meaning=f"read by {read_by_job[key]}"))
                continue
            report.keys.append(KeyReport(key, value, "unused", meaning="not a sparza namespace"))
            report.warnings.append(f"{key}: not read by sparza (not one of its namespaces: "
                                   f"{', '.join(n + '.*' for n in OWNED_NAMESPACES)})")
            continue
        report.keys.append(KeyReport(key, value, "unknown"))
        report.problems.append(UnknownKeyError(key, suggest(key, translated, patterns)))
    _run_checks(translated, report, translated=not translation.errors)
    return report


_CONFIG_GETTERS = frozenset(("get", "get_str", "get_int", "get_bool", "get_list", "get_float", "get_bytes",
                             "get_duration_ms", "get_choice"))


def keys_read_by_job_code(config: Mapping[str, str]) -> dict[str, str]:
    """Config keys the job's own module (``task.class``/``app.class``) reads by name (``config.get("k", ...)``,
    ``config["k"]``), found in its source without importing it: key → the setting that names the module.
    Such a key is the job's own setting, not one sparza ignores."""
    import ast
    import importlib.util

    found: dict[str, str] = {}
    for setting in ("task.class", "app.class"):
        path = str(config.get(setting) or "").replace(":", ".")
        module = path.rpartition(".")[0]
        if not module:
            continue
        local = Path.cwd() / (module.replace(".", "/") + ".py")  # `sparza run` imports from the working dir too
        try:
            spec = None if local.is_file() else importlib.util.find_spec(module)
            origin = str(local) if local.is_file() else (spec.origin if spec is not None else None)
            tree = ast.parse(Path(origin).read_text(encoding="utf-8")) if origin and origin.endswith(".py") else None
        except (ImportError, ValueError, OSError, SyntaxError):
            continue
        for node in ast.walk(tree) if tree is not None else ():
            literal = None
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _CONFIG_GETTERS and node.args):
                literal = node.args[0]
            elif isinstance(node, ast.Subscript):
                literal = node.slice
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str) and literal.value in config:
                found.setdefault(literal.value, f"{setting} {path}")
    return found


def _run_checks(config: Config, report: CheckReport, translated: bool) -> None:
    """The value checks each package declares (:func:`~sparza.config.define_check`): the validation
    ``sparza run`` does before Spark starts, collected instead of raised."""
    for entry in defined_checks():
        if entry.needs_translation and not translated:
            continue
        try:
            found = entry.check(config)
        except ConfigError as exc:
            found = [exc]
        for problem in found if isinstance(found, list) else ():
            if isinstance(problem, ConfigError) and not any(str(p) == str(problem) for p in report.problems):
                report.problems.append(problem)


def validate_for_run(config: Mapping[str, str], warn: Callable[[str], None] | None = None) -> Config:
    """What ``sparza run`` does first: check every key, raise the first problem as :class:`ConfigError`,
    pass each warning to ``warn`` once, and return the config in sparza's spelling."""
    report = check_config(config)  # translation errors come first among its problems
    if report.problems:
        raise report.problems[0]
    if warn is not None:
        for line in dict.fromkeys(report.warnings):
            warn(line)
    return report.config


@dataclass
class Migration:
    """A Samza config in sparza's spelling (``values``), what was changed, what was dropped (Samza keys
    sparza does not use) and what must be fixed by hand (features sparza lacks, unknown keys)."""

    values: dict[str, str]
    changes: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    to_fix: list[str] = field(default_factory=list)

    def render(self, fmt: str = "properties", *, mask_secrets: bool = True) -> str:
        """The config as ``.properties`` lines or flat YAML; secret values masked unless asked not to."""
        shown = {k: ("<secret: copy from the Samza config>" if mask_secrets and is_secret_key(k) else v)
                 for k, v in sorted(self.values.items())}
        if fmt == "yaml":
            import yaml

            return str(yaml.safe_dump(shown, sort_keys=True, default_flow_style=False))
        if fmt != "properties":
            raise ConfigError("--format", fmt, "properties or yaml")
        return "".join(f"{k}={v}\n" for k, v in shown.items())


def migrate_config(config: Mapping[str, str]) -> Migration:
    """Carry a Samza job config over to sparza: translated keys and classes, Samza-only keys dropped,
    a changelog replaced by a blob-store backup, and a list of what must be changed by hand."""
    from sparza.config.samza import KEY_ALIASES, SENSITIVE_PREFIX

    report = check_config(config)
    values = dict(report.config.items())
    migration = Migration(values)
    for note in report.notes:
        if note.level == "info":
            migration.changes.append(f"{note.key}: {note.message}")
    for alias in KEY_ALIASES:
        values.pop(alias, None)
    for key in [k for k in values if k.startswith(SENSITIVE_PREFIX) and k[len(SENSITIVE_PREFIX):] in values
                and not k.startswith("sensitive.streams.")]:
        values.pop(key)  # the value was copied to the key without the prefix
    registered = [k for k in values if k.startswith("serializers.registry.") and k.endswith(".class")]
    for key in registered:
        if values[key] in ("bytes", "string", "json", "integer", "long", "double", "avro"):
            values.pop(key)  # the serde keys now name the built-in serde directly
    for entry in report.keys:
        if entry.status in ("samza-unused", "unused"):
            values.pop(entry.key, None)
            migration.dropped.append(f"{entry.key}: {entry.meaning}")
            store = entry.key.split(".")[1] if entry.key.startswith("stores.") else None
            if store and entry.key == f"stores.{store}.changelog" and \
                    f"stores.{store}.backup.factories" not in values:
                values[f"stores.{store}.backup.factories"] = "blobstore"
                migration.changes.append(f"stores.{store}.backup.factories=blobstore: the changelog's job (state "
                                         "that survives a lost host) is done by the blob-store backup")
    for problem in report.problems:
        migration.to_fix.append(str(problem))
    for key in ("task.class", "app.class"):
        if key in values and not _importable(values[key]):
            migration.to_fix.append(f"{key}={values[key]}: no such Python module here; port the Samza task or "
                                    "application to Python (sparza.task.StreamTask / sparza.api) and name its "
                                    "dotted path")
    return migration


def _importable(path: str) -> bool:
    import importlib.util

    module = path.replace(":", ".").rpartition(".")[0]
    try:
        return bool(module) and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False

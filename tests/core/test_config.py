from __future__ import annotations

import pytest

from sparza.config import Config, parse_byte_size, parse_duration_ms
from sparza.errors import ConfigError


def test_typed_getters():
    cfg = Config({"a.int": "42", "a.bool": "TRUE", "a.list": "x, y,,z", "a.size": "10MB", "a.dur": "30s",
                  "a.float": "0.5", "a.choice": "GZIP"})
    assert cfg.get_int("a.int") == 42
    assert cfg.get_bool("a.bool") is True
    assert cfg.get_list("a.list") == ["x", "y", "z"]
    assert cfg.get_bytes("a.size") == 10 * 1024 * 1024
    assert cfg.get_duration_ms("a.dur") == 30_000
    assert cfg.get_float("a.float") == 0.5
    assert cfg.get_choice("a.choice", ("none", "gzip")) == "gzip"
    assert cfg.get_int("missing", 7) == 7
    assert cfg.get_str("missing", None) is None


@pytest.mark.parametrize("text,expected", [("1048576", 1 << 20), ("512k", 512 << 10), ("10 MiB", 10 << 20),
                                           ("1.5GB", int(1.5 * (1 << 30))), ("0", 0)])
def test_byte_sizes(text, expected):
    assert parse_byte_size(text) == expected


@pytest.mark.parametrize("text,expected", [("1500", 1500), ("250ms", 250), ("2m", 120_000), ("1h", 3_600_000)])
def test_durations(text, expected):
    assert parse_duration_ms(text) == expected


def test_error_names_key_value_and_expectation():
    cfg = Config({"systems.out.azureblob.maxFlushThresholdSize": "ten"})
    with pytest.raises(ConfigError) as info:
        cfg.get_bytes("systems.out.azureblob.maxFlushThresholdSize")
    message = str(info.value)
    assert "systems.out.azureblob.maxFlushThresholdSize" in message
    assert "'ten'" in message
    assert "byte size" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match="'job.name' is missing"):
        cfg.get_str("job.name")
    with pytest.raises(ConfigError, match="one of none, gzip"):
        Config({"c": "zip"}).get_choice("c", ("none", "gzip"))
    with pytest.raises(ConfigError, match=">= 1"):
        Config({"n": "0"}).get_int("n", min_value=1)


def test_secrets_are_masked_in_repr_and_errors():
    cfg = Config({"systems.x.azureblob.account.key": "SuperSecret==", "azure.storage.connect": "AccountKey=abc"})
    assert "SuperSecret" not in repr(cfg)
    assert "AccountKey=abc" not in repr(cfg)
    with pytest.raises(ConfigError) as info:
        cfg.get_int("systems.x.azureblob.account.key")
    assert "SuperSecret" not in str(info.value)


def test_yaml_nested_and_dotted(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("job:\n  name: wc\n  id: 1\ntask.inputs: [delta.a, delta.b]\n"
                    "systems:\n  delta:\n    samza.factory: delta\nflag: true\n")
    cfg = Config.from_file(path)
    assert cfg["job.name"] == "wc"
    assert cfg.get_int("job.id") == 1
    assert cfg.get_list("task.inputs") == ["delta.a", "delta.b"]
    assert cfg["systems.delta.samza.factory"] == "delta"
    assert cfg.get_bool("flag") is True
    assert dict(cfg.subset("systems.delta")) == {"samza.factory": "delta"}
    assert dict(cfg.subset("systems.", strip_prefix=False)) == {"systems.delta.samza.factory": "delta"}


def test_properties_file(tmp_path):
    path = tmp_path / "job.properties"
    path.write_text("# comment\njob.name=wc\n! other comment\ntask.inputs = delta.a,\\\n  delta.b\nx: y\n")
    cfg = Config.from_file(path)
    assert cfg["job.name"] == "wc"
    assert cfg.get_list("task.inputs") == ["delta.a", "delta.b"]
    assert cfg["x"] == "y"


def test_env_overrides_and_load_order(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("job.name: from-file\njob.id: 1\n")
    cfg = Config.load(path, environ={"SPARZA_CONF_job__name": "from-env", "OTHER": "x"},
                      overrides={"job.id": 2})
    assert cfg["job.name"] == "from-env"
    assert cfg["job.id"] == "2"


def test_missing_or_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="--config"):
        Config.from_file(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="valid YAML"):
        Config.from_file(bad)


def test_immutable_and_equal():
    cfg = Config({"a": 1})
    with pytest.raises(TypeError):
        cfg["a"] = "2"  # type: ignore[index]
    assert cfg == Config({"a": "1"})
    assert cfg.with_overrides({"a": 3})["a"] == "3"
    assert cfg["a"] == "1"

"""When the Spark UI is enabled it binds to loopback unless configured otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.runtime.helpers import REPO

from sparza.host import free_port

pytestmark = pytest.mark.slow

_SCRIPT = """
import sys
from sparza.config import Config
from sparza.engine.jobconfig import JobConfig
from sparza.runtime.driver.session import build_spark_session

port = int(sys.argv[1])
values = {"job.name": "ui", "task.class": "examples.keyed_count.task.KeyedCountTask", "task.inputs": "delta.events",
          "systems.delta.samza.factory": "delta", "systems.delta.delta.root": sys.argv[2],
          "spark.ui.enabled": "true", "spark.ui.port": str(port), "spark.ui.port.maxRetries": "0"}
values.update(dict(arg.split("=", 1) for arg in sys.argv[3:]))
spark = build_spark_session(JobConfig.from_config(Config(values)), "local[1]", "ui-test")
try:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            rows += [line.split() for line in fh.readlines()[1:]]
    listening = [r[1].split(":")[0] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port]
    print("LISTEN", ",".join(listening))
finally:
    spark.stop()
"""


def _listening(tmp_path, *extra: str) -> str:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}  # as a user's shell would have it
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(port), str(tmp_path), *extra], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=180, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("LISTEN ")]
    assert lines, result.stderr[-2000:]
    return lines[0].split(" ", 1)[1]


LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F")  # 127.0.0.1 in /proc/net/tcp, ::ffff:127.0.0.1 in tcp6


def test_the_spark_ui_listens_on_loopback_by_default(tmp_path):
    assert _listening(tmp_path) in LOOPBACK


def test_the_spark_ui_address_can_be_configured(tmp_path):
    # 0.0.0.0 is every interface: the JVM listens on the IPv6 wildcard (dual stack) or the IPv4 one.
    assert _listening(tmp_path, "job.spark.ui.address=0.0.0.0") in ("00000000", "0" * 32)

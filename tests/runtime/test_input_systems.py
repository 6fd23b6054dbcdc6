"""``InputSystems.close`` releases the admins, which a finished runner's Spark callback would otherwise keep."""

from __future__ import annotations

import gc
import weakref

from sparza.config import Config
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig


def test_close_releases_the_admins_and_their_clients() -> None:
    config = Config({"job.name": "j", "task.class": "x.Task", "task.inputs": "k.events",
                     "systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": "127.0.0.1:9"})
    inputs = InputSystems(JobConfig.from_config(config))
    admin = weakref.ref(inputs.admins["k"])
    inputs.close()
    gc.collect()
    assert admin() is None          # nothing else holds it: its librdkafka client goes with it
    assert inputs.admins == {} and inputs.ops == {}

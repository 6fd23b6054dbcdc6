"""Local servers for development, demos and tests, each a process on loopback that sparza starts and stops.

:mod:`~sparza.devservers.processes` has what they share (start, probe, stop, and the persistent record
behind ``sparza dev-storage`` / ``sparza dev-kafka``); :mod:`~sparza.devservers.storage` runs Azurite (the
Azure Storage emulator), :mod:`~sparza.devservers.kafka` an Apache Kafka broker (one node or a three-node cluster) and
:mod:`~sparza.devservers.spark` a Spark Connect server and an executor Python that does not see the project, and
:mod:`~sparza.devservers.sparkcluster` a Spark standalone cluster (a master and workers that can be killed).
"""

"""The config keys many packages read: what the job is called, what it runs, what it reads and where its
local state lives. Declared here, below every package, so each reads them through one declaration."""

from __future__ import annotations

from sparza.config.registry import LIST, STR, define_key

__all__ = [
    "APP_CLASS",
    "APP_STAGE",
    "JOB_ID",
    "JOB_NAME",
    "LOGGED_STORE_BASE_DIR",
    "TASK_BROADCAST_INPUTS",
    "TASK_CLASS",
    "TASK_INPUTS",
]

_PKG = "job"

JOB_NAME = define_key("job.name", None, "The job's name: with job.id it names the job's checkpoints, state, blob "
                      "paths and coordination resources.", _PKG, kind=STR)
JOB_ID = define_key("job.id", "1", "The job instance id; several instances of one job name run (and coordinate) "
                    "separately.", _PKG, kind=STR)
TASK_CLASS = define_key("task.class", None, "Dotted path (module.Class or module:Class) of the StreamTask class.",
                        _PKG, kind=STR)
APP_CLASS = define_key("app.class", None, "Dotted path of a class with describe(app: StreamApplication): a "
                       "high-level application, planned into one job per stage.", _PKG, kind=STR)
APP_STAGE = define_key("app.stage", None, "The stage of the application a StageTask runs (set by the planner).",
                       _PKG, kind=STR)
TASK_INPUTS = define_key("task.inputs", None, "Comma list of system.stream inputs; task N owns partition N of each.",
                         _PKG, kind=LIST)
TASK_BROADCAST_INPUTS = define_key("task.broadcast.inputs", "", "system.stream#N / #[N-M] partitions read by every "
                                   "task.", _PKG, kind=LIST)
LOGGED_STORE_BASE_DIR = define_key("job.logged.store.base.dir", ".sparza/state",
                                   "Local dir for task stores and their checkpoint dirs (${VARS} expanded where the "
                                   "job runs, so executors may use per-host dirs).", _PKG, kind=STR)

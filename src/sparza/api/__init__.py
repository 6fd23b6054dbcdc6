"""The high-level API: applications as graphs of operators over message streams.

An application class (``app.class``) has ``describe(self, app: StreamApplication)``; the planner
(:func:`plan_application`) splits its graph into stages at each ``partition_by``, each stage a job
whose task is :class:`StageTask`; intermediate streams between stages carry control messages
(:mod:`sparza.control`) so bounded pipelines end and event-time windows fire.
"""

from __future__ import annotations

from sparza.api.graph import (
    ApiError,
    Application,
    InputDescriptor,
    MessageStream,
    OpKind,
    OpSpec,
    OutputDescriptor,
    StreamApplication,
    TableDescriptor,
    TableOptions,
)
from sparza.api.stage_plan import ApplicationPlan, StagePlan, build_application, intermediate_streams, plan_application
from sparza.api.stage_split import StageSpec, split_stages
from sparza.api.stage_task import StageTask, stable_partition
from sparza.api.windows import WindowError, WindowPane, Windows, WindowSpec

__all__ = [
    "ApiError",
    "Application",
    "ApplicationPlan",
    "InputDescriptor",
    "MessageStream",
    "OpKind",
    "OpSpec",
    "OutputDescriptor",
    "StagePlan",
    "StageSpec",
    "StageTask",
    "StreamApplication",
    "TableDescriptor",
    "TableOptions",
    "WindowError",
    "WindowPane",
    "WindowSpec",
    "Windows",
    "build_application",
    "intermediate_streams",
    "plan_application",
    "split_stages",
    "stable_partition",
]

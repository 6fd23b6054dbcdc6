"""The high-level API: applications as graphs of operators over message streams.

An application class (``app.class``) has ``describe(self, app: StreamApplication)``; the planner
(:func:`plan_application`) splits its graph into stages at each ``partition_by``, each stage a job
whose task is :class:`StageTask`; intermediate streams between stages carry control messages
(:mod:`sparza.control`) so bounded pipelines end and event-time operators (tumbling, sliding and
session windows with triggers, stream-stream joins) fire and expire by the watermark.
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
from sparza.api.joins import JOIN_KINDS, JoinFunction, JoinSpec
from sparza.api.stage_plan import ApplicationPlan, StagePlan, build_application, intermediate_streams, plan_application
from sparza.api.stage_split import StageSpec, split_stages
from sparza.api.stage_task import StageTask, stable_partition
from sparza.api.triggers import PaneKind, Trigger, TriggerError, Triggers, every
from sparza.api.windows import SessionSpec, WindowError, WindowPane, Windows, WindowSpec

__all__ = [
    "JOIN_KINDS",
    "ApiError",
    "Application",
    "ApplicationPlan",
    "InputDescriptor",
    "JoinFunction",
    "JoinSpec",
    "MessageStream",
    "OpKind",
    "OpSpec",
    "OutputDescriptor",
    "PaneKind",
    "SessionSpec",
    "StagePlan",
    "StageSpec",
    "StageTask",
    "StreamApplication",
    "TableDescriptor",
    "TableOptions",
    "Trigger",
    "TriggerError",
    "Triggers",
    "WindowError",
    "WindowPane",
    "WindowSpec",
    "Windows",
    "build_application",
    "every",
    "intermediate_streams",
    "plan_application",
    "split_stages",
    "stable_partition",
]

"""Agents (configuration) and the step engine that drives them."""

from .agent import Agent as Agent
from .flow import Flow as Flow
from .invocation import InvocationContext as InvocationContext
from .invocation import RunStats as RunStats
from .live_flow import LiveFlow as LiveFlow

__all__ = ("Agent", "Flow", "InvocationContext", "LiveFlow", "RunStats")

"""Agents and the flow that drives them."""

from .agent import Agent as Agent
from .invocation import InvocationContext as InvocationContext
from .invocation import RunStats as RunStats

__all__ = ("Agent", "InvocationContext", "RunStats")

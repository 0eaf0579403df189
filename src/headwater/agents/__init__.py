"""Agents (configuration), the step engine that drives an LLM agent, and the orchestrator
that drives a tree of them."""

from .agent import Agent as Agent
from .agent import LlmAgent as LlmAgent
from .agent_tool import AgentTool as AgentTool
from .base import BaseAgent as BaseAgent
from .flow import Flow as Flow
from .invocation import InvocationContext as InvocationContext
from .invocation import RunStats as RunStats
from .live_flow import LiveFlow as LiveFlow
from .transfer import TransferToAgentTool as TransferToAgentTool
from .tree import TreeRun as TreeRun
from .workflow import LoopAgent as LoopAgent
from .workflow import ParallelAgent as ParallelAgent
from .workflow import SequentialAgent as SequentialAgent

__all__ = ("Agent", "AgentTool", "BaseAgent", "Flow", "InvocationContext", "LiveFlow", "LlmAgent",
           "LoopAgent", "ParallelAgent", "RunStats", "SequentialAgent", "TransferToAgentTool",
           "TreeRun")

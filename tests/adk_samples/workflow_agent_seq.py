# Mirrors google/adk-python contributing/samples/workflow_agent_seq/agent.py
# (Apache-2.0): the same ADK names (LlmAgents with output_key, `{key}` in an
# instruction, a SequentialAgent), written for these tests. Only the import block is
# headwater's (ADK: `from google.adk.agents.llm_agent import LlmAgent`,
# `from google.adk.agents.sequential_agent import SequentialAgent`).
from headwater.agents.agent import LlmAgent
from headwater.agents.workflow import SequentialAgent

code_writer_agent = LlmAgent(
    name="CodeWriterAgent",
    model="gemini-1.5-flash",
    instruction="Write Python code for the user's request; output only the code block.",
    description="Writes initial Python code based on a specification.",
    output_key="generated_code",
)

code_reviewer_agent = LlmAgent(
    name="CodeReviewerAgent",
    model="gemini-2.0-flash",
    instruction="Review this code:\n{generated_code}\nAnswer with a bulleted list.",
    description="Reviews code and provides feedback.",
    output_key="review_comments",
)

code_refactorer_agent = LlmAgent(
    name="CodeRefactorerAgent",
    model="gemini-2.0-flash",
    instruction="Code:\n{generated_code}\nReview:\n{review_comments}\nRefactor the code.",
    description="Refactors code based on review comments.",
    output_key="refactored_code",
)

code_pipeline_agent = SequentialAgent(
    name="CodePipelineAgent",
    sub_agents=[code_writer_agent, code_reviewer_agent, code_refactorer_agent],
    description="Writes, reviews and refactors code.",
)

root_agent = code_pipeline_agent

"""The reference side of the differential test: a Deep Agents graph served by `langgraph dev`,
its model the scripted OpenAI-compatible server (SCRIPTED_URL), approvals on `write_file` as the
Trellis agent file asks."""

import os

from deepagents import create_deep_agent
from langchain_openai import ChatOpenAI

model = ChatOpenAI(
    model="scripted",
    base_url=os.environ["SCRIPTED_URL"] + "/v1",
    api_key="test-key",
    streaming=True,
    max_retries=0,
)
graph = create_deep_agent(model=model, interrupt_on={"write_file": True})

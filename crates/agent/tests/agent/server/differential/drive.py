"""Runs the differential test's five conversations against one Agent Server (URL) with the
official `langgraph-sdk` and prints, as one JSON object keyed by scenario, what a client sees:
the order of events (`updates:<node>,…` for updates, naming their nodes), the shape of every
message (its type and keys) and of the interrupt payload, the final state's keys, the error
event, and the thread's status after the run. The test (differential.rs) compares two reports."""

import asyncio
import json
import os
import sys

from langgraph_sdk import get_client

URL = os.environ["URL"]
SCENARIOS = ["plain", "tools", "approval", "subagent", "error"]


def shape(value):
    """The keys of a dict, recursively for dicts and lists of dicts; the type name otherwise."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


def message_summary(m):
    return {
        "type": m.get("type"),
        "keys": sorted(m.keys()),
        "text": m["content"] if isinstance(m.get("content"), str) else None,
        "tool_calls": [(c["name"], c["args"]) for c in m.get("tool_calls") or []],
        "tool_call_id": m.get("tool_call_id"),
        "status": m.get("status"),
    }


async def run(client, scenario):
    thread = await client.threads.create()
    tid = thread["thread_id"]
    events, interrupts, error, values, chunk_ids = [], [], None, None, set()
    async for part in client.runs.stream(
        tid, "agent",
        input={"messages": [{"role": "user", "content": f"SCENARIO:{scenario} please"}]},
        stream_mode=["values", "updates", "messages-tuple"],
    ):
        name = part.event.split("|")[0]
        if name == "updates":
            events.append("updates:" + ",".join(part.data.keys()))
            if "__interrupt__" in part.data:
                interrupts.append(part.data["__interrupt__"])
        else:
            events.append(name)
        if name == "messages":
            chunk_ids.add(part.data[0].get("id"))
        if name == "values":
            values = part.data
            if "__interrupt__" in part.data:
                interrupts.append(part.data["__interrupt__"])
        if name == "error":
            error = part.data
    state = await client.threads.get_state(tid)
    after = await client.threads.get(tid)
    final = state["values"] or {}
    messages = final.get("messages", [])
    return {
        "events": events,
        "messages": [message_summary(m) for m in messages],
        "streamed_ids_in_state": sum(1 for i in chunk_ids if i in {m.get("id") for m in messages}),
        "streamed_ids": len(chunk_ids),
        "last_values_keys": sorted((values or {}).keys()),
        "state_keys": sorted(final.keys()),
        "interrupt": shape(interrupts[-1]) if interrupts else None,
        "interrupt_value": interrupts[-1][0]["value"] if interrupts else None,
        "state_interrupts": shape(state.get("interrupts") or []),
        "next": state.get("next"),
        "error": shape(error) if error is not None else None,
        "status": after["status"],
    }


async def main():
    client = get_client(url=URL, api_key=None)
    report = {}
    for scenario in SCENARIOS:
        report[scenario] = await run(client, scenario)
    print(json.dumps(report))


asyncio.run(main())

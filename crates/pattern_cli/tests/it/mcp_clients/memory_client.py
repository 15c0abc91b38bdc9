"""A Python MCP client (the official SDK, `mcp`) of `pattern mcp serve` over stdio.

Run by the `mcp` integration test with: PATTERN_BINARY DATA_DIR AGENT. It lists the tools,
reads a block, appends at the version it read, tries a replace at that (now stale) version,
replaces at the current one, inserts a passage and searches for it, and prints what it saw
as one JSON object. It must never be used outside tests.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return result.content[0].text


async def main():
    binary, data_dir, agent = sys.argv[1:4]
    params = StdioServerParameters(
        command=binary,
        args=["--data-dir", data_dir, "mcp", "serve", "--agent", agent],
        env=dict(os.environ),
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out["tools"] = sorted(t.name for t in listed.tools)
            block = json.loads(text(await session.call_tool("block_read", {"label": "notes"})))
            out["read"] = block
            appended = await session.call_tool(
                "block_append",
                {"label": "notes", "content": "from python", "expected_version": block["version"]},
            )
            out["append"] = json.loads(text(appended))
            stale = await session.call_tool(
                "block_replace",
                {
                    "label": "notes",
                    "old": "from python",
                    "new": "stale",
                    "expected_version": block["version"],
                },
            )
            out["stale"] = {"is_error": stale.is_error, "text": text(stale)}
            current = await session.call_tool(
                "block_replace",
                {
                    "label": "notes",
                    "old": "from python",
                    "new": "from the python client",
                    "expected_version": out["append"]["version"],
                },
            )
            out["replace"] = json.loads(text(current))
            await session.call_tool("archival_add", {"content": "the heron nests by the mill"})
            found = await session.call_tool("archival_find", {"query": "heron"})
            out["search"] = text(found)
            bad = await session.call_tool("block_read", {"label": "no-such-block"})
            out["unknown"] = {"is_error": bad.is_error, "text": text(bad)}
    print(json.dumps(out))


asyncio.run(main())

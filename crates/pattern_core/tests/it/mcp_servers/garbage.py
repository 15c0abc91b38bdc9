"""A program that is not an MCP server: it answers every line on stdin with junk.

pattern_core's MCP tests use it to check that such a server is a clear error, never a hang
or a crash. It must never be used outside tests.
"""

import sys

print("this is not JSON-RPC {", flush=True)
for line in sys.stdin:
    print("}{ garbage " + str(len(line)), flush=True)

"""A FastMCP server (stdio, or streamable HTTP) over one HotelBooking session, started once per episode by bench_runtime.py.

This is the upstream EnvFactory pattern (one server process per episode) used as the comparison
point; it is not the product's server (that arrives with the container issue).
"""

from __future__ import annotations

import sys

from fastmcp import FastMCP

from gym_envfactory import Session, get_environment

STATE = sys.argv[1] if len(sys.argv) > 1 else "large"
session = Session(get_environment("HotelBooking"), STATE)
mcp = FastMCP("hotel-bench")


@mcp.tool
def get_hotel_details(hotel_id: str) -> dict:
    """Details of one hotel."""
    r = session.call("get_hotel_details", {"hotel_id": hotel_id})
    return r.content if r.ok else {"error": r.error}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "http":  # python _stdio_server.py large http PORT
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[3]), show_banner=False)
    else:
        mcp.run(show_banner=False)

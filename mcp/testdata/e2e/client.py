#!/usr/bin/env python3
"""End-to-end MCP client for probing-mcp, built on the official Python SDK.

The Go test (mcp/e2e_test.go) runs this script against the built server
binary, over stdio or Streamable HTTP, and makes every assertion itself: this
script only drives the SDK and reports what it saw as ONE JSON object on
stdout. It exits 0 whenever it could report, even when the server refused or
failed (that is an observation, under "error"), and 2 on bad usage.

Scenarios (every one initializes and reports the instructions):
  stdio-list   --server BIN                      list tools and prompts
  stdio-call   --server BIN --call NAME JSON...  call tools, in order, in one session
  stdio-prompt --server BIN --prompt NAME [--prompt-args JSON]  list prompts, get one
  any scenario + --read URI...                  read resources, after the calls
  http-list    --url URL [--header 'K: V']...
  http-call    --url URL [--header 'K: V']... --call NAME JSON...
A list scenario may also be given --call and --prompt, which run after the
listing, so that one session can both list and call.

For stdio the server is started as "BIN serve" with this process's
environment, so the caller sets the server's PROBING_* variables; its stderr
(the server's logs) goes to this process's stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

STEP_TIMEOUT = 30.0  # seconds for any one await
TOTAL_TIMEOUT = 90.0  # seconds for the whole scenario


def error_info(exc: BaseException) -> dict[str, Any]:
    """Describes an exception, unwrapping the exception groups anyio adds."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    info: dict[str, Any] = {"error_type": type(exc).__name__, "message": str(exc)}
    code = getattr(getattr(exc, "error", None), "code", None)
    if isinstance(code, int):
        info["code"] = code
    return info


def dump(model: Any) -> Any:
    """The wire (camelCase) JSON form of an SDK model."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def texts(blocks: list[Any]) -> str:
    return "\n".join(b.text for b in blocks if getattr(b, "type", None) == "text")


async def list_all(session: ClientSession, out: dict[str, Any]) -> None:
    with anyio.fail_after(STEP_TIMEOUT):
        tools = await session.list_tools()
    out["tools"] = [dump(t) for t in tools.tools]
    with anyio.fail_after(STEP_TIMEOUT):
        prompts = await session.list_prompts()
    out["prompts"] = [dump(p) for p in prompts.prompts]
    if out.get("capabilities", {}).get("resources") is not None:
        with anyio.fail_after(STEP_TIMEOUT):
            resources = await session.list_resources()
        out["resources"] = [dump(r) for r in resources.resources]
        with anyio.fail_after(STEP_TIMEOUT):
            templates = await session.list_resource_templates()
        out["resource_templates"] = [dump(t) for t in templates.resource_templates]


async def read_resources(session: ClientSession, uris: list[str], out: dict[str, Any]) -> None:
    results = out.setdefault("reads", [])
    for uri in uris:
        rec: dict[str, Any] = {"uri": uri}
        results.append(rec)
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                res = await session.read_resource(uri)
        except Exception as exc:
            rec["error"] = error_info(exc)
            continue
        rec["contents"] = [dump(c) for c in res.contents]


async def call_tools(session: ClientSession, calls: list[tuple[str, Any]], out: dict[str, Any]) -> None:
    results = out.setdefault("calls", [])
    for name, arguments in calls:
        rec: dict[str, Any] = {"tool": name}
        results.append(rec)
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                res = await session.call_tool(name, arguments)
        except Exception as exc:  # an observation: the Go test asserts on it
            rec["error"] = error_info(exc)
            continue
        rec["is_error"] = res.is_error
        rec["text"] = texts(res.content)
        rec["structured_content"] = res.structured_content
        rec["meta"] = res.meta  # _meta: e.g. an MCP App's ui.resourceUri


async def get_prompt(session: ClientSession, name: str, arguments: dict[str, str] | None, out: dict[str, Any]) -> None:
    rec: dict[str, Any] = {"name": name}
    out["prompt"] = rec
    try:
        with anyio.fail_after(STEP_TIMEOUT):
            res = await session.get_prompt(name, arguments)
    except Exception as exc:
        rec["error"] = error_info(exc)
        return
    rec["description"] = res.description
    rec["messages"] = [{"role": m.role, "text": getattr(m.content, "text", None)} for m in res.messages]
    rec["text"] = "\n".join(m["text"] or "" for m in rec["messages"])


async def run_session(session: ClientSession, args: argparse.Namespace, out: dict[str, Any]) -> None:
    with anyio.fail_after(STEP_TIMEOUT):
        init = await session.initialize()
    out["protocol_version"] = init.protocol_version
    out["server_info"] = dump(init.server_info)
    out["instructions"] = session.instructions
    out["capabilities"] = dump(init.capabilities)
    if args.scenario.endswith("-list"):
        await list_all(session, out)
    elif args.scenario.endswith("-prompt"):
        with anyio.fail_after(STEP_TIMEOUT):
            prompts = await session.list_prompts()
        out["prompts"] = [dump(p) for p in prompts.prompts]
    if args.calls:
        await call_tools(session, args.calls, out)
    if args.prompt:
        await get_prompt(session, args.prompt, args.prompt_args, out)
    if args.read:
        await read_resources(session, args.read, out)


def message_handler(out: dict[str, Any]) -> Any:
    """Records transport faults, such as a stdout line that is not JSON-RPC,
    which the SDK would otherwise only log and skip."""

    async def handle(message: Any) -> None:
        if isinstance(message, Exception):
            out.setdefault("stream_errors", []).append(error_info(message))

    return handle


async def run_stdio(args: argparse.Namespace, out: dict[str, Any]) -> None:
    params = StdioServerParameters(command=args.server, args=["serve"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, read_timeout_seconds=STEP_TIMEOUT, message_handler=message_handler(out)
        ) as session:
            await run_session(session, args, out)


async def run_http(args: argparse.Namespace, out: dict[str, Any]) -> None:
    statuses: list[int] = out.setdefault("http_statuses", [])

    async def on_response(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    # trust_env=False: no proxy from the environment between us and 127.0.0.1.
    http = httpx2.AsyncClient(
        headers=args.headers,
        timeout=httpx2.Timeout(STEP_TIMEOUT),
        event_hooks={"response": [on_response]},
        trust_env=False,
    )
    async with http, streamable_http_client(args.url, http_client=http) as (read, write):
        async with ClientSession(
            read, write, read_timeout_seconds=STEP_TIMEOUT, message_handler=message_handler(out)
        ) as session:
            await run_session(session, args, out)


async def main_async(args: argparse.Namespace, out: dict[str, Any]) -> None:
    try:
        with anyio.fail_after(TOTAL_TIMEOUT):
            if args.scenario.startswith("stdio-"):
                await run_stdio(args, out)
            else:
                await run_http(args, out)
    except Exception as exc:
        out["error"] = error_info(exc)
        out["traceback"] = traceback.format_exc()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=["stdio-list", "stdio-call", "stdio-prompt", "http-list", "http-call"])
    p.add_argument("--server", help="server binary (stdio scenarios); run as 'BIN serve'")
    p.add_argument("--url", help="Streamable HTTP endpoint (http scenarios), e.g. http://127.0.0.1:8080/mcp")
    p.add_argument("--header", action="append", default=[], help="extra HTTP header 'Name: value' (repeatable)")
    p.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON"),
                   help="call TOOL with the JSON object of arguments (repeatable; calls run in order)")
    p.add_argument("--prompt", help="prompt to get (stdio-prompt)")
    p.add_argument("--read", action="append", default=[], metavar="URI", help="resource to read (repeatable)")
    p.add_argument("--prompt-args", default="{}", help="JSON object of prompt arguments")
    args = p.parse_args(argv)
    if args.scenario.startswith("stdio-") and not args.server:
        p.error(f"{args.scenario} needs --server")
    if args.scenario.startswith("http-") and not args.url:
        p.error(f"{args.scenario} needs --url")
    if args.scenario.endswith("-call") and not args.call and not args.read:
        p.error(f"{args.scenario} needs at least one --call")
    if args.scenario.endswith("-prompt") and not args.prompt:
        p.error(f"{args.scenario} needs --prompt")
    args.headers = {}
    for h in args.header:
        key, sep, value = h.partition(":")
        if not sep or not key.strip():
            p.error(f"--header {h!r}: want 'Name: value'")
        args.headers[key.strip()] = value.strip()
    try:
        args.calls = [(name, json.loads(raw)) for name, raw in args.call]
        args.prompt_args = json.loads(args.prompt_args)
    except json.JSONDecodeError as exc:
        p.error(f"bad JSON argument: {exc}")
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    # client_pid: a stdio server's parent, which it names in its audit log.
    out: dict[str, Any] = {"scenario": args.scenario, "client_pid": os.getpid()}
    anyio.run(main_async, args, out)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

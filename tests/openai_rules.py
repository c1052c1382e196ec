"""What OpenAI's Chat Completions API refuses, as its reference documents it: the judge of "did Duet
send an upstream a request it would refuse?" in the fuzz tests.

It is written from OpenAI's published API reference (its OpenAPI document: field types, ``minimum``
/ ``maximum``, ``maxItems`` of ``stop``, 128 tools, the name pattern of functions and response
formats) and its documented errors (``max_tokens`` is an int32; function parameters must be a
JSON Schema of ``"type": "object"`` whose ``$ref``s resolve; a ``tool`` message answers a call of the
assistant message before it; ``tool_choice`` and ``parallel_tool_calls`` need ``tools``), and
independent of Duet's own checks: tool schemas are judged by the ``jsonschema`` package (whose
messages OpenAI's errors quote), Duet's by ``jsonschema-rs``.

:func:`refusal` answers the reason OpenAI would give, or ``None``. A scripted upstream that enforces
it (:meth:`tests.scripted_upstream.ScriptedUpstream.enforce_openai_rules`) answers those requests
with OpenAI's HTTP 400 and records why.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterator

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.validators import validator_for

INT32_MAX = 2**31 - 1
INT64 = (-(2**63), 2**63 - 1)
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
RANGES = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2)}
SAMPLING_DATA_KEYWORDS = ("enum", "const", "default", "examples")  # hold data, not schemas


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def refusal(body: Any) -> str | None:
    """The reason OpenAI would refuse ``body`` (a parsed Chat Completions request), else ``None``."""
    if not isinstance(body, dict):
        return "the body must be an object"
    if not isinstance(body.get("model"), str):
        return "model: required string"
    for check in (_options, _tools, _messages):
        reason = check(body)
        if reason is not None:
            return reason
    return None


def _options(body: dict[str, Any]) -> str | None:
    for name, (low, high) in RANGES.items():
        if name in body and body[name] is not None and not (_number(body[name]) and low <= body[name] <= high):
            return f"{name}: a number in [{low}, {high}]"
    for name in ("max_tokens", "max_completion_tokens"):
        if body.get(name) is not None and not (_integer(body[name]) and 1 <= body[name] <= INT32_MAX):
            return f"{name}: an integer in [1, {INT32_MAX}]"
    if body.get("n") is not None and not (_integer(body["n"]) and 1 <= body["n"] <= 128):
        return "n: an integer in [1, 128]"
    if body.get("seed") is not None and not (_integer(body["seed"]) and INT64[0] <= body["seed"] <= INT64[1]):
        return "seed: an int64"
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and 1 <= len(stop) <= 4 and all(isinstance(s, str) for s in stop)):
        return "stop: a string or 1 to 4 strings"
    bias = body.get("logit_bias")
    if bias is not None and not (isinstance(bias, dict) and all(_number(v) and -100 <= v <= 100 for v in bias.values())):
        return "logit_bias: token ids to numbers in [-100, 100]"
    if body.get("user") is not None and not isinstance(body["user"], str):
        return "user: a string"
    for flag in ("stream", "parallel_tool_calls"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            return f"{flag}: a boolean"
    return _response_format(body.get("response_format"))


def _response_format(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        return "response_format.type: text, json_object or json_schema"
    if value["type"] != "json_schema":
        return None
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not NAME.match(spec["name"]):
        return "response_format.json_schema.name: required, a-z, A-Z, 0-9, _ and -, at most 64"
    if spec.get("schema") is not None:
        return _schema_refusal(spec["schema"], "response_format.json_schema.schema", object_root=False)
    return None


def _tools(body: dict[str, Any]) -> str | None:
    tools = body.get("tools")
    if tools is None:
        if body.get("tool_choice") not in (None, "none", "auto") or body.get("parallel_tool_calls") is not None:
            return "tool_choice / parallel_tool_calls: only allowed when tools are specified"
        return None
    if not isinstance(tools, list) or not 1 <= len(tools) <= 128:
        return "tools: 1 to 128 tools"
    names = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            return f"tools[{index}]: {{type: function, function: {{...}}}}"
        if not isinstance(function.get("name"), str) or not NAME.match(function["name"]):
            return f"tools[{index}].function.name: a-z, A-Z, 0-9, _ and -, at most 64"
        if function.get("description") is not None and not isinstance(function["description"], str):
            return f"tools[{index}].function.description: a string"
        if function.get("strict") is not None and not isinstance(function["strict"], bool):
            return f"tools[{index}].function.strict: a boolean"
        if function.get("parameters") is not None:
            reason = _schema_refusal(function["parameters"], f"tools[{index}].function.parameters", object_root=True)
            if reason is not None:
                return reason
        names.append(function["name"])
    if len(set(names)) != len(names):
        return "tools: function names must be unique"
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        named = choice.get("function", {}).get("name") if isinstance(choice.get("function"), dict) else None
        if choice.get("type") != "function" or named not in names:
            return "tool_choice: names a function that is not among the tools"
    elif choice not in (None, "none", "auto", "required"):
        return "tool_choice: none, auto, required or a named function"
    return None


def _schema_refusal(schema: Any, param: str, object_root: bool) -> str | None:
    """OpenAI's "Invalid schema for function ...": not an object schema, not a valid JSON Schema, or a
    ``$ref`` that does not resolve."""
    if not isinstance(schema, dict):
        return f"{param}: a JSON Schema object"
    if object_root and schema.get("type") != "object":
        return f"{param}: schema must be a JSON Schema of 'type: \"object\"'"
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        return f"{param}: {exc.message}"
    resource = referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    resolver = referencing.Registry().with_resource("urn:tool", resource).resolver("urn:tool")
    for reference in _references(schema):
        try:
            resolver.lookup(reference)
        except referencing.exceptions.Unresolvable:
            return f"{param}: the reference {reference!r} could not be resolved"
    return None


def _references(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("$ref", "$dynamicRef") and isinstance(item, str):
                yield item
            elif key not in SAMPLING_DATA_KEYWORDS:
                yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


def _messages(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return f"{where}.role: one of {', '.join(ROLES)}"
        role = message["role"]
        if role != "tool" and pending:
            return f"{where}: an assistant message with 'tool_calls' must be followed by tool messages for each call"
        reason = _content(message, where)
        if reason is not None:
            return reason
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"{where}: a 'tool' message must answer a 'tool_calls' of the message before it"
            pending.discard(message["tool_call_id"])
        elif role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            if not isinstance(calls, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("id"), str) and c.get("type") == "function"
                    and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
                    and isinstance(c["function"].get("arguments"), str) for c in calls):
                return f"{where}.tool_calls: each {{id, type: function, function: {{name, arguments: string}}}}"
            pending = {c["id"] for c in calls}
    if pending:
        return "messages: an assistant message with 'tool_calls' must be followed by tool messages for each call"
    return None


def _content(message: dict[str, Any], where: str) -> str | None:
    content = message.get("content")
    role = message["role"]
    if content is None:
        return None if role == "assistant" else f"{where}.content: required"
    if isinstance(content, str):
        return None
    kinds = ("text", "image_url") if role == "user" else ("text", "refusal") if role == "assistant" else ("text",)
    if not isinstance(content, list):
        return f"{where}.content: a string or a list of parts"
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in kinds:
            return f"{where}.content[{index}].type: one of {kinds}"
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            return f"{where}.content[{index}].text: a string"
        if part["type"] == "image_url" and not (isinstance(part.get("image_url"), dict) and isinstance(part["image_url"].get("url"), str)):
            return f"{where}.content[{index}].image_url.url: a string"
    return None

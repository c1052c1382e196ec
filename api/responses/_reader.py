"""A Responses API request → the run the shared flow starts (a :class:`~duet.agents.DuetRequest`).

Input items become OpenAI chat messages, converted by the one converter every protocol uses
(:func:`duet.agents.conversation_from_openai`): ``message`` items of any role (``developer`` is a
system message), ``function_call`` / ``custom_tool_call`` items as the assistant's tool calls and
their ``*_output`` items as tool results; ``reasoning`` items are dropped (the answer model never
sees earlier thinking, as ``<think>`` blocks in chat history); ``item_reference`` items are
resolved from stored responses. Tools: ``function`` tools as they are; a ``custom`` (freeform) tool
as a function with one string argument ``input``; the tools of a ``namespace`` flattened (the
call names them back with their namespace); hosted tools dropped. What cannot be used is a 400
naming the param, before any model call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, get_args

from pydantic import ValidationError

from duet.agents import ConversationError, ReasoningEffort, conversation_from_openai
from duet.workbenches import ContentCache, ProxyTool, content_key, proxy_tools_from_openai

from duet.api._options import AskedOptions, ToolChoice, sampling_args
from duet.api._errors import APIError
from duet.api._wire import FunctionDefinition
from duet.api.responses._protocol import HOSTED_TOOL_TYPES, NamedToolChoice, ResponsesRequest

MAX_READ_TOOL_LISTS = 256
CUSTOM_INPUT = "input"
"""The one argument of the function a freeform ``custom`` tool becomes."""


@dataclass(frozen=True, slots=True)
class ClientTool:
    """What a tool the model calls is on the client's side: its kind, namespace and name."""

    kind: str  # "function" or "custom"
    name: str
    namespace: str | None = None


def flat_name(namespace: str | None, name: str) -> str:
    """The one name a tool of a namespace has for the model (``crm`` + ``find`` → ``crm__find``;
    a namespace that ends with a separator, such as Codex's ``mcp__docs__``, is joined as it is)."""
    if not namespace:
        return name
    return namespace + name if namespace.endswith(("_", "-", ".", "/")) else f"{namespace}__{name}"


def _kind_of(item: Mapping[str, Any], param: str, default: str | None = None) -> str | None:
    """``item``'s ``type``: a string, or ``default`` when there is none. Anything else is a 400: a list
    or an object is no type, and must never reach a lookup by name (in a set: unhashable) or a string method."""
    kind = item.get("type", default)
    if kind is None or isinstance(kind, str):
        return kind
    raise APIError(400, f"{param}.type: must be a string", param=f"{param}.type", code="invalid_request")


def _namespace(item: Mapping[str, Any], param: str) -> str | None:
    namespace = item.get("namespace")
    if namespace is None or isinstance(namespace, str):
        return namespace
    raise APIError(400, f"{param}.namespace: must be a string", param=f"{param}.namespace", code="invalid_request")


def _function_tool(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    try:
        definition = FunctionDefinition.model_validate(
            {"name": tool.get("name"), "description": tool.get("description"), "parameters": tool.get("parameters"),
             "strict": tool.get("strict")})
    except ValidationError as exc:
        raise _tool_error(exc, param) from None
    function: dict[str, Any] = {"name": definition.name}
    if definition.description is not None:
        function["description"] = definition.description
    function["parameters"] = tool.get("parameters") if tool.get("parameters") is not None else {"type": "object", "properties": {}}
    if definition.strict is not None:
        function["strict"] = definition.strict
    return function


def _tool_error(exc: ValidationError, param: str) -> APIError:
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    return APIError(400, f"{param}.{where}: {error['msg']}", param=f"{param}.{where}", code="invalid_request")


def _custom_tool(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise APIError(400, f"{param}.name: a custom tool needs a name", param=f"{param}.name", code="invalid_request")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise APIError(400, f"{param}.description: must be a string", param=f"{param}.description", code="invalid_request")
    description = description or ""
    grammar = _custom_grammar(tool.get("format"), f"{param}.format")
    if grammar is not None:  # the model is told the grammar it cannot be held to
        description += f"\n\nThe input follows this {grammar[0]} grammar:\n{grammar[1]}"
    return {
        "name": name,
        "description": description.strip(),
        "parameters": {
            "type": "object",
            "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's whole input, as free text."}},
            "required": [CUSTOM_INPUT],
            "additionalProperties": False,
        },
    }


def _custom_grammar(fmt: Any, param: str) -> tuple[str, str] | None:
    """A custom tool's ``format``: none or ``{"type": "text"}`` (``None``), or a grammar's syntax and
    definition, as OpenAI takes them (anything else it refuses)."""
    if fmt is None:
        return None
    kind = _kind_of(fmt, param) if isinstance(fmt, Mapping) else None
    if kind == "text":
        return None
    if kind == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if syntax in ("lark", "regex") and isinstance(definition, str):
            return syntax, definition
        raise APIError(400, f"{param}: a grammar needs a syntax ('lark' or 'regex') and a string definition", param=param,
                       code="invalid_request")
    raise APIError(400, f"{param}: must be {{\"type\": \"text\"}} or a grammar", param=param, code="invalid_request")


ReadTools = tuple[list[dict[str, Any]], dict[str, ClientTool]]
_read_tool_lists: ContentCache[ReadTools] = ContentCache(MAX_READ_TOOL_LISTS, 8 * 1024 * 1024)


def read_tools(tools: Sequence[Any], max_tools: int) -> ReadTools:
    """The request's tools as Chat Completions tools, and what each (by the name the model sees) is
    to the client. Hosted tools are dropped; any other unknown type is a 400 naming it. Read once per
    content (a client sends the same tools with every request; what is read is shared: nobody changes it)."""
    key = content_key(tools) if type(tools) is list and tools else None
    if key is None:
        return _read_tools(tools, max_tools)
    read = _read_tool_lists.get_or_make(tools, lambda copy: _read_tools(copy, max_tools), key)
    if len(read[0]) > max_tools:  # read under a larger limit (another app of this process)
        raise APIError(400, f"tools: at most {max_tools} are allowed", param="tools", code="too_many_items")
    return read


def _read_tools(tools: Sequence[Any], max_tools: int) -> ReadTools:
    chat_tools: list[dict[str, Any]] = []
    client_tools: dict[str, ClientTool] = {}

    def add(tool: Mapping[str, Any], param: str, namespace: str | None) -> None:
        kind = _kind_of(tool, param)
        if kind == "function":
            function = _function_tool(tool, param)
        elif kind == "custom":
            function = _custom_tool(tool, param)
        else:
            raise APIError(400, f"{param}.type: a namespace holds function and custom tools, not {str(kind)[:64]!r}",
                           param=f"{param}.type", code="unsupported_tool_type")
        client = ClientTool(kind, function["name"], namespace)
        function["name"] = flat_name(namespace, function["name"])
        if function["name"] in client_tools:
            raise APIError(400, f"{param}.name: two tools are named '{function['name'][:100]}'", param=f"{param}.name",
                           code="invalid_request")
        client_tools[function["name"]] = client
        chat_tools.append({"type": "function", "function": function})

    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, Mapping):
            raise APIError(400, f"{param}: each tool must be an object", param=param, code="invalid_request")
        kind = _kind_of(tool, param)
        if kind in ("function", "custom"):
            add(tool, param, None)
        elif kind == "namespace":
            name, members = tool.get("name"), tool.get("tools")
            if not isinstance(name, str) or not name or not isinstance(members, list):
                raise APIError(400, f"{param}: a namespace needs a name and a list of tools", param=param, code="invalid_request")
            for inner, member in enumerate(members):
                if not isinstance(member, Mapping):
                    raise APIError(400, f"{param}.tools[{inner}]: each tool must be an object", param=f"{param}.tools[{inner}]",
                                   code="invalid_request")
                add(member, f"{param}.tools[{inner}]", name)
        elif kind in HOSTED_TOOL_TYPES:
            continue
        else:
            raise APIError(400, f"{param}.type: unsupported tool type {str(kind)[:64]!r}; Duet takes function, custom and "
                           "namespace tools (hosted tools are dropped)", param=f"{param}.type", code="unsupported_tool_type")
        if len(chat_tools) > max_tools:
            raise APIError(400, f"tools: at most {max_tools} are allowed", param="tools", code="too_many_items")
    return chat_tools, client_tools


def _text_of(content: Any, param: str, kinds: tuple[str, ...]) -> str | list[dict[str, Any]]:
    """The text of a content list whose parts are of ``kinds`` (a string is its own text); when a part
    carries a ``cache_control`` mark, the parts as text parts, the mark kept (the conversation joins
    them into the same text: :func:`duet.agents.cache_marks_from_openai` reads the marks)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{param}: must be a string or a list of content parts", param=param, code="invalid_request")
    texts = []
    marked = False
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in kinds and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise APIError(400, f"{param}[{index}].type: unsupported content part {str(kind)[:64]!r} here",
                           param=f"{param}[{index}].type", code="invalid_request")
        marked = marked or isinstance(part.get("cache_control"), dict)
    if marked:
        return [_with_mark({"type": "text", "text": text}, part) for text, part in zip(texts, content, strict=True)]
    return "".join(texts)


def _with_mark(converted: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``converted`` with the ``cache_control`` mark of the ``part`` it was made of, if any."""
    control = part.get("cache_control")
    return {**converted, "cache_control": control} if isinstance(control, dict) else converted


def _user_parts(content: Any, param: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{param}: must be a string or a list of content parts", param=param, code="invalid_request")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        where = f"{param}[{index}]"
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append(_with_mark({"type": "text", "text": part["text"]}, part))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise APIError(400, f"{where}.image_url: an image needs an image_url (file_id is not supported)",
                               param=f"{where}.image_url", code="invalid_request")
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": part.get("detail") or "auto"}})
        else:
            raise APIError(400, f"{where}.type: unsupported content part {str(kind)[:64]!r}", param=f"{where}.type",
                           code="invalid_request")
    return parts


def _output_text(output: Any, param: str) -> str:
    """A tool call's output: a string, or content parts (text kept; an image or file is named, not passed on)."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        raise APIError(400, f"{param}: must be a string or a list of content parts", param=param, code="invalid_request")
    texts = []
    for part in output:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, Mapping):
            texts.append(f"[{part.get('type', 'part')}]")
    return "\n".join(texts)


def _string(item: Mapping[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise APIError(400, f"{param}.{key}: required (a non-empty string)", param=f"{param}.{key}", code="invalid_request")
    return value


class _Messages:
    """Chat messages built from items, remembering which item each came from (for error params)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins: list[str] = []

    def add(self, message: dict[str, Any], origin: str) -> None:
        self.messages.append(message)
        self.origins.append(origin)

    def call(self, call: dict[str, Any], origin: str) -> None:
        """A tool call joins the assistant message just before it (parallel calls are one turn)."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            self.add({"role": "assistant", "content": None, "tool_calls": [call]}, origin)


def messages_from_items(items: Sequence[Any], instructions: str | None, origins: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages for ``items`` (``origins[i]``: the param item ``i`` came from), after the instructions."""
    out = _Messages()
    if instructions:
        out.add({"role": "system", "content": instructions}, "instructions")
    for item, param in zip(items, origins, strict=True):
        if not isinstance(item, Mapping):
            raise APIError(400, f"{param}: each input item must be an object", param=param, code="invalid_request")
        kind = _kind_of(item, param, "message" if "role" in item else None)
        if kind == "message":
            out.add(_message(item, param), param)
        elif kind in ("function_call", "custom_tool_call"):
            out.call(_call(item, kind, param), param)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.add({"role": "tool", "tool_call_id": _string(item, "call_id", param),
                     "content": _output_text(item.get("output"), f"{param}.output")}, param)
        elif kind != "reasoning":  # the answer model never sees earlier thinking
            raise APIError(400, f"{param}.type: unsupported input item type {str(kind)[:64]!r}", param=f"{param}.type",
                           code="invalid_request")
    if not out.messages or all(message["role"] == "system" for message in out.messages):
        raise APIError(400, "input: the request has no input to answer", param="input", code="invalid_request")
    return out.messages, out.origins


def _message(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    """A ``message`` item as a chat message: ``developer`` is ``system``."""
    role = item.get("role")
    content = item.get("content")
    if role in ("system", "developer"):
        return {"role": "system", "content": _text_of(content, f"{param}.content", ("input_text", "text"))}
    if role == "user":
        return {"role": "user", "content": _user_parts(content, f"{param}.content")}
    if role == "assistant":
        return {"role": "assistant", "content": _text_of(content, f"{param}.content", ("output_text", "input_text", "text"))}
    raise APIError(400, f"{param}.role: unsupported role {str(role)[:32]!r}", param=f"{param}.role", code="invalid_request")


def _call(item: Mapping[str, Any], kind: str, param: str) -> dict[str, Any]:
    """A ``function_call`` or ``custom_tool_call`` item as a chat tool call (a custom tool's input as its one argument)."""
    name = flat_name(_namespace(item, param), _string(item, "name", param))
    if kind == "function_call":
        arguments = item.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise APIError(400, f"{param}.arguments: must be a JSON string", param=f"{param}.arguments", code="invalid_request")
        arguments = arguments or "{}"
    else:
        text = item.get("input")
        if not isinstance(text, str):
            raise APIError(400, f"{param}.input: must be a string", param=f"{param}.input", code="invalid_request")
        arguments = json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)
    return {"id": _string(item, "call_id", param), "type": "function", "function": {"name": name, "arguments": arguments}}


def conversation_of(messages: list[dict[str, Any]], origins: Sequence[str]) -> list[Any]:
    """AutoGen messages for the chat messages, with a converter error's param pointing at the input item."""
    try:
        return conversation_from_openai(messages)
    except ConversationError as exc:
        param = exc.param
        if param.startswith("messages["):
            index, _, rest = param[len("messages["):].partition("]")
            if index.isdigit() and int(index) < len(origins):
                param = origins[int(index)] + rest
        raise APIError(400, f"{param}: {exc}", param=param, code="invalid_request") from None


def proxy_tools(chat_tools: list[dict[str, Any]]) -> list[ProxyTool]:
    try:
        return proxy_tools_from_openai(chat_tools)
    except ValueError as exc:
        raise APIError(400, str(exc), param="tools", code="invalid_request") from None


SAMPLING_FIELDS = {"temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_tokens", "user": "user",
                   "prompt_cache_key": "prompt_cache_key"}
"""The Responses API's fields for the answer model, by their Chat Completions names (``text.format`` aside)."""


def asked_options(request: ResponsesRequest) -> AskedOptions:
    """The Responses API's mapping: its field names, ``text.format`` as a ``response_format``, and its
    tool choices (a mode, a function or custom tool by namespace and name, ``allowed_tools``; a hosted
    tool's choice leaves the choice to the model, whose hosted tools are dropped)."""
    create_args = sampling_args(request, SAMPLING_FIELDS)
    if request.text is not None and request.text.format is not None and request.text.format.type != "text":
        create_args["response_format"] = request.text.format.response_format()
    return AskedOptions(create_args, _tool_choice(request.tool_choice), parallel_tool_calls=request.parallel_tool_calls,
                        error_code="invalid_request", reasoning_effort=reasoning_effort(request.reasoning))


REASONING_EFFORTS = frozenset(get_args(ReasoningEffort))


def reasoning_effort(reasoning: dict[str, Any] | None) -> ReasoningEffort | None:
    """``reasoning.effort`` (Codex sends it); an effort Duet does not know is refused, naming the param."""
    effort = (reasoning or {}).get("effort")
    if effort is None:
        return None
    if effort not in REASONING_EFFORTS:
        raise APIError(400, f"reasoning.effort: one of {', '.join(sorted(REASONING_EFFORTS))}, got {str(effort)[:40]!r}",
                       param="reasoning.effort", code="invalid_request")
    return effort


def _tool_choice(choice: str | NamedToolChoice | None) -> ToolChoice:
    if choice is None or isinstance(choice, str):
        return ToolChoice(mode=choice or "auto")  # type: ignore[arg-type]
    if choice.type in ("function", "custom"):
        if not choice.name:
            raise APIError(400, "tool_choice.name: required for a function or custom tool", param="tool_choice.name",
                           code="invalid_request")
        return ToolChoice(name=flat_name(choice.namespace, choice.name))
    if choice.type == "allowed_tools":
        allowed = frozenset(flat_name(_namespace(t, "tool_choice.tools"), t["name"]) for t in choice.tools or []
                            if isinstance(t, Mapping) and isinstance(t.get("name"), str))
        return ToolChoice(mode=choice.mode or "auto", allowed=allowed)
    if choice.type not in HOSTED_TOOL_TYPES:
        raise APIError(400, f"tool_choice.type: unsupported {choice.type[:64]!r}", param="tool_choice.type", code="invalid_request")
    return ToolChoice()

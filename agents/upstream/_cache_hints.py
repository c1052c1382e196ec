"""Prompt-cache hints, sent to the upstreams that document them and to no other.

Two hints, each a model section's setting (``auto`` decides from the base URL's host, as
:func:`takes_hint` does; ``on``; ``off``):

- ``cache_marks``: the client's explicit cache breakpoints (Anthropic's ``cache_control``; see
  :class:`~duet.agents._options.CacheMark`) on the OpenAI wire, as ``cache_control`` on a content part
  (and on a tool definition). Documented by OpenRouter (https://openrouter.ai/docs/features/prompt-caching:
  "cache_control" on content parts, for Anthropic and Gemini models; on tool definitions, as its SDK
  keeps them: langchain-ai/langchain#38215) and by Alibaba Model Studio's OpenAI-compatible API
  (https://www.alibabacloud.com/help/en/model-studio/context-cache, explicit cache: a
  ``"cache_control": {"type": "ephemeral"}`` mark inside a content block, at most 4 a request).
  Others do not define it (OpenAI's chat completions: "an OpenRouter-specific concept",
  langchain-ai/langchain#33773) or refuse it: Mistral's API answers 400 (``Extra inputs are not
  permitted``, omnimind-ai/OmniBot#301), so do strict gateways (QuantumNous/new-api#5982); vLLM's and
  Ollama's servers cache prefixes by themselves and have no marks (vllm-project/vllm#44775). Dropped there.
- ``cache_key``: a ``prompt_cache_key`` Duet derives for calls whose client sent none of theirs (the
  reasoner's). OpenAI's API takes it (it routes requests with the same key and prefix to the same
  cache: https://developers.openai.com/api/docs/guides/prompt-caching); vLLM ignores fields it does not know
  with a warning, Mistral refuses them: sent only where documented.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping, Sequence

import yarl

from duet.agents._options import CacheMark
from duet.agents.upstream._options import CacheHint

CACHE_MARKS_ARG = "duet_cache_marks"
"""The call argument (``extra_create_args``) that hands a Duet client the client's marks; never sent as a field."""

CACHE_MARK_HOSTS = ("openrouter.ai", "dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com", "dashscope-us.aliyuncs.com")
"""Hosts (and their subdomains) whose OpenAI-compatible API documents ``cache_control`` marks on content parts."""
CACHE_KEY_HOSTS = ("api.openai.com",)
"""Hosts whose chat completions API documents ``prompt_cache_key``."""


def takes_hint(setting: CacheHint, base_url: str, hosts: Sequence[str]) -> bool:
    """Whether an upstream at ``base_url`` gets a hint set to ``setting`` (``auto``: its host is one of ``hosts``).

    >>> takes_hint("auto", "https://openrouter.ai/api/v1", CACHE_MARK_HOSTS), takes_hint("auto", "http://localhost:8000/v1", CACHE_MARK_HOSTS)
    (True, False)
    """
    if setting != "auto":
        return setting == "on"
    try:
        host = (yarl.URL(base_url).host or "").lower()
    except ValueError:
        return False
    return any(host == known or host.endswith("." + known) for known in hosts)


def mark_messages(messages: list[dict[str, Any]], marks: Iterable[CacheMark]) -> None:
    """Puts each mark on the OpenAI chat ``messages`` (in place): the latest message of the mark's role
    whose text begins with the mark's text (a system message: holds it) is split into text parts at the
    end of that text, the part it ends carrying the mark; what Duet added after it (a reasoning note,
    its preamble) follows in a part of its own. A mark that finds no such message is dropped.

    >>> messages = [{"role": "user", "content": "Hi<reasoning>…"}]
    >>> mark_messages(messages, [CacheMark(role="user", text="Hi", control={"type": "ephemeral"})])
    >>> messages[0]["content"]
    [{'type': 'text', 'text': 'Hi', 'cache_control': {'type': 'ephemeral'}}, {'type': 'text', 'text': '<reasoning>…'}]
    """
    for mark in marks:
        if mark.role == "tools":
            continue
        for message in reversed(messages):
            if message.get("role") == mark.role and _mark_message(message, mark):
                break


def _mark_message(message: dict[str, Any], mark: CacheMark) -> bool:
    """Marks the part of ``message`` that ``mark`` ends: a part whose text is the mark's (a client's own
    parts), else the text parts split where the mark's text ends in their joined text (a message may
    hold several marks: Claude Code marks more than one system block)."""
    content = message.get("content")
    parts: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else content if isinstance(content, list) else []
    for index, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "text" and part.get("text") == mark.text and "cache_control" not in part:
            parts[index] = {**part, "cache_control": mark.control}
            message["content"] = parts
            return True
    if not parts or not all(isinstance(part, dict) and part.get("type") == "text" for part in parts):
        return False
    end = _end_of("".join(part["text"] for part in parts), mark)
    if end is None:
        return False
    message["content"] = _split_at(parts, end, mark.control)
    return True


def _split_at(parts: list[dict[str, Any]], end: int, control: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Text ``parts`` with the one holding offset ``end`` (of their joined text) cut there, its first
    piece carrying ``control``."""
    out: list[dict[str, Any]] = []
    offset = 0
    for part in parts:
        text = part["text"]
        if offset < end <= offset + len(text):
            cut = end - offset
            out.append({**part, "text": text[:cut], "cache_control": control})
            if cut < len(text):  # the rest keeps any mark that ended the whole part
                out.append({**part, "text": text[cut:]})
        else:
            out.append(part)
        offset += len(text)
    return out


def _end_of(content: str, mark: CacheMark) -> int | None:
    """Where the marked text ends in ``content``: at its start (a system message: its last place in it)."""
    if mark.role == "system":
        at = content.rfind(mark.text)
        return None if at < 0 else at + len(mark.text)
    return len(mark.text) if content.startswith(mark.text) else None


def marked_tools(marks: Iterable[CacheMark]) -> dict[str, Mapping[str, Any]]:
    """The marks on tool definitions, by the tool's name as the model sees it."""
    return {mark.text: mark.control for mark in marks if mark.role == "tools"}


def derived_cache_key(owner: str, pipeline: str, stage: str, client_key: str | None, first_user_text: str) -> str:
    """A ``prompt_cache_key`` for one stage's calls (``stage``: the reasoner's, whose prompt is not the
    answer model's): from the client's own key when it sent one, else from the conversation's first user
    message, the same on every turn of a conversation; kept apart per owner (API key) and pipeline. An
    upstream routes the calls with one key and prefix to one cache: one conversation's turns meet there,
    and other conversations spread over the rest instead of crowding one place (OpenAI's guide: about
    15 requests a minute per prefix and key).

    >>> a = derived_cache_key("owner", "duet", "reasoner", None, "Hi")
    >>> a == derived_cache_key("owner", "duet", "reasoner", None, "Hi"), a == derived_cache_key("other", "duet", "reasoner", None, "Hi"), len(a)
    (True, False, 37)
    """
    digest = hashlib.sha256()
    for value in (owner, pipeline, stage, "key" if client_key is not None else "conversation", client_key or first_user_text):
        digest.update(value.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return "duet-" + digest.hexdigest()[:32]

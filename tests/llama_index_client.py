"""LlamaIndex's OpenAI LLM (``llama-index-llms-openai``), the real client, pointed at Duet: its ``chat`` and
``stream_chat`` with their default retries (``max_retries=3``, given both to the openai SDK it builds and to
its own tenacity decorator around each call, so up to 3 x 4 HTTP requests for one call).

Its ``OpenAI`` class checks the model name against OpenAI's (for the context window), so it asks for
``gpt-4o-mini``: Duet answers that name through a model alias. ``llama_index.core`` fetches NLTK's punkt
tokenizer from the internet at import when it is missing; :func:`openai_llm` first points ``NLTK_DATA`` at
a folder where it is found (empty: a chat never tokenises with it) beside the stopwords the package ships,
so nothing leaves the machine.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

MODEL = "gpt-4o-mini"  # a name LlamaIndex's OpenAI class knows; Duet's config aliases it to a pipeline


def _offline_nltk() -> None:
    """Before ``llama_index.core`` is first imported: NLTK finds what it would download."""
    if "llama_index.core" in sys.modules or "NLTK_DATA" in os.environ:
        return
    spec = importlib.util.find_spec("llama_index.core")
    assert spec is not None and spec.origin is not None, "llama-index-core is required (the [test] extra installs it)"
    shipped = Path(spec.origin).parent / "_static" / "nltk_cache"
    folder = Path(tempfile.mkdtemp(prefix="duet-nltk-"))
    (folder / "tokenizers" / "punkt").mkdir(parents=True)
    os.environ["NLTK_DATA"] = os.pathsep.join([str(folder), str(shipped)])
    if "nltk" in sys.modules:  # imported already: its search path was read from the environment then
        sys.modules["nltk"].data.path[:0] = [str(folder), str(shipped)]


def openai_llm(base_url: str, api_key: str, **options: Any) -> Any:
    """LlamaIndex's ``OpenAI`` LLM on Duet's ``/v1``, its defaults unless ``options`` say otherwise."""
    _offline_nltk()
    from llama_index.llms.openai import OpenAI

    return OpenAI(model=MODEL, api_base=f"{base_url}/v1", api_key=api_key, **options)


def chat(base_url: str, api_key: str, question: str, stream: bool = False, **options: Any) -> str:
    """One user call: ``llm.chat`` (or ``llm.stream_chat``, read to its end); the answer's text."""
    llm = openai_llm(base_url, api_key, **options)
    from llama_index.core.llms import ChatMessage

    messages = [ChatMessage(role="user", content=question)]
    if not stream:
        return str(llm.chat(messages).message.content)
    text = ""
    for response in llm.stream_chat(messages):
        text += response.delta or ""
    return text

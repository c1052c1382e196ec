"""One module per replayed server; :data:`DIALECTS` maps each dialect's path name to it."""

from __future__ import annotations

from ..dialect import Dialect
from .dashscope import DashScope
from .deepseek import DeepSeek
from .gemini import Gemini
from .groq import Groq
from .llamacpp import LlamaCpp, LlamaCppLegacy, LlamaCppNone
from .mistral import Mistral
from .moonshot import Moonshot
from .ollama import Ollama
from .openrouter import OpenRouter
from .sglang import SGLang
from .vllm import VLLM, VLLMLegacy, VLLMNoParser, VLLMTransitional
from .zhipu import Zhipu

DIALECTS: dict[str, Dialect] = {
    dialect.name: dialect
    for dialect in (
        VLLM(), VLLMTransitional(), VLLMLegacy(), VLLMNoParser(),
        Ollama(),
        LlamaCpp(), LlamaCppNone(), LlamaCppLegacy(),
        SGLang(), DeepSeek(), OpenRouter(), Groq(), Mistral(), Gemini(),
        DashScope(), Moonshot(), Zhipu(),
    )
}
"""Every replayed dialect by the name that selects it (the first segment of the path)."""

__all__ = ["DIALECTS"]

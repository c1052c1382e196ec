"""Zhipu AI BigModel / GLM (``https://open.bigmodel.cn/api/paas/v4``). Picked because ZhipuAI is a
Dify built-in provider and GLM-4.5+ are common thinking models in Dify deployments in China.

Sources:
- https://docs.bigmodel.cn/cn/faq (error codes): business errors carry a numeric string ``code``
  — 1211 model does not exist, 1214 invalid parameter, 1261 prompt too long, 1301 unsafe content,
  1302 too many concurrent requests, 1113 account in arrears, 500 internal error — with HTTP 400,
  429 or 500.

Best readings: errors are ``{"error": {"code": "1211", "message": …}}``; reasoning in
``reasoning_content`` (thinking on by default for GLM-4.5 and later, off with ``thinking: {"type":
"disabled"}``); a tool call comes whole in one chunk (unless ``tool_stream`` is asked); usage rides
on the finish chunk; ``finish_reason`` may be ``sensitive`` (content blocked) or ``network_error``
(inference failed) — the replay's mid-stream failure is a ``network_error`` finish; ids
``call_<19 digits>``.
"""

from __future__ import annotations

import secrets
from typing import Iterator

from ..dialect import DONE, JSON, Dialect, HttpError, Ledger, Reply, Write
from ..scenario import Call, Failure


class Zhipu(Dialect):
    name = "zhipu"
    title = "Zhipu / GLM (BigModel)"
    default_models = ("glm-4.6", "glm-4.5", "glm-4.5-air", "glm-4-flash")
    thinking_models = ("glm-4.5", "glm-4.6", "glm-4.7")
    retry_after = None

    def thinks(self, model: str, body: JSON) -> bool:
        return super().thinks(model, body) and (body.get("thinking") or {}).get("type", "enabled") != "disabled"

    def completion_id(self) -> str:
        return str(secrets.randbelow(10**19)) + "-" + secrets.token_hex(4)

    def call_id(self, ledger: Ledger, body: JSON, index: int, call: Call) -> str:
        return "call_" + str(secrets.randbelow(10**19))

    def chunk_head(self, reply: Reply) -> JSON:
        return {"id": reply.completion_id, "created": reply.created, "model": reply.model}

    def choice(self, delta: JSON, finish: str | None) -> JSON:
        return {"index": 0, "delta": delta} if finish is None else {"index": 0, "finish_reason": finish, "delta": delta}

    def opening(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""} if not reply.turn.reasoning
                         else {"role": "assistant", "reasoning_content": ""})

    def tool_call_chunks(self, reply: Reply) -> Iterator[Write]:
        if reply.turn.calls:
            calls = [{**self.whole_call(reply, index, call_id, call), "index": index} for index, call_id, call in reply.calls()]
            yield self.chunk(reply, {"role": "assistant", "tool_calls": calls})

    def closing(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""}, self.finish_reason(reply), usage=self.usage(reply))
        yield DONE

    def usage(self, reply: Reply) -> JSON:
        prompt, completion = reply.prompt_tokens, reply.completion_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "prompt_tokens_details": {"cached_tokens": 0},
                "total_tokens": prompt + completion}

    def error(self, failure: Failure, model: str) -> HttpError:
        status, code, message = {
            "rate_limit": (429, "1302", "您当前使用该API的并发数过高，请降低并发，或联系客服增加限额。"),
            "bad_request": (400, "1261", "Prompt 超长"),
            "model_not_found": (400, "1211", "模型不存在，请检查模型代码。"),
            "server_error": (500, "500", "内部错误"),
        }[failure.kind]
        return HttpError.of(status, {"error": {"code": code, "message": message}})

    def mid_stream_failure(self, reply: Reply) -> Iterator[Write]:
        yield self.chunk(reply, {"role": "assistant", "content": ""}, "network_error", usage=self.usage(reply))
        yield DONE

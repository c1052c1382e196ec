"""The create arguments of a streamed call (``agents/upstream/_transform.py``): usage asked only of clients
that need asking."""

from __future__ import annotations

from autogen_ext.models.openai import OpenAIChatCompletionClient
from duet.agents import AnswerAgent, OpenAICompatibleClient, ReasoningAgent
from duet.agents.upstream import ANSWER_MODEL_INFO, streaming_create_args

from tests.agent_turns import QUESTION, R, run_turn
from tests.scripted_model_client import ScriptedModelClient, ScriptedTurn, text_result


def test_usage_is_asked_only_of_clients_that_need_asking() -> None:
    """AutoGen's OpenAI client streams no usage unless asked; Duet's own always asks; another
    client may reject OpenAI's field, so it gets the arguments as they are."""
    stock = OpenAIChatCompletionClient(model="m", base_url="http://127.0.0.1:1/v1", api_key="none", model_info=ANSWER_MODEL_INFO)
    assert streaming_create_args(stock, {"temperature": 0}) == {"temperature": 0, "stream_options": {"include_usage": True}}
    lean = OpenAICompatibleClient("m", "http://127.0.0.1:1/v1")
    assert streaming_create_args(lean, {"temperature": 0}) == {"temperature": 0}

    reasoner_client = ScriptedModelClient(ScriptedTurn([R("plan")], text_result("")))
    answer_client = ScriptedModelClient(ScriptedTurn(["Hi"], text_result("Hi")))
    reasoning = run_turn(ReasoningAgent("reasoner", reasoner_client), QUESTION)[1].chat_message
    run_turn(AnswerAgent("answerer", answer_client), QUESTION, reasoning)
    assert reasoner_client.calls[0].extra_create_args == answer_client.calls[0].extra_create_args == {}

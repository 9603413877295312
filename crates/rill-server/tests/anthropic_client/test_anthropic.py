"""The official `anthropic` Python client against `rill serve` on the fixture model.

Run through run.sh (which builds rill and makes a venv), or directly:
    RILL_BIN=target/debug/rill pytest crates/rill-server/tests/anthropic_client
The model has random weights: the tests check shapes and protocol, not wording.
"""

import sys
from pathlib import Path

import anthropic
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rill_serve  # noqa: E402

API_KEY = "sk-ant-rill-test"
ALIAS = "fixture"
server = rill_serve.server_fixture(API_KEY, ALIAS)


@pytest.fixture(scope="module")
def client(server):
    # The client sends the key as x-api-key.
    return anthropic.Anthropic(base_url=server, api_key=API_KEY, max_retries=0, timeout=60)


SYSTEM = "You are terse."
MESSAGES = [{"role": "user", "content": "Say hello."}]
# This client has no sampling arguments: greedy decoding and ignore_eos go in
# the body (rill reads temperature, top_p, top_k like Anthropic's API did).
GREEDY = {"temperature": 0}
NO_EOS = {"ignore_eos": True, **GREEDY}
TOOLS = [{
    "name": "get_weather",
    "description": "Current weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


def _text(message, kind):
    field = "thinking" if kind == "thinking" else "text"
    return "".join(getattr(b, field) for b in message.content if b.type == kind)


def test_message_with_thinking(client):
    m = client.messages.create(model=ALIAS, max_tokens=10, system=SYSTEM, messages=MESSAGES,
                               extra_body=NO_EOS)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 10
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0
    # The Qwen3.5 template opens <think>: the reply is one thinking block.
    assert [b.type for b in m.content] == ["thinking"]
    assert _text(m, "thinking")


def test_stream_matches_whole_without_thinking(client):
    kw = dict(model=ALIAS, max_tokens=12, system=SYSTEM, messages=MESSAGES,
              thinking={"type": "disabled"}, extra_body=NO_EOS)
    whole = client.messages.create(**kw)
    assert [b.type for b in whole.content] == ["text"]
    with client.messages.stream(**kw) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == _text(whole, "text")
    assert _text(final, "text") == _text(whole, "text")
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 12
    # The raw event sequence.
    events = [e.type for e in client.messages.create(stream=True, **kw)]
    assert events[0] == "message_start"
    assert events[1] == "content_block_start"
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}


def test_stop_sequences(client):
    kw = dict(model=ALIAS, max_tokens=40, messages=MESSAGES, thinking={"type": "disabled"})
    text = _text(client.messages.create(extra_body=NO_EOS, **kw), "text")
    at = next(i for i in range(2, len(text) - 3) if text[i:i + 3].isascii() and text[i:i + 3].isalnum())
    stop = text[at:at + 3]
    # ignore_eos again: the same greedy tokens, up to the stop sequence.
    m = client.messages.create(stop_sequences=["NEVER-SEEN-0", stop], extra_body=NO_EOS, **kw)
    assert m.stop_reason == "stop_sequence", m
    assert m.stop_sequence == stop
    cut = _text(m, "text")
    assert text.startswith(cut) and stop not in cut


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "any"},
                                    {"type": "tool", "name": "get_weather"}])
def test_tools(client, choice):
    m = client.messages.create(model=ALIAS, max_tokens=8, tools=TOOLS, tool_choice=choice,
                               messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    for b in m.content:
        if b.type == "tool_use":
            assert b.id.startswith("toolu_") and isinstance(b.input, dict)


def test_tool_round_trip_and_count_tokens(client):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": ""},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "And tomorrow?"},
        ]},
    ]
    counted = client.messages.count_tokens(model=ALIAS, system=SYSTEM, tools=TOOLS, messages=messages)
    assert counted.input_tokens > 20
    with client.messages.stream(model=ALIAS, max_tokens=6, system=SYSTEM, tools=TOOLS,
                                messages=messages, extra_body=NO_EOS) as stream:
        final = stream.get_final_message()
    u = final.usage
    assert u.input_tokens + (u.cache_read_input_tokens or 0) == counted.input_tokens
    assert final.stop_reason in ("max_tokens", "tool_use")


def test_errors(client, server):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=ALIAS, max_tokens=5, messages=MESSAGES,
                               extra_body={"temperature": -1})
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=ALIAS, max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=5, messages=MESSAGES)
    bad = anthropic.Anthropic(base_url=server, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model=ALIAS, max_tokens=5, messages=MESSAGES)
    assert e.value.body["error"]["type"] == "authentication_error"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))

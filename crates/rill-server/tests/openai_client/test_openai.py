"""The official `openai` Python client against `rill serve` on the fixture model.

Run through run.sh (which builds rill and makes a venv), or directly:
    RILL_BIN=target/release/rill pytest crates/rill-server/tests/openai_client
"""

import json
import sys
from pathlib import Path

import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rill_serve  # noqa: E402

API_KEY = "sk-rill-test"
ALIAS = "fixture"
server = rill_serve.server_fixture(API_KEY, ALIAS)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello."},
]


def test_models(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ALIAS in ids
    assert all(m.owned_by == "rill" for m in models.data)


def test_chat(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens <= 8
    # Thinking comes apart (extension field, kept by the client as extra).
    extra = c.message.model_extra or {}
    text = (c.message.content or "") + (extra.get("reasoning_content") or "")
    assert isinstance(text, str)
    # vLLM's name for the thinking, beside llama.cpp's.
    assert extra.get("reasoning") == extra.get("reasoning_content")


def test_chat_no_thinking_stream_matches(client):
    kw = dict(model=ALIAS, messages=MESSAGES, max_tokens=12, temperature=0,
              extra_body={"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True})
    whole = client.chat.completions.create(**kw)
    assert whole.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
    parts, finish, usage, first_role = [], None, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if first_role is None:
                first_role = ch.delta.role
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert first_role == "assistant"
    assert "".join(parts) == whole.choices[0].message.content
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 12


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_tools(client):
    tools = [{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }]
    r = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       tools=tools, tool_choice="auto", max_tokens=8)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length", "tool_calls")
    assert c.message.tool_calls is None or all(t.type == "function" for t in c.message.tool_calls)
    # A conversation carrying a tool call and its result.
    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    stream = client.chat.completions.create(model=ALIAS, messages=msgs, tools=tools, max_tokens=8, stream=True)
    finishes = [ch.finish_reason for chunk in stream for ch in chunk.choices if ch.finish_reason]
    assert len(finishes) == 1


def test_completions(client):
    r = client.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=6, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=ALIAS, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True,
        extra_body={"ignore_eos": True}) if c.choices)
    assert text == r.choices[0].text
    r = client.completions.create(model=ALIAS, prompt=[1, 2, 3], max_tokens=2, stop=["\n"])
    assert r.usage.prompt_tokens == 3


def test_completions_batch_echo_logprobs(client):
    # What evaluation harnesses send: a batch of token-id prompts, echoed and
    # scored, one generated token each.
    prompts = [[10, 20, 30, 40], [50, 60, 70]]
    r = client.completions.create(model=ALIAS, prompt=prompts, max_tokens=1, temperature=0,
                                  logprobs=1, echo=True)
    assert [c.index for c in r.choices] == [0, 1]
    for c, p in zip(r.choices, prompts):
        lp = c.logprobs
        assert len(lp.tokens) == len(p) + 1
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert all(x <= 0 for x in lp.token_logprobs[1:])
        assert all(len(t) == 1 for t in lp.top_logprobs[1:])
    assert r.usage.prompt_tokens == 7


def test_errors(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ALIAS, messages=MESSAGES, temperature=-1)
    assert e.value.status_code == 400
    assert e.value.body["param"] == "temperature", e.value.body
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=ALIAS, messages=MESSAGES, n=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ALIAS, messages=MESSAGES, logit_bias={"5": 150})
    assert e.value.body["param"] == "logit_bias", e.value.body
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=ALIAS, prompt="word " * 4000)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    bad = openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
        "sunny": {"type": "boolean"},
    },
    "required": ["city", "days", "sunny"],
    "additionalProperties": False,
}


def _valid(doc):
    assert set(doc) == {"city", "days", "sunny"}
    assert isinstance(doc["city"], str) and len(doc["city"]) <= 12
    assert isinstance(doc["days"], int) and 1 <= doc["days"] <= 9
    assert isinstance(doc["sunny"], bool)


def test_response_format_json_schema(client):
    """The random-weight fixture would write anything: the schema makes it JSON, every time."""
    for seed in range(4):
        r = client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, max_tokens=300, temperature=0.7, seed=seed,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}},
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        _valid(json.loads(c.message.content))


def test_response_format_json_object_streams(client):
    stream = client.chat.completions.create(
        model=ALIAS, messages=MESSAGES, max_tokens=300, temperature=0.5, seed=3, stream=True,
        response_format={"type": "json_object"},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    text = "".join(ch.delta.content or "" for chunk in stream for ch in chunk.choices)
    assert isinstance(json.loads(text), dict)


def test_guided_choice_and_bad_schemas(client):
    r = client.chat.completions.create(
        model=ALIAS, messages=MESSAGES, max_tokens=10, temperature=1.0, seed=1,
        extra_body={"guided_choice": ["red", "green", "blue"],
                    "chat_template_kwargs": {"enable_thinking": False}},
    )
    assert r.choices[0].message.content in ("red", "green", "blue")
    for bad in (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
        {"response_format": {"type": "xml"}},
        {"guided_regex": "(((unclosed"},
        {"grammar": "start: missing_rule"},
    ):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=4, extra_body=bad)


def test_responses_api(client):
    """Codex's API: input items in, output items out, whole and streamed."""
    r = client.responses.create(
        model=ALIAS, instructions="You are terse.", input="Say hello.", max_output_tokens=8,
        temperature=0, extra_body={"ignore_eos": True},
    )
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 8 and r.usage.input_tokens > 0
    kinds = [item.type for item in r.output]
    assert kinds and set(kinds) <= {"reasoning", "message", "function_call"}
    # Thinking off: the text is a message, output_text gathers it.
    kw = dict(
        model=ALIAS, input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        max_output_tokens=6, temperature=0, reasoning={"effort": "none"},
        tools=[{"type": "web_search"},
               {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}],
        extra_body={"ignore_eos": True},
    )
    r = client.responses.create(**kw)
    assert r.output and r.output[-1].type == "message"
    whole = r.output_text
    assert isinstance(whole, str) and whole
    events = list(client.responses.create(stream=True, **kw))
    names = [e.type for e in events]
    assert names[0] == "response.created" and names[-1] in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole
    seq = [e.sequence_number for e in events]
    assert seq == sorted(seq) and len(set(seq)) == len(seq)
    # Structured output through text.format.
    r = client.responses.create(
        model=ALIAS, input="weather?", max_output_tokens=300, temperature=0.7,
        reasoning={"effort": "none"},
        text={"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}},
    )
    _valid(json.loads(r.output_text))
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=ALIAS, input=[{"role": "wizard", "content": "x"}])


WEATHER_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
         "days": {"type": "integer", "minimum": 1, "maximum": 5}},
         "required": ["unit", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time",
     "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}},
]


def _valid_call(call):
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert args["unit"] in ("celsius", "fahrenheit") and 1 <= args["days"] <= 5, args
    else:
        assert call.function.name == "get_time" and isinstance(args["utc"], bool), args


def test_tool_choice_required_and_named(client):
    """The fixture would write anything: a forced call comes in the template's syntax, every time."""
    no_think = {"chat_template_kwargs": {"enable_thinking": False}}
    for seed in range(3):
        r = client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, tools=WEATHER_TOOLS, tool_choice="required",
            max_tokens=200, temperature=0.8, seed=seed, extra_body=no_think)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert c.message.tool_calls
        for call in c.message.tool_calls:
            _valid_call(call)
    r = client.chat.completions.create(
        model=ALIAS, messages=MESSAGES, tools=WEATHER_TOOLS, parallel_tool_calls=False,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=200, temperature=0, extra_body=no_think)
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_time"
    _valid_call(calls[0])
    # Streamed: the SDK's deltas carry the same call.
    stream = client.chat.completions.create(
        model=ALIAS, messages=MESSAGES, tools=WEATHER_TOOLS, parallel_tool_calls=False,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=200, temperature=0, extra_body=no_think, stream=True)
    deltas = [t for chunk in stream for ch in chunk.choices for t in (ch.delta.tool_calls or [])]
    assert "".join(d.function.arguments or "" for d in deltas) == calls[0].function.arguments
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, tools=WEATHER_TOOLS, max_tokens=4,
            tool_choice={"type": "function", "function": {"name": "not_a_tool"}})


@pytest.fixture(scope="module")
def demo_client():
    """The embedded demo model (`rill serve` without -m): its vocabulary has Qwen's `</think>`
    token, which the fixture's byte-level vocabulary lacks."""
    rill = rill_serve.binary() or pytest.skip("no rill binary: build it or set RILL_BIN")
    proc, base = rill_serve.start(
        [rill, "serve", "--port", "{port}", "--parallel", "2", "--ctx-size", "1024", "--api-key",
         API_KEY, "--alias", ALIAS, "-t", "1"], "rill serve (demo model)")
    yield openai.OpenAI(base_url=base + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    code, out = rill_serve.stop(proc)
    assert code == 0, f"rill serve exited with {code}:\n{out}"


def test_structured_output_after_thinking(demo_client):
    """Thinking on (the template opens the block): the model thinks freely, its block closed after
    a budget of 8 tokens here, and the schema or the forced call applies to the answer after it."""
    think = {"thinking_budget_tokens": 8}
    for seed in range(2):
        r = demo_client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, max_tokens=200, temperature=0.7, seed=seed,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True}},
            extra_body=think,
        )
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        assert (c.message.model_extra or {}).get("reasoning_content"), c
        _valid(json.loads(c.message.content))
        r = demo_client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, tools=WEATHER_TOOLS, tool_choice="required",
            max_tokens=200, temperature=0.8, seed=seed, extra_body=think)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert (c.message.model_extra or {}).get("reasoning_content"), c
        for call in c.message.tool_calls:
            _valid_call(call)


def test_n_choices_and_logit_bias(client):
    r = client.chat.completions.create(model=ALIAS, messages=MESSAGES, n=3, max_tokens=5, seed=4,
                                       temperature=1.0, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 15
    stream = client.chat.completions.create(model=ALIAS, messages=MESSAGES, n=2, max_tokens=5, seed=4,
                                            temperature=1.0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    finished, usage = set(), None
    for chunk in stream:
        usage = chunk.usage or usage
        finished |= {ch.index for ch in chunk.choices if ch.finish_reason}
    assert finished == {0, 1} and usage.completion_tokens == 10
    # A ban on the token greedy decoding picks first moves it off that token.
    kw = dict(model=ALIAS, prompt="Once upon a time", max_tokens=3, temperature=0,
              extra_body={"return_token_ids": True, "ignore_eos": True})
    first = client.completions.create(**kw).choices[0].model_extra["token_ids"][0]
    kw["logit_bias"] = {str(first): -100}
    ids = client.completions.create(**kw).choices[0].model_extra["token_ids"]
    assert first not in ids


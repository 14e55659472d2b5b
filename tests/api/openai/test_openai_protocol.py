import pytest

from tandem.api.openai.openai_protocol import ParseContext, parse_chat, parse_completion
from tandem.errors import InvalidRequest, ModelNotFound, PromptTooLong, TandemError
from tandem.types import RequestContext
from tests.api.fakes import ByteTokenizer

CTX = ParseContext(served_name="m", tokenizer=ByteTokenizer(), max_model_len=64, max_n=4,
                   max_prompts=3)
MSG = [{"role": "user", "content": "hi"}]


def chat(**kw):
    return parse_chat({"model": "m", "messages": MSG, **kw}, CTX)


def completion(**kw):
    return parse_completion({"model": "m", **kw}, CTX)


def error_of(fn, **kw) -> TandemError:
    with pytest.raises(TandemError) as info:
        fn(**kw)
    return info.value


def test_chat_renders_template_without_extra_special_tokens():
    p = chat()
    tok = ByteTokenizer()
    text = tok.apply_chat_template(MSG, add_generation_prompt=True)
    assert p.prompts == (tuple(tok.encode(text, add_special_tokens=False)),)
    assert p.kind == "chat" and p.n == 1 and not p.stream and not p.logprobs
    # OpenAI's chat default: the room the context leaves
    assert p.sampling.max_tokens == 64 - len(p.prompts[0])
    assert p.sampling.temperature == 1.0 and p.sampling.stop == ()


def test_chat_sampling_fields():
    p = chat(max_tokens=5, temperature=0, top_p=0.5, top_k=-1, min_p=0.1, seed=7,
             presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.2,
             stop="x", stop_token_ids=[3, 4], ignore_eos=True, min_tokens=2,
             logprobs=True, top_logprobs=3, cache_salt="tenant", user="u",
             stream=True, stream_options={"include_usage": True}, logit_bias={"7": -100, "12": 2.5})
    s = p.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (5, 0.0, 0.5, 0, 0.1, 7)
    assert (s.presence_penalty, s.frequency_penalty, s.repetition_penalty) == (0.5, -0.5, 1.2)
    assert s.stop == ("x",) and s.stop_token_ids == (3, 4) and s.ignore_eos and s.min_tokens == 2
    assert s.logprobs == 3 and p.cache_salt == "tenant" and p.user == "u"
    assert p.stream and p.include_usage and s.logit_bias == ((7, -100.0), (12, 2.5))


def test_max_completion_tokens_wins_and_stop_list():
    p = chat(max_tokens=5, max_completion_tokens=9, stop=["a", "bc"])
    assert p.sampling.max_tokens == 9 and p.sampling.stop == ("a", "bc")


def test_logprobs_without_top_logprobs_means_zero_alternatives():
    assert chat(logprobs=True).sampling.logprobs == 0
    assert chat(logprobs=False).sampling.logprobs is None
    assert chat(logprobs=False, top_logprobs=0).sampling.logprobs is None  # some clients send 0


@pytest.mark.parametrize("kw,param", [
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 3}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
    ({"n": 0}, "n"),
    ({"n": 5}, "n"),
    ({"top_p": 0}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"seed": "x"}, "seed"),
    ({"stop": [1]}, "stop"),
    ({"stop": ""}, "stop"),
    ({"stop_token_ids": [999]}, "stop_token_ids"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"stream": "yes"}, "stream"),
    ({"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"5": "1"}}, "logit_bias"),
    ({"logit_bias": {"99999": 1}}, "logit_bias"),
    ({"logit_bias": [5]}, "logit_bias"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": "f"}, "tools"),
    ({"cache_salt": ""}, "cache_salt"),
    ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"fail": True}}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "bad"}]},
     "messages"),
])
def test_chat_bad_values_name_the_param(kw, param):
    err = error_of(chat, **kw)
    assert isinstance(err, InvalidRequest) and err.status == 400
    assert err.param == param, err.message


def test_not_supported_yet_says_so():
    err = error_of(chat, bad_words=["x"])
    assert "not supported yet" in err.message and err.param == "bad_words"


@pytest.mark.parametrize("kw", [{"bad_words": ["x"]},
                                {"allowed_token_ids": [5]}, {"truncate_prompt_tokens": 8},
                                {"return_tokens_as_token_ids": True}, {"echo": True}])
def test_vllm_fields_that_would_change_the_output_are_refused_not_ignored(kw):
    err = error_of(chat, **kw)
    assert err.status == 400 and "not supported yet" in err.message and err.param == next(iter(kw))
    # sent as null or empty, they ask for nothing
    assert chat(**{k: None for k in kw}).prompts == chat().prompts
    if isinstance(kw[next(iter(kw))], list):
        assert chat(**{k: [] for k in kw}).prompts == chat().prompts


def test_skip_special_tokens_reaches_the_sampling_params():
    assert chat().sampling.skip_special_tokens is True
    assert chat(skip_special_tokens=False).sampling.skip_special_tokens is False
    assert error_of(chat, skip_special_tokens="no").param == "skip_special_tokens"


def test_assistant_prefill_with_continue_final_message():
    tok = ByteTokenizer()
    msgs = [*MSG, {"role": "assistant", "content": "The answer is "}]
    p = chat(messages=msgs, continue_final_message=True)
    # the final message is left open: no end of line, no new assistant header
    assert tok.decode(p.prompts[0]).endswith("user: hi\nassistant: The answer is ")
    closed = chat(messages=msgs, add_generation_prompt=False)
    assert tok.decode(closed.prompts[0]).endswith("assistant: The answer is \n")
    assert tok.decode(chat(messages=msgs).prompts[0]).endswith("The answer is \nassistant: ")
    err = error_of(chat, messages=msgs, continue_final_message=True, add_generation_prompt=True)
    assert err.param == "continue_final_message"
    err = error_of(chat, messages=[*MSG, {"role": "assistant", "content": ""}], continue_final_message=True)
    assert err.param == "continue_final_message" and err.status == 400
    assert error_of(chat, chat_template_kwargs={"add_generation_prompt": False}).param == "chat_template_kwargs"


def test_assistant_messages_without_content_or_with_a_refusal():
    tok = ByteTokenizer()
    for content in (None, [{"type": "refusal", "refusal": "I can't."}]):
        msgs = [*MSG, {"role": "assistant", "content": content}, {"role": "user", "content": "ok"}]
        text = tok.decode(chat(messages=msgs).prompts[0])
        assert ("assistant: I can't.\n" if content else "assistant: \n") in text
    err = error_of(chat, messages=[{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}])
    assert err.param == "messages[0].content[0]" and "not supported yet" in err.message


def test_model_missing_is_the_served_one_unknown_is_404():
    assert parse_chat({"messages": MSG}, CTX).model == "m"
    with pytest.raises(ModelNotFound) as info:
        parse_chat({"model": "other", "messages": MSG}, CTX)
    assert info.value.status == 404 and "other" in info.value.message


def test_prompt_too_long_is_400_context_length_exceeded():
    err = error_of(chat, messages=[{"role": "user", "content": "x" * 64}])
    assert isinstance(err, PromptTooLong) and err.status == 400 and err.param == "messages"
    assert err.code == "context_length_exceeded" and "However, your request has" in err.message
    err = error_of(completion, prompt=list(range(3, 3 + 64)))
    assert isinstance(err, PromptTooLong) and err.param == "prompt"


def test_tools_reach_the_template_and_tool_call_arguments_become_objects():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    msgs = [{"role": "user", "content": "w?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "developer", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]}]
    p = parse_chat({"model": "m", "messages": msgs, "tools": tools, "tool_choice": "auto"},
                   ParseContext("m", ByteTokenizer(), 4096))
    text = ByteTokenizer().decode(p.prompts[0])
    assert text.startswith("<s>tools:get_weather\n")
    assert "system: a\nb\n" in text  # developer -> system, parts joined
    from tandem.turn.chat_request import normalize_messages
    norm = normalize_messages(msgs)
    assert norm[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert norm[1]["content"] == ""


def test_completion_prompt_forms():
    tok = ByteTokenizer()
    assert completion(prompt="ab").prompts == (tuple(tok.encode("ab")),)
    assert completion(prompt=["ab", "c"]).prompts == (tuple(tok.encode("ab")), tuple(tok.encode("c")))
    assert completion(prompt=[5, 6, 7]).prompts == ((5, 6, 7),)
    assert completion(prompt=[[5], [6, 7]]).prompts == ((5,), (6, 7))
    assert completion(prompt="ab").sampling.max_tokens == 16  # OpenAI's completions default
    assert completion(prompt="ab").echo == ()
    assert completion(prompt=["ab", [5, 6]], echo=True).echo == ("ab", tok.decode([5, 6]))


@pytest.mark.parametrize("kw,param", [
    ({}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [5, 300]}, "prompt"),
    ({"prompt": [[5], []]}, "prompt[1]"),
    ({"prompt": ["a", 5]}, "prompt[1]"),
    ({"prompt": ["a", "b", "c", "d"]}, "prompt"),
    ({"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": "a", "prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt": "a", "suffix": "z"}, "suffix"),
    ({"prompt": "a", "best_of": 3}, "best_of"),
    ({"prompt": "a", "logprobs": 21}, "logprobs"),
    ({"prompt": "a", "logprobs": True}, "logprobs"),
])
def test_completion_bad_values(kw, param):
    err = error_of(completion, **kw)
    assert err.status == 400 and err.param == param, err.message


def test_echo_with_logprobs_scores_the_prompt():
    p = completion(prompt="ab", echo=True, logprobs=2)
    assert p.echo_logprobs and p.sampling.prompt_logprobs == 2 and p.prompt_logprobs is None
    # vLLM's prompt_logprobs on its own, and with echo: the larger count is scored
    q = completion(prompt="ab", prompt_logprobs=1)
    assert q.sampling.prompt_logprobs == 1 and q.prompt_logprobs == 1 and not q.echo_logprobs
    r = completion(prompt="ab", echo=True, logprobs=1, prompt_logprobs=3)
    assert r.sampling.prompt_logprobs == 3 and r.prompt_logprobs == 3
    assert completion(prompt="ab", echo=True).sampling.prompt_logprobs is None
    assert completion(prompt="ab", logprobs=2).sampling.prompt_logprobs is None


def test_engine_requests_fan_out_with_distinct_seeds():
    p = completion(prompt=["a", "b"], n=2, seed=10, cache_salt="s", logprobs=2)
    reqs = p.engine_requests("cmpl-x", RequestContext(cache_salt=p.cache_salt))
    assert [r.request_id for r in reqs] == ["cmpl-x-0", "cmpl-x-1", "cmpl-x-2", "cmpl-x-3"]
    assert [r.sampling.seed for r in reqs] == [10, 11, 10, 11]
    tok = ByteTokenizer()
    assert [r.prompt_token_ids for r in reqs] == [tok.encode("a")] * 2 + [tok.encode("b")] * 2
    assert all(r.cache_salt == "s" and r.sampling.logprobs == 2 for r in reqs)
    # the seed wraps inside int64 instead of overflowing
    top = completion(prompt="a", n=2, seed=2**63 - 1).engine_requests("x", RequestContext())
    assert top[1].sampling.seed == -(2**63)

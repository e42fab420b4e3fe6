"""The fake server's batch APIs, through the real SDKs: OpenAI's Files and Batch APIs and
Anthropic's Message Batches, their statuses, result lines, expiry, cancellation and refusals."""

from __future__ import annotations

import io
import json
from typing import Any

import anthropic
import openai
import pytest

from paperbench.testing import FakeLLMServer, FakeReply, Fault, RecordedRequest
from tests.fixtures import anthropic_client, openai_client

GPT = "gpt-4o-mini"
CLAUDE = "claude-haiku-4-5"


def _chat_line(custom_id: str, text: str) -> dict[str, Any]:
    body = {"model": GPT, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def _upload(client: openai.OpenAI, lines: list[Any], purpose: Any = "batch") -> str:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.create(file=("input.jsonl", io.BytesIO(data)), purpose=purpose).id


def _lines(client: openai.OpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    assert file_id is not None
    text = client.files.content(file_id).text
    return {line["custom_id"]: line for line in map(json.loads, text.splitlines())}


def _by_question(request: RecordedRequest) -> FakeReply | Fault:
    question = request.body["messages"][-1]["content"]
    if isinstance(question, list):
        question = question[-1]["text"]
    if question == "fail":
        return Fault.rate_limit()
    return FakeReply(json={"answer": question.upper()})


def test_openai_batch_is_answered_line_by_line_by_the_handler(fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = _by_question
    client = openai_client(fake_llm)
    file_id = _upload(
        client, [_chat_line("a", "one"), _chat_line("b", "fail"), _chat_line("c", "two")]
    )
    stored = client.files.retrieve(file_id)
    assert (stored.purpose, stored.filename, stored.object) == ("batch", "input.jsonl", "file")

    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "validating" and batch.request_counts is not None
    assert batch.request_counts.total == 3 and batch.model == GPT

    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.completed_at and done.finalizing_at
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    assert done.usage is not None and done.usage.input_tokens > 0

    output = _lines(client, done.output_file_id)
    assert set(output) == {"a", "c"}
    response = output["a"]["response"]
    assert response["status_code"] == 200 and response["request_id"].startswith("req_")
    assert output["a"]["id"].startswith("batch_req_") and output["a"]["error"] is None
    answer = response["body"]["choices"][0]["message"]["content"]
    assert json.loads(answer) == {"answer": "ONE"}
    errors = _lines(client, done.error_file_id)
    assert errors["b"]["response"]["status_code"] == 429
    assert errors["b"]["response"]["body"]["error"]["type"] == "rate_limit_error"
    assert client.files.retrieve(done.output_file_id or "").purpose == "batch_output"

    # each request is recorded as if it had been sent alone, with its batch
    batched = [r for r in fake_llm.requests if r.batch == batch.id]
    assert [(r.custom_id, r.protocol, r.path) for r in batched] == [
        ("a", "chat", "/v1/chat/completions"),
        ("b", "chat", "/v1/chat/completions"),
        ("c", "chat", "/v1/chat/completions"),
    ]
    assert batched[0].body["messages"][0]["content"] == "one"


def test_openai_responses_batch_and_script(fake_llm: FakeLLMServer) -> None:
    client = openai_client(fake_llm)
    fake_llm.script(FakeReply(text="first"), Fault.server_error(503))
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": GPT, "input": "hi"},
        }
        for i in range(2)
    ]
    batch = client.batches.create(
        input_file_id=_upload(client, lines), endpoint="/v1/responses", completion_window="24h"
    )
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed"
    output = _lines(client, done.output_file_id)
    assert output["r0"]["response"]["body"]["output"][0]["content"][0]["text"] == "first"
    assert _lines(client, done.error_file_id)["r1"]["response"]["status_code"] == 503


def test_openai_batch_a_refused_request_is_its_error_line(fake_llm: FakeLLMServer) -> None:
    client = openai_client(fake_llm)
    bad = _chat_line("bad", "x")
    bad["body"]["temperature_typo"] = 1
    batch = client.batches.create(
        input_file_id=_upload(client, [_chat_line("ok", "x"), bad]),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    done = client.batches.retrieve(batch.id)
    line = _lines(client, done.error_file_id)["bad"]
    assert line["response"]["status_code"] == 400
    assert "temperature_typo" in line["response"]["body"]["error"]["message"]


def test_openai_batch_waits_for_its_delay_then_expires_part_done(fake_llm: FakeLLMServer) -> None:
    fake_llm.batches.delay = 3600.0
    client = openai_client(fake_llm)
    lines = [_chat_line(f"q{i}", f"q{i}") for i in range(3)]
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    assert client.batches.retrieve(batch.id).status == "in_progress"
    assert not fake_llm.requests
    fake_llm.batches.process(batch.id, count=1)
    fake_llm.batches.expire(batch.id)
    expired = client.batches.retrieve(batch.id)
    assert expired.status == "expired" and expired.expired_at
    assert expired.request_counts is not None
    assert (expired.request_counts.completed, expired.request_counts.failed) == (1, 2)
    assert set(_lines(client, expired.output_file_id)) == {"q0"}
    errors = _lines(client, expired.error_file_id)
    assert errors["q1"]["response"] is None
    assert errors["q1"]["error"]["code"] == "batch_expired"
    assert len(fake_llm.requests) == 1


def test_openai_batch_cancelled(fake_llm: FakeLLMServer) -> None:
    fake_llm.batches.delay = 3600.0
    client = openai_client(fake_llm)
    lines = [_chat_line(f"q{i}", f"q{i}") for i in range(2)]
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    fake_llm.batches.process(batch.id, count=1)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    cancelled = client.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at
    assert set(_lines(client, cancelled.output_file_id)) == {"q0"}
    assert _lines(client, cancelled.error_file_id)["q1"]["error"]["code"] == "batch_cancelled"
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)
    assert [b.id for b in client.batches.list()] == [batch.id]


@pytest.mark.parametrize(
    ("lines", "code", "line"),
    [
        ([_chat_line("a", "x"), _chat_line("a", "y")], "duplicate_custom_id", 2),
        ([{**_chat_line("a", "x"), "custom_id": None}], "missing_required_parameter", 1),
        ([{**_chat_line("a", "x"), "url": "/v1/responses"}], "mismatched_endpoint", 1),
        (
            [
                {
                    **_chat_line("a", "x"),
                    "body": {"model": "gpt-4o-realtime-preview", "messages": []},
                }
            ],
            "model_not_found",
            1,
        ),
        (
            [
                _chat_line("a", "x"),
                {**_chat_line("b", "x"), "body": {"model": "gpt-4.1", "messages": []}},
            ],
            "mismatched_model",
            2,
        ),
        (["not an object"], "invalid_json_line", 1),
    ],
)
def test_openai_batch_with_bad_lines_fails_validation(
    fake_llm: FakeLLMServer, lines: list[Any], code: str, line: int
) -> None:
    client = openai_client(fake_llm)
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    assert batch.status == "validating"
    failed = client.batches.retrieve(batch.id)
    assert failed.status == "failed" and failed.failed_at
    assert failed.errors is not None and failed.errors.data
    assert (failed.errors.data[0].code, failed.errors.data[0].line) == (code, line)
    assert failed.output_file_id is None and not fake_llm.requests


def test_openai_batch_refusals(fake_llm: FakeLLMServer) -> None:
    client = openai_client(fake_llm)
    good = _upload(client, [_chat_line("a", "x")])
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        client.batches.create(
            input_file_id=good, endpoint="/v1/embeddings", completion_window="24h"
        )
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        client.batches.create(input_file_id=good, endpoint="/v1/nope", completion_window="24h")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(
            input_file_id=good,
            endpoint="/v1/chat/completions",
            completion_window="1h",  # type: ignore[arg-type]
        )
    with pytest.raises(openai.NotFoundError):
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    wrong = _upload(client, [_chat_line("a", "x")], purpose="user_data")
    with pytest.raises(openai.BadRequestError, match="purpose 'batch'"):
        client.batches.create(
            input_file_id=wrong, endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(openai.BadRequestError, match="purpose"):
        _upload(client, [], purpose="training")
    fake_llm.batches.limits.openai_bytes = 100
    with pytest.raises(openai.BadRequestError, match="too large"):
        _upload(client, [_chat_line(f"q{i}", "x") for i in range(3)])
    fake_llm.batches.limits.openai_requests = 2
    fake_llm.batches.limits.openai_bytes = 10_000
    over = _upload(client, [_chat_line(f"q{i}", "x") for i in range(3)])
    batch = client.batches.create(
        input_file_id=over, endpoint="/v1/chat/completions", completion_window="24h"
    )
    failed = client.batches.retrieve(batch.id)
    assert failed.status == "failed" and failed.errors and failed.errors.data
    assert failed.errors.data[0].code == "too_many_requests"
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError):
        client.files.content("file-nope")


# -- Anthropic ------------------------------------------------------------------------------

CACHED: Any = {"type": "ephemeral"}


def _params(text: str) -> Any:
    content = [{"type": "text", "text": text, "cache_control": CACHED}]
    return {"model": CLAUDE, "max_tokens": 100, "messages": [{"role": "user", "content": content}]}


def test_anthropic_batch_succeeds_and_errors_per_request(fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = _by_question
    client = anthropic_client(fake_llm)
    batch = client.messages.batches.create(
        requests=[
            {"custom_id": "leaf_1", "params": _params("one")},
            {"custom_id": "leaf-2", "params": _params("fail")},
        ]
    )
    assert batch.processing_status == "in_progress" and batch.results_url is None
    assert batch.request_counts.processing == 2 and batch.type == "message_batch"
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.ended_at and ended.results_url
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored) == (0, 1, 1)

    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    ok = results["leaf_1"]
    assert ok.type == "succeeded"
    assert json.loads(ok.message.content[0].text) == {"answer": "ONE"}  # type: ignore[union-attr]
    failed = results["leaf-2"]
    assert failed.type == "errored" and failed.error.error.type == "rate_limit_error"

    batched = [r for r in fake_llm.requests if r.batch == batch.id]
    assert [(r.custom_id, r.protocol) for r in batched] == [
        ("leaf_1", "messages"),
        ("leaf-2", "messages"),
    ]
    assert batched[0].body["messages"][0]["content"][0]["cache_control"] == CACHED


def test_anthropic_batch_canceled_and_expired(fake_llm: FakeLLMServer) -> None:
    fake_llm.batches.delay = 3600.0
    client = anthropic_client(fake_llm)
    requests: Any = [{"custom_id": f"r{i}", "params": _params(f"q{i}")} for i in range(3)]
    batch = client.messages.batches.create(requests=requests)
    assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        client.messages.batches.results(batch.id)
    fake_llm.batches.process(batch.id, count=1)
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (1, 2)
    kinds = {r.custom_id: r.result.type for r in client.messages.batches.results(batch.id)}
    assert kinds == {"r0": "succeeded", "r1": "canceled", "r2": "canceled"}

    other = client.messages.batches.create(requests=requests)
    fake_llm.batches.expire(other.id)
    expired = client.messages.batches.retrieve(other.id)
    assert expired.request_counts.expired == 3
    assert {r.result.type for r in client.messages.batches.results(other.id)} == {"expired"}
    listed = list(client.messages.batches.list())
    assert [b.id for b in listed] == [other.id, batch.id]


@pytest.mark.parametrize(
    ("custom_ids", "match"),
    [
        (["has space"], "custom_id"),
        (["x" * 65], "custom_id"),
        ([""], "custom_id"),
        (["a", "a"], "Duplicate"),
    ],
)
def test_anthropic_batch_refuses_bad_custom_ids(
    fake_llm: FakeLLMServer, custom_ids: list[str], match: str
) -> None:
    client = anthropic_client(fake_llm)
    requests: Any = [{"custom_id": c, "params": _params("x")} for c in custom_ids]
    with pytest.raises(anthropic.BadRequestError, match=match):
        client.messages.batches.create(requests=requests)
    assert not fake_llm.batches.batches


def test_anthropic_batch_refuses_a_model_and_too_many_requests(fake_llm: FakeLLMServer) -> None:
    client = anthropic_client(fake_llm)
    fake_llm.batches.limits.refused_models.add(CLAUDE)
    with pytest.raises(anthropic.BadRequestError, match="not supported in batches"):
        client.messages.batches.create(requests=[{"custom_id": "a", "params": _params("x")}])
    fake_llm.batches.limits.refused_models.clear()
    fake_llm.batches.limits.anthropic_requests = 1
    requests: Any = [{"custom_id": f"r{i}", "params": _params("x")} for i in range(2)]
    with pytest.raises(anthropic.BadRequestError, match="at most 1"):
        client.messages.batches.create(requests=requests)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve("msgbatch_nope")


def test_batch_routes_switched_off_are_not_found(fake_llm: FakeLLMServer) -> None:
    fake_llm.batches.enabled = False
    with pytest.raises(openai.NotFoundError):
        _upload(openai_client(fake_llm), [_chat_line("a", "x")])
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client(fake_llm).messages.batches.create(
            requests=[{"custom_id": "a", "params": _params("x")}]
        )


def test_anthropic_beta_batch_keeps_its_beta_header(fake_llm: FakeLLMServer) -> None:
    client = anthropic_client(fake_llm)
    batch = client.beta.messages.batches.create(
        requests=[{"custom_id": "a", "params": _params("x")}],
        betas=["context-management-2025-06-27"],
    )
    assert [r.result.type for r in client.beta.messages.batches.results(batch.id)] == ["succeeded"]
    (request,) = fake_llm.requests
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert request.batch == batch.id

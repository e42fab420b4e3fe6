"""The response cache: hits, misses, bypass, and several processes writing one file."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from paperbench.errors import IncompleteAnswerError, MissingKeyError, StructuredOutputError
from paperbench.llm import Model, ModelOutput, ResponseCache, Usage
from paperbench.llm._cache import open_caches
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, FakeUsage
from tests.llm.helpers import config_for, fast, gen, run


class Verdict(BaseModel):
    score: int


def test_hit_costs_nothing_and_says_so(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.handler = lambda request: FakeReply(
        json={"score": 1}, usage=FakeUsage(input=20_000, output=500)
    )
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        model = Model(config_for("chat", fake_llm, cache=True), cache=cache, stage="grading")
        first = gen(model, "grade leaf 1", output=Verdict, label="judge_grading")
        second = gen(model, "grade leaf 1", output=Verdict, label="judge_grading")
        assert len(fake_llm.requests) == 1
        assert first.cached is False and first.cost_usd and first.cost_usd > 0
        assert second.cached is True
        assert second.parsed == Verdict(score=1)
        assert second.usage == Usage() and second.cost_usd == 0.0
        assert second.text == first.text

        hit = model.ledger.records[1]
        assert hit.outcome == "cache_hit" and hit.cost_usd == 0.0
        assert hit.saved_usd == first.cost_usd
        total = model.ledger.report().total
        assert total.cache_hits == 1 and total.cost_usd == first.cost_usd
        assert total.saved_usd == first.cost_usd


def test_misses_on_any_change(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        model = Model(config_for("chat", fake_llm, cache=True), cache=cache)
        gen(model, "a")
        gen(model, "b")
        gen(model, "a", temperature=0.5)
        gen(model, "a", output=Verdict)
        gen(Model(config_for("messages", fake_llm, cache=True), cache=cache), "a")
        assert len(fake_llm.requests) == 5
        assert len(cache) == 5
        gen(model, "a")
        assert len(fake_llm.requests) == 5


def test_cache_off_by_default_and_bypass(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        plain = Model(config_for("chat", fake_llm), cache=cache)
        gen(plain, "a")
        gen(plain, "a")
        assert len(fake_llm.requests) == 2 and len(cache) == 0

        judge = Model(config_for("chat", fake_llm, cache=True), cache=cache)
        gen(judge, "a")
        gen(judge, "a", cache=False)  # --no-cache
        assert len(fake_llm.requests) == 4


def test_failures_are_not_cached(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script(FakeReply(text="not json"), FakeReply(text="not json"))
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        model = Model(config_for("chat", fake_llm, cache=True, structured_retries=1), cache=cache)
        with pytest.raises(StructuredOutputError):
            gen(model, "a", output=Verdict)
        assert len(cache) == 0
        assert gen(model, "a", output=Verdict).parsed == Verdict(score=0)


def test_key_covers_options_endpoint_and_version(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache, FakeLLMServer() as other:

        def ask(server: FakeLLMServer, **settings: object) -> ModelOutput:
            config = fast("openai/gpt-4o", None, cache=True, api_key="x", **settings)
            monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
            return gen(Model(config, cache=cache), "same prompt")

        ask(fake_llm)
        assert ask(fake_llm).cached  # the same everything: a hit
        # the base URL actually called (here from OPENAI_BASE_URL) is part of the key
        assert not ask(other).cached and len(other.requests) == 1
        # so are the provider's options and the cache version
        assert not ask(fake_llm, options={"api": "chat"}).cached
        assert not ask(fake_llm, cache_version="prompts-2").cached
        assert ask(fake_llm, cache_version="prompts-2").cached
        assert len(fake_llm.requests) == 3


@pytest.mark.parametrize("protocol", ["chat", "responses", "messages"])
@pytest.mark.parametrize(
    ("reply", "reason"),
    [(FakeReply(text='{"score": 1', stop="max_tokens"), "max_tokens"), (FakeReply(), "empty")],
    ids=["cut-off", "empty"],
)
def test_incomplete_answers_are_reported_never_cached(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str, reply: FakeReply, reason: str
) -> None:
    fake_llm.handler = lambda request: reply
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        config = config_for(protocol, fake_llm, cache=True, structured_retries=1)
        model = Model(config, cache=cache, stage="grading")
        out = gen(model, "grade", label="judge_grading")
        assert not out.complete and not out.cached
        assert out.stop_reason == ("stop" if reason == "empty" else reason)
        with pytest.raises(IncompleteAnswerError) as info:
            gen(model, "grade", output=Verdict, label="judge_grading")
        assert info.value.stop_reason == reason
        assert "\n" not in str(info.value) and model.config.model in str(info.value)
        # an empty answer is re-asked like a malformed one; one cut off is not (it would be
        # cut off again)
        structured = 2 if reason == "empty" else 1
        assert len(fake_llm.requests) == 1 + structured
        assert not gen(model, "grade").cached  # asked again: nothing was stored
        assert len(cache) == 0
    records = model.ledger.records
    assert [r.outcome for r in records] == ["incomplete"] * (2 + structured)
    assert all(r.cost_usd and r.cost_usd > 0 for r in records)  # paid for all the same
    assert all(r.stop_reason == out.stop_reason for r in records)
    assert model.ledger.report().total.incomplete == 2 + structured


def test_tool_calls_without_text_are_answers(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.handler = lambda request: FakeReply(tool_calls=(FakeToolCall("bash", {"cmd": "ls"}),))
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        model = Model(config_for("chat", fake_llm, cache=True), cache=cache)
        first = gen(model, "run ls")
        assert first.complete and first.text == "" and first.tool_calls
        assert gen(model, "run ls").cached


def test_incomplete_answer_stored_earlier_is_a_miss(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as cache:
        model = Model(config_for("chat", fake_llm, cache=True), cache=cache)
        gen(model, "a")
    # as an older version stored it: an answer cut off at max_tokens
    cut = ModelOutput(model="openai/gpt-4o", text="half an", stop_reason="max_tokens")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET output = ?", (cut.model_dump_json(),))
    with ResponseCache(path) as cache:
        out = gen(Model(config_for("chat", fake_llm, cache=True), cache=cache), "a")
    assert not out.cached and out.text == "ok" and len(fake_llm.requests) == 2


def test_cache_io_runs_off_the_event_loop(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        threads: set[int] = set()
        cache._conn.set_trace_callback(lambda statement: threads.add(threading.get_ident()))
        model = Model(config_for("chat", fake_llm, cache=True), cache=cache)
        gen(model, "a")  # a miss, then a write
        assert gen(model, "a").cached  # a hit
        assert threads and threading.get_ident() not in threads


def test_default_location_and_wal(fake_llm: FakeLLMServer, clean_env: Path) -> None:
    gen(Model(config_for("chat", fake_llm, cache=True)), "a")
    path = clean_env / "cache" / "llm-cache.sqlite"
    assert path.is_file()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = [row[0] for row in conn.execute("SELECT name FROM migrations")]
    assert names == ["0001_responses"]


_WRITER = textwrap.dedent(
    """
    import sys
    from paperbench.llm import ModelOutput, ResponseCache
    path, who = sys.argv[1], sys.argv[2]
    cache = ResponseCache(path)
    for i in range(300):
        cache.put(f"shared-{i}", ModelOutput(model="mockllm/x", text=f"{who}-{i}"))
        cache.put(f"{who}-{i}", ModelOutput(model="mockllm/x", text=str(i)))
        assert cache.get(f"{who}-{i}") is not None
    cache.close()
    """
)


def test_two_processes_write_one_cache(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who], stderr=subprocess.PIPE)
        for who in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    with ResponseCache(path) as cache:
        assert len(cache) == 900
        shared = cache.get("shared-7")
        assert shared is not None and shared.text in ("a-7", "b-7")
        assert cache.get("b-299") == ModelOutput(model="mockllm/x", text="299")


def _open_fresh_files(
    folder: str,
    rounds: int,
    start: multiprocessing.synchronize.Barrier,
    who: int,
    errors: multiprocessing.Queue[str],
) -> None:
    for i in range(rounds):
        start.wait(timeout=60)
        try:
            with ResponseCache(Path(folder) / f"{i}.sqlite") as cache:
                cache.put(str(who), ModelOutput(model="mockllm/x", text=str(who)))
        except sqlite3.Error as exc:
            errors.put(f"process {who}, round {i}: {exc}")


@pytest.mark.slow
def test_many_processes_open_a_fresh_cache_at_once(tmp_path: Path) -> None:
    """Several processes opening (creating, switching to WAL, migrating) one new file at the
    same moment, many times over: none of them may fail with "database is locked"."""
    processes, rounds = 8, 120
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(processes)
    errors: multiprocessing.Queue[str] = ctx.Queue()
    workers = [
        ctx.Process(target=_open_fresh_files, args=(str(tmp_path), rounds, start, who, errors))
        for who in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []
    assert [w.exitcode for w in workers] == [0] * processes
    for i in range(rounds):
        with ResponseCache(tmp_path / f"{i}.sqlite") as cache:
            assert len(cache) == processes


def test_a_cache_hit_needs_no_key_a_request_does(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A named endpoint whose key is required, served by the fake server.
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(
        f"endpoints:\n  gw: {{base_url: '{fake_llm.openai_url}', api_key_env: GW_TEST_KEY}}\n"
    )
    monkeypatch.setenv("PAPERBENCH_ENDPOINTS", str(endpoints))
    monkeypatch.delenv("GW_TEST_KEY", raising=False)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        paid = Model(fast("gw/model-a", None, api_key="sk-test", cache=True), cache=cache)
        first = gen(paid, "grade leaf 1")
        replay = Model(fast("gw/model-a", None, cache=True), cache=cache)
        again = gen(replay, "grade leaf 1")
        assert again.cached and again.text == first.text
        assert len(fake_llm.requests) == 1
        with pytest.raises(MissingKeyError, match="set GW_TEST_KEY"):
            gen(replay, "grade leaf 2")
        assert len(fake_llm.requests) == 1
        assert replay.ledger.records[-1].outcome == "failed"


def test_the_shared_cache_is_closed_when_its_last_model_is(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    before = open_caches()
    config = config_for("chat", fake_llm, cache=True, cache_path=str(tmp_path / "c.sqlite"))

    async def grade() -> tuple[ModelOutput, ModelOutput]:
        async with Model(config) as first, Model(config) as second:
            assert first.cache is second.cache  # one connection per file per process
            answer = await first.generate("grade leaf 1")
            assert open_caches() == before + 1
            hit = await second.generate("grade leaf 1")
            await first.aclose()
            assert not second.cache.closed  # still used by the second model
        return answer, hit

    answer, hit = run(grade())
    assert hit.cached and hit.text == answer.text and len(fake_llm.requests) == 1
    assert open_caches() == before

    model = Model(config)  # used again after aclose: the cache is opened again, then closed
    assert gen(model, "grade leaf 1").cached
    assert open_caches() == before


def test_a_cache_closed_twice_and_one_left_open_at_exit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from paperbench.llm import _cache
        cache = _cache.ResponseCache(sys.argv[1])
        cache.close()
        cache.close()
        assert _cache.open_caches() == 0
        left = _cache.shared_cache(sys.argv[1])
        assert _cache.open_caches() == 1
        _cache._close_all()
        assert left.closed and _cache.open_caches() == 0
        """
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "c.sqlite")], check=True)

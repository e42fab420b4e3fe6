"""What the model gateway adds to each request: direct to the fake server vs through it.

    .venv/bin/python bench/gateway.py [--requests 200]

The fake model server (paperbench.testing) runs in its own process on 127.0.0.1 and answers
at once; a plain aiohttp client sends ``--requests`` small requests one after another (each
body different, so none is replayed) for each protocol (Anthropic Messages, OpenAI Responses,
Chat Completions), without and with ``stream``, first straight to the server, then through a
``ModelGateway`` in this process (token check, budget check, forwarding, usage read from the
answer or its events, a cost record, a gateway.jsonl line, the replay store). Latency is from
the send to the answer's last byte. Goal: under 5 ms added at p50. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

from paperbench.gateway import ModelGateway
from paperbench.llm import CostLedger, ModelConfig

SERVER = """
import sys
from paperbench.testing import FakeLLMServer
with FakeLLMServer() as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""

ROUTES = {
    "messages": ("/v1/messages", "anthropic"),
    "responses": ("/v1/responses", "openai"),
    "chat": ("/v1/chat/completions", "openai"),
}


def body(protocol: str, n: int, stream: bool) -> bytes:
    text = f"request {n}: say ok"
    if protocol == "messages":
        data: dict[str, object] = {
            "model": "claude-haiku-4-5",
            "max_tokens": 32,
            "messages": [{"role": "user", "content": text}],
        }
    elif protocol == "responses":
        data = {"model": "gpt-4o", "input": text}
    else:
        data = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
        if stream:
            data["stream_options"] = {"include_usage": True}
    if stream:
        data["stream"] = True
    return json.dumps(data).encode()


async def measure(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], bodies: list[bytes]
) -> list[float]:
    times: list[float] = []
    for data in bodies:
        start = time.perf_counter()
        async with session.post(url, data=data, headers=headers) as response:
            async for _ in response.content.iter_any():
                pass
            if response.status != 200:
                raise SystemExit(f"{url}: status {response.status}")
        times.append((time.perf_counter() - start) * 1000)
    return times


def stats(times: list[float]) -> tuple[float, float, float]:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered), p95, statistics.fmean(ordered)


async def main(requests: int, warmup: int) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        fake = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            ledger = CostLedger()
            gateway = ModelGateway(
                anthropic=ModelConfig(
                    model="anthropic/claude-haiku-4-5", base_url=fake, api_key="sk-ant-bench"
                ),
                openai=ModelConfig(model="openai/gpt-4o", base_url=f"{fake}/v1", api_key="sk-b"),
                log_dir=Path(tmp) / "gateway",
                ledger=ledger,
            )
            async with gateway, aiohttp.ClientSession() as session:
                rows = await run_all(session, fake, gateway, requests, warmup)
            recorded = len(ledger.records)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)
    table = Table(title=f"Model gateway: latency per request in ms ({requests} requests each)")
    for column in ("protocol", "mode", "direct p50", "p95", "mean"):
        table.add_column(column, justify="right" if column != "protocol" else "left", no_wrap=True)
    for column in ("gateway p50", "p95", "mean", "added p50"):
        table.add_column(column, justify="right", no_wrap=True)
    for protocol, mode, direct, through in rows:
        d, g = stats(direct), stats(through)
        table.add_row(
            protocol,
            mode,
            *(f"{v:.2f}" for v in d),
            *(f"{v:.2f}" for v in g),
            f"[bold]{g[0] - d[0]:+.2f}[/bold]",
        )
    console = Console(width=max(110, Console().width))
    console.print(table)
    console.print(f"cost records written by the gateway: {recorded}; goal: added p50 < 5 ms")


async def run_all(
    session: aiohttp.ClientSession, fake: str, gateway: ModelGateway, requests: int, warmup: int
) -> list[tuple[str, str, list[float], list[float]]]:
    rows = []
    counter = 0
    for protocol, (path, family) in ROUTES.items():
        for stream in (False, True):
            results = []
            for through in (False, True):
                if through:
                    base = gateway.anthropic_base_url if family == "anthropic" else gateway.url
                    url = base + (path if family == "anthropic" else "/openai" + path)
                    token = gateway.token
                else:
                    url, token = fake + path, "sk-direct"
                headers = {"content-type": "application/json"}
                if family == "anthropic":
                    headers |= {"x-api-key": token, "anthropic-version": "2023-06-01"}
                else:
                    headers["authorization"] = f"Bearer {token}"
                bodies = [body(protocol, counter + i, stream) for i in range(warmup + requests)]
                counter += warmup + requests
                times = await measure(session, url, headers, bodies)
                results.append(times[warmup:])
            rows.append((protocol, "stream" if stream else "json", results[0], results[1]))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.warmup))

"""Thousands of concurrent calls through one Model: rate limits, shared backoff, budget caps.

    .venv/bin/python bench/llm_fanout.py [--calls 2000] [--connections 32] [--rate 150]

A fake model server (paperbench.testing.fake_llm) runs in a separate process on 127.0.0.1.
It plays two kinds of rate limit:

- injected: 0 %, 5 % or 20 % of requests, drawn at random, get 429 with ``retry-after``
  (``--retry-after``), whatever the load;
- a token bucket of ``--rate`` requests per second: a request that finds no token gets 429
  with ``retry-after`` saying when the next token comes, as a real API's limit does.

For each, ``--calls`` calls go through one ``Model`` (``asyncio.gather``, ``--connections``
slots), once backing off together (``shared_backoff``, the default: a retry-after pauses
every caller of the endpoint, and each 429 halves the send window) and once alone (each call
waits only for its own 429s). Then the fan-out runs with a budget cap worth N calls: it
holds when the paid requests are at most N + connections (the calls in flight).

Goals: against the token bucket, backing off together sends far fewer requests than each
call alone, in the same wall time; no call fails; every budget cap holds. Random 429s are
not a sign of load: there, backing off together sends as many requests and takes longer
(each 429 pauses everyone) - the price of reading every 429 as the endpoint's limit.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from paperbench.errors import BudgetExhaustedError, ModelError
from paperbench.llm import BudgetCaps, CostLedger, Model, ModelConfig, PriceTable, Usage

SERVER = """
import random, sys, threading, time
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, Fault

lock = threading.Lock()
state = {"kind": "injected", "share": 0.0, "wait": 0.02, "rate": 1.0, "burst": 1.0,
         "tokens": 0.0, "last": 0.0, "limited": 0}
rng = random.Random(7)
REPLY = FakeReply(text="ok", usage=FakeUsage(input=1000, output=100))

def injected():
    if rng.random() < state["share"]:
        return state["wait"]
    return None

def bucket():
    now = time.monotonic()
    state["tokens"] = min(state["burst"], state["tokens"] + (now - state["last"]) * state["rate"])
    state["last"] = now
    if state["tokens"] >= 1:
        state["tokens"] -= 1
        return None
    return (1 - state["tokens"]) / state["rate"]  # until the next token

def handler(request):
    with lock:
        wait = injected() if state["kind"] == "injected" else bucket()
        if wait is None:
            return REPLY
        state["limited"] += 1
    return Fault.rate_limit(retry_after=round(wait, 4))

with FakeLLMServer() as server:
    print(server.openai_url, flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "injected":  # share of requests answered 429, retry-after seconds
            server.reset()
            with lock:
                state.update(kind="injected", share=float(args[0]), wait=float(args[1]))
                state["limited"] = 0
            server.handler = handler
            print("ok", flush=True)
        elif command == "bucket":  # a token bucket: requests per second, burst
            server.reset()
            with lock:
                state.update(kind="bucket", rate=float(args[0]), burst=float(args[1]))
                state.update(tokens=float(args[1]), last=time.monotonic(), limited=0)
            server.handler = handler
            print("ok", flush=True)
        elif command == "count":
            with lock:
                print(len(server.requests), state["limited"], flush=True)
"""

USAGE = Usage(input_tokens=1000, output_tokens=100)
MODEL = "openai/gpt-4o"


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._read()
        if not self.url.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise SystemExit(f"the fake server did not start: {self.url!r}")

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _send(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._read()

    def injected(self, share: float, retry_after: float) -> None:
        assert self._send(f"injected {share} {retry_after}") == "ok"

    def bucket(self, rate: float, burst: float) -> None:
        assert self._send(f"bucket {rate} {burst}") == "ok"

    def count(self) -> tuple[int, int]:
        sent, limited = self._send("count").split()
        return int(sent), int(limited)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@dataclass
class Row:
    server: str
    shared: bool
    cap_calls: int | None
    sent: int
    limited: int
    paid: int
    answered: int
    refused: int
    failed: int
    wall_s: float


async def fan_out(model: Model, calls: int) -> tuple[int, int, int]:
    async with model:
        results = await asyncio.gather(
            *(model.generate(f"grade leaf {i}", label="judge_grading") for i in range(calls)),
            return_exceptions=True,
        )
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, ModelError):
            raise r  # a bug, not a measurement
    answered = sum(not isinstance(r, BaseException) for r in results)
    refused = sum(isinstance(r, BudgetExhaustedError) for r in results)
    return answered, refused, len(results) - answered - refused


def run_one(
    server: Server, args: argparse.Namespace, name: str, shared: bool, cap_calls: int | None
) -> Row:
    time.sleep(0.2)  # let a pause left by the previous run run out
    config = ModelConfig(
        model=MODEL,
        base_url=server.url,
        api_key="bench",  # type: ignore[arg-type]
        max_connections=args.connections,
        retry_initial_s=0.01,
        retry_max_s=0.2,
        max_retry_wait_s=60.0,
        shared_backoff=shared,
    )
    caps = BudgetCaps()
    if cap_calls is not None:
        price = PriceTable.load().cost(MODEL, USAGE)
        assert price is not None
        caps = BudgetCaps(run_usd=cap_calls * price * 0.999)  # reached by the N-th answer
    model = Model(config, ledger=CostLedger(caps=caps), stage="bench")
    started = time.perf_counter()
    answered, refused, failed = asyncio.run(fan_out(model, args.calls))
    wall = time.perf_counter() - started
    sent, limited = server.count()
    paid = sum(r.outcome in ("ok", "incomplete") for r in model.ledger.records)
    return Row(name, shared, cap_calls, sent, limited, paid, answered, refused, failed, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per run")
    parser.add_argument("--connections", type=int, default=32, help="max_connections")
    parser.add_argument("--retry-after", type=float, default=0.02, help="of injected 429s, s")
    parser.add_argument("--rate", type=float, default=150.0, help="rate-limited server, req/s")
    parser.add_argument("--cap-calls", type=int, default=100, help="budget cap, in calls")
    args = parser.parse_args()
    server = Server()
    rows: list[Row] = []
    try:
        for share in (0.0, 0.05, 0.20):
            for shared in (True, False):
                if share == 0.0 and not shared:
                    continue  # no 429s: nothing to share
                server.injected(share, args.retry_after)
                rows.append(run_one(server, args, f"{share:.0%} 429s", shared, None))
        for shared in (True, False):
            server.bucket(args.rate, args.connections / 4)
            rows.append(run_one(server, args, f"{args.rate:g} req/s", shared, None))
        for share in (0.0, 0.20):
            server.injected(share, args.retry_after)
            rows.append(run_one(server, args, f"{share:.0%} 429s", True, args.cap_calls))
        server.bucket(args.rate, args.connections / 4)
        rows.append(run_one(server, args, f"{args.rate:g} req/s", True, args.cap_calls))
    finally:
        server.close()

    table = Table(
        title=f"{args.calls} concurrent calls through one Model, {args.connections} connections"
    )
    for col in ("server", "back off", "cap", "sent", "429s", "paid", "answered", "refused"):
        table.add_column(col, justify="right", no_wrap=True)
    for col in ("failed", "wall", "cap held"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        held = "-"
        if r.cap_calls is not None:
            ok = r.paid <= r.cap_calls + args.connections
            held = f"[{'green' if ok else 'red'}]{'yes' if ok else 'NO'}[/]"
        table.add_row(
            r.server,
            "together" if r.shared else "alone",
            "-" if r.cap_calls is None else str(r.cap_calls),
            str(r.sent),
            str(r.limited),
            str(r.paid),
            str(r.answered),
            str(r.refused),
            f"[{'green' if r.failed == 0 else 'red'}]{r.failed}[/]",
            f"{r.wall_s:.1f} s",
            held,
        )
    console = Console(width=120)
    console.print(table)
    console.print(
        f"server: 'N% 429s' rows answer that share of requests 429 (retry-after "
        f"{args.retry_after:g}s) at random; 'req/s' rows are a token bucket (burst "
        f"{args.connections / 4:g}) whose 429 says when the next token comes.\n"
        "back off: 'together' = a retry-after pauses every caller of the endpoint and each 429 "
        "halves the send window (shared_backoff, the default); 'alone' = only the call that "
        "got the 429 waits.\n"
        "sent / 429s: requests as the server counted them. paid: answers, as the ledger "
        "recorded them (a 429 is not billed).\n"
        "cap held: with a budget cap worth N calls, paid <= N + connections (the calls in "
        "flight when the cap was reached)."
    )


if __name__ == "__main__":
    main()

"""``paperbench models ...``: a preflight check of models, and the price table."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from pydantic import BaseModel, SecretStr, ValidationError
from rich.table import Table

from paperbench._console import console, error
from paperbench._options import BaseUrl, parse_duration
from paperbench.errors import MissingKeyError, PaperbenchError
from paperbench.llm._costs import PriceTable
from paperbench.llm._model import Model
from paperbench.llm._registry import endpoints, known_missing_key, missing_key_message
from paperbench.llm._types import ModelConfig, ModelOutput

app = typer.Typer(help="Check models before a long run, and show their prices.")

JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


class _Answer(BaseModel):
    answer: str


class CheckRow(BaseModel):
    """One call of the preflight, or the one error that stopped a model."""

    model: str
    call: str
    ok: bool
    latency_s: float | None = None
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    text: str | None = None
    error: str | None = None


async def _check_one(config: ModelConfig) -> list[CheckRow]:
    rows: list[CheckRow] = []
    missing = known_missing_key(config)
    if missing is not None:  # said at once, before the provider's SDK is loaded
        why = f"{missing_key_message(config.model, missing)} or pass --key"
        return [CheckRow(model=config.model, call="-", ok=False, error=why)]
    try:
        async with Model(config, stage="check") as model:
            text = await model.generate("Reply with the single word: ok", label="check")
            rows.append(_row(config.model, "text", text))
            structured = await model.generate(
                'Reply with JSON: {"answer": "ok"}', output=_Answer, label="check"
            )
            rows.append(_row(config.model, "structured", structured))
    except PaperbenchError as exc:  # a model error, or a bad options block or price file
        key = isinstance(exc, MissingKeyError) or getattr(exc, "status", None) == 401
        why = f"{exc} or pass --key" if key else str(exc)  # this command takes the key
        rows.append(CheckRow(model=config.model, call="-", ok=False, error=why))
    return rows


def _row(model: str, call: str, out: ModelOutput) -> CheckRow:
    return CheckRow(
        model=model,
        call=call,
        ok=True,
        latency_s=out.latency_s,
        input_tokens=out.usage.input_tokens,
        cached_input_tokens=out.usage.cached_input_tokens,
        output_tokens=out.usage.output_tokens,
        cost_usd=out.cost_usd,
        text=out.text[:60],
    )


async def _check_all(configs: list[ModelConfig]) -> list[CheckRow]:
    results = await asyncio.gather(*(_check_one(c) for c in configs))
    return [row for rows in results for row in rows]


@app.command()
def check(
    models: Annotated[
        list[str], typer.Argument(help="provider/model strings, e.g. openai/gpt-4o.")
    ],
    base_url: BaseUrl = None,
    key: Annotated[
        str | None,
        typer.Option(
            help="API key (default: the provider's variable, or .env).", show_default=False
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option(
            metavar="DURATION",
            parser=parse_duration,
            help="How long one request may take, e.g. 60 or 2m.",
        ),
    ] = 60.0,
    max_wait: Annotated[
        float, typer.Option(help="Seconds to keep retrying 429/5xx/timeouts per call.")
    ] = 10.0,
    as_json: JsonOption = False,
) -> None:
    """One minimal call and one structured-output call per model: latency, usage, cost."""
    try:
        configs = [
            ModelConfig(
                model=name,
                base_url=base_url,
                api_key=SecretStr(key) if key else None,
                timeout_s=request_timeout,
                max_retry_wait_s=max_wait,
                structured_retries=1,
            )
            for name in models
        ]
    except ValidationError as exc:
        error(_flag_error(exc))
        raise typer.Exit(2) from None
    started = time.perf_counter()
    rows = asyncio.run(_check_all(configs))
    failed = [r for r in rows if not r.ok]
    if as_json:
        console.print_json(data={"ok": not failed, "calls": [r.model_dump() for r in rows]})
    else:
        good = [r for r in rows if r.ok]
        if good:
            console.print(_check_table(good))
        for row in failed:
            error(row.error or f"{row.model}: failed")
        count = len({r.model for r in rows}) - len({r.model for r in failed})
        console.print(
            f"{count} of {len(configs)} models ready ({time.perf_counter() - started:.1f}s)"
        )
    if failed:
        raise typer.Exit(1)


_FLAGS = {
    "model": "MODELS",
    "base_url": "--base-url",
    "timeout_s": "--request-timeout",
    "max_retry_wait_s": "--max-wait",
}
"""The option or argument of ``models check`` that sets each ModelConfig field."""


def _flag_error(exc: ValidationError) -> str:
    """One line naming the flag whose value ModelConfig refused, and why."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    message = err["msg"].removeprefix("Value error, ")
    value = repr(err["input"])
    if value not in message:
        message = f"{message}, got {value}"
    return f"{_FLAGS.get(field, field)}: {message}"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def _check_table(rows: list[CheckRow]) -> Table:
    table = Table(title="Model check")
    for name in ("model", "call", "latency", "input", "cached", "output", "cost", "answer"):
        table.add_column(
            name, justify="right" if name not in ("model", "call", "answer") else "left"
        )
    for r in rows:
        table.add_row(
            r.model,
            r.call,
            f"{(r.latency_s or 0) * 1000:.0f} ms",
            str(r.input_tokens),
            str(r.cached_input_tokens),
            str(r.output_tokens),
            _money(r.cost_usd),
            r.text or "",
        )
    return table


@app.command("list")
def list_models(as_json: JsonOption = False) -> None:
    """The price table (dollars per million tokens) and the named endpoints."""
    table = PriceTable.load()
    named = endpoints()
    if as_json:
        console.print_json(
            data={
                "prices_per_million_tokens": {
                    m: p.model_dump() for m, p in sorted(table.prices.items())
                },
                "endpoints": {n: e.model_dump() for n, e in sorted(named.items())},
            }
        )
        return
    prices = Table(title="Prices (USD per million tokens)")
    for name in ("model", "input", "cached input", "cache write", "output"):
        prices.add_column(name, justify="left" if name == "model" else "right")

    def cell(value: float | None, fallback: float) -> str:
        return f"{fallback if value is None else value:g}"

    for model, price in sorted(table.prices.items()):
        prices.add_row(
            model,
            cell(price.input, 0),
            cell(price.cached_input, price.input),
            cell(price.cache_write, price.input),
            cell(price.output, 0),
        )
    console.print(prices)
    named_table = Table(title="Named OpenAI-compatible endpoints (<name>/<model>)")
    for name in ("name", "base URL", "key variable"):
        named_table.add_column(name)
    for name, endpoint in sorted(named.items()):
        named_table.add_row(name, endpoint.base_url, endpoint.api_key_env or "-")
    console.print(named_table)

"""The monitor reads the network log the real egress proxy writes: requests the proxy refused
and requests it let through (its blacklist was narrower than the monitor's) are both hits.

The proxy is mitmproxy in its own environment (created on first use); the servers stand in
for github.com and an allowed host on 127.0.0.1, as in tests/sandbox/test_egress.py.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from paperbench.agents import StartEvent, TranscriptWriter, monitor_run
from paperbench.sandbox import Blacklist
from paperbench.sandbox._egress import EgressProxy, EgressSettings, ensure_egress_python
from tests.sandbox.egress_helpers import RESOLVE, make_pki, serve

MONITOR_RULES = ["https://github.com/Owner/Repo", "blocked-host.test"]
PROXY_RULES = ["blocked-host.test", "https://github.com/owner/other"]


def _fetch(proxy_url: str, url: str, cafile: Path) -> int:
    context = ssl.create_default_context(cafile=str(cafile))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}),
        urllib.request.HTTPSHandler(context=context),
    )
    try:
        with opener.open(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code)


async def _record(tmp_path: Path, log: Path) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    with serve(pki) as servers:
        proxy = EgressProxy(
            PROXY_RULES,
            log,
            EgressSettings(
                upstream_ca_bundle=pki.ca,
                resolve=RESOLVE,
                python=await ensure_egress_python(),
                startup_timeout=30,
            ),
        )
        await proxy.start()
        try:
            assert proxy.endpoint is not None
            ep = proxy.endpoint
            gh, ok = servers.github.port, servers.allowed.port
            for url, status in [
                (f"https://allowed.test:{ok}/data.csv", 200),
                (f"https://www.github.com:{gh}/OWNER/repo.git/info/refs", 200),
                (f"https://github.com:{gh}/owner/other/archive/main.zip", 403),
                (f"https://github.com:{gh}/owner/repo-extras", 200),
            ]:
                assert await asyncio.to_thread(_fetch, ep.url, url, ep.ca_cert_path) == status
        finally:
            await proxy.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test CA")
def test_hits_in_the_real_proxys_log(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = TranscriptWriter(run / "transcript.jsonl")
    writer.append(StartEvent(agent="basic", paper_id="p"))
    writer.close()
    log = run / "network.jsonl"
    asyncio.run(_record(tmp_path, log))  # the proxy is stopped: its log is complete
    rules = Blacklist.from_urls([*MONITOR_RULES, PROXY_RULES[1]], source="test")
    report = monitor_run(run, rules, policy="disqualify")
    found = [(h.verdict, h.rule, h.url.split("/", 3)[-1]) for h in report.hits]
    assert found == [
        ("allowed", "https://github.com/Owner/Repo", "OWNER/repo.git/info/refs"),
        ("blocked", "https://github.com/owner/other", "owner/other/archive/main.zip"),
    ]
    assert all(h.source == "network" for h in report.hits)
    assert report.network_entries >= 8  # a CONNECT and a GET per request
    assert report.disqualify

"""``paperbench run`` with a command agent whose own traffic goes to its vendor (as Codex's
``CONNECT chatgpt.com:443``), through the real egress proxy on the local sandbox: the
harness's refusal of it is listed apart and never disqualifies; the same request on the
paper's blacklist does; run.json records every stage finished either way."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.runs import RunState
from paperbench.sandbox._egress import BLACKLIST_REASON, HARNESS_REASON
from paperbench.testing import FakeLLMServer
from tests.judge.conftest import fake_llm  # noqa: F401  (a fixture used here)

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = "calibration-binning"
VENDOR = "https://chatgpt.com/"
"""On the harness's list for command agents (PROVIDER_HOSTS), and on paper ``both``'s own."""
AGENT = """\
type: command
name: chatty
description: A command agent that calls its vendor's host, as Codex does, then submits.
model: openai/gpt-4o-mini
api: openai
launch: >-
  python3 -c "import urllib.request as u;
  u.urlopen('https://chatgpt.com/backend-api/codex/responses', timeout=10)";
  echo replicated > result.txt
"""


def _data_dir(tmp_path: Path) -> Path:
    """Two copies of a bundled paper: ``plain`` with its blacklist, ``both`` whose blacklist
    also names the vendor's host."""
    data = tmp_path / "data"
    for paper in ("plain", "both"):
        folder = data / "papers" / paper
        shutil.copytree(ROOT / "papers" / BUNDLED, folder)
        config = folder / "config.yaml"
        config.write_text(config.read_text().replace(f"id: {BUNDLED}", f"id: {paper}"))
        shutil.copy(ROOT / "rubrics" / f"{BUNDLED}.json", folder / "rubric.json")
        rules = (ROOT / "blacklists" / f"{BUNDLED}.txt").read_text()
        (folder / "blacklist.txt").write_text(rules + (VENDOR + "\n" if paper == "both" else ""))
    return data


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_harness_refusing_an_agents_own_traffic_is_listed_apart_not_a_blacklist_hit(
    tmp_path: Path,
    fake_llm: FakeLLMServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-server")
    (tmp_path / "chatty.yaml").write_text(AGENT)
    data = _data_dir(tmp_path)
    args = ["run", "--agent", str(tmp_path / "chatty.yaml"), "--agent-base-url"]
    args += [fake_llm.openai_url, "--data-dir", str(data), "--papers", "plain,both"]
    args += ["--judge", "dummy", "--skip-reproduction", "--sandbox", "local"]
    args += ["--runs-dir", str(tmp_path / "runs"), "--group", "g"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    group = tmp_path / "runs" / "g"
    plain, both = (group / paper / "chatty" / "seed-0" for paper in ("plain", "both"))

    # The proxy says which list refused the same CONNECT: the harness's, or the paper's first.
    for run, reason in ((plain, HARNESS_REASON), (both, BLACKLIST_REASON)):
        [entry] = [json.loads(line) for line in (run / "network.jsonl").read_text().splitlines()]
        assert (entry["method"], entry["url"], entry["verdict"]) == (
            "CONNECT",
            "chatgpt.com:443",
            "blocked",
        )
        assert (entry["rule"], entry["reason"]) == (VENDOR, reason)

    # plain: scored, its monitor report clean, the refusal listed apart.
    outcome = json.loads((plain / "outcome.json").read_text())
    assert (outcome["status"], outcome["score"]) == ("scored", 1.0)
    report = json.loads((plain / "monitor.json").read_text())
    assert (report["verdict"], report["counted"], report["hits"]) == ("clean", 0, [])
    assert report["harness_refusals_total"] == 1
    [refusal] = report["harness_refusals"]
    assert (refusal["method"], refusal["url"], refusal["rule"]) == (
        "CONNECT",
        "chatgpt.com:443",
        VENDOR,
    )
    # both: the vendor's host is on the paper's blacklist too: a hit, disqualified.
    outcome = json.loads((both / "outcome.json").read_text())
    assert (outcome["status"], outcome["score"]) == ("disqualified", 0.0)
    report = json.loads((both / "monitor.json").read_text())
    assert (report["verdict"], report["counted"], report["harness_refusals_total"]) == (
        "flagged",
        1,
        0,
    )
    assert [(h["source"], h["rule"]) for h in report["hits"]] == [("network", VENDOR)]

    # run.json: every stage finished, the monitor's too (disqualified or not).
    stages = {
        run.parent.parent.name: {
            name: record.status
            for name, record in RunState.model_validate_json(
                (run / "run.json").read_text()
            ).stages.items()
        }
        for run in (plain, both)
    }
    assert stages == {
        "plain": {
            "rollout": "done",
            "monitor": "done",
            "reproduction": "skipped",
            "grading": "done",
        },
        "both": {
            "rollout": "done",
            "monitor": "done",
            "reproduction": "skipped",
            "grading": "skipped",
        },
    }

    # Shown apart: the console, summary.json, the HTML run page; never as a flag.
    said = "plain/chatty/seed-0: 1 request of the agent's own refused by the harness's rule"
    assert said in " ".join(result.output.split())
    assert "both/chatty/seed-0: 1 request" not in result.output
    summary = json.loads((group / "summary.json").read_text())
    runs = {r["paper"]: r for r in summary["runs"]}
    assert (runs["plain"]["harness_refusals"], runs["plain"]["monitor_reason"]) == (1, None)
    assert (runs["both"]["harness_refusals"], runs["both"]["status"]) == (0, "disqualified")
    index = _text((group / "report" / "index.html").read_text())
    assert "1 request refused by the harness's rule, not the paper's blacklist" in index
    page = _text((group / "report" / runs["plain"]["page"]).read_text())
    assert "1 request refused by the harness's own rule, not the paper's blacklist" in page
    assert f"network:1 {VENDOR} CONNECT chatgpt.com:443" in page

    # paperbench monitor RUN says the same, and exits 0 (clean).
    again = CliRunner().invoke(app, ["monitor", str(plain), "--data-dir", str(data)])
    assert again.exit_code == 0, again.output
    lines = again.output.splitlines()
    assert lines[0].startswith("1 request refused by the harness's rule, not the paper's")
    assert lines[1] == f"  network line 1: CONNECT chatgpt.com:443 (rule {VENDOR})"
    assert lines[-1].startswith("clean: no blacklisted address")

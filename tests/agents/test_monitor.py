"""The blacklist monitor: blacklisted addresses in every part of a run are found with their
place, disguised forms are caught, the paper's own allowed links are not flagged, and the
command exits 0 clean / 3 flagged / 1 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.agents import (
    EndEvent,
    MessageEvent,
    MonitorReport,
    NoteEvent,
    StartEvent,
    ToolEvent,
    TranscriptEvent,
    TranscriptWriter,
    monitor_run,
    read_transcript,
)
from paperbench.cli import app
from paperbench.errors import InputError
from paperbench.llm import AssistantMessage, ToolCall, ToolMessage, UserMessage
from paperbench.sandbox import Blacklist

BLACKLIST = """\
# the paper's official code and its project page
https://github.com/okonkwo-lab/scaling-or-binning
https://okonkwo-lab.github.io/scaling-or-binning
mirror-of-results.org
"""
REPO = "https://github.com/okonkwo-lab/scaling-or-binning"

PAPER_MD = """\
# Scaling or binning

Datasets: https://github.com/okonkwo-lab/calibration-datasets and
https://okonkwo-lab.github.io/other-project/ ; see also https://arxiv.org/abs/2101.00001,
https://github.com/okonkwo-lab/scaling-or-binning-data (a separate repository),
https://docs.python.org/3/library/bisect.html and www.example.com/calibration.
"""
ALLOWED = [
    "https://github.com/okonkwo-lab/calibration-datasets",
    "https://okonkwo-lab.github.io/other-project/",
    "https://arxiv.org/abs/2101.00001",
    "https://github.com/okonkwo-lab/scaling-or-binning-data",
    "https://docs.python.org/3/library/bisect.html",
]

runner = CliRunner()


def _blacklist() -> Blacklist:
    return Blacklist.parse(BLACKLIST, source="blacklist.txt")


def _start(paper_id: str = "calibration-binning") -> StartEvent:
    return StartEvent(agent="basic", model="openai/gpt-4o", paper_id=paper_id)


def _run(
    tmp_path: Path, events: list[TranscriptEvent], network: list[dict[str, object]] | None = None
) -> Path:
    run = tmp_path / "run"
    writer = TranscriptWriter(run / "transcript.jsonl")
    for event in events:
        writer.append(event)
    writer.close()
    if network is not None:
        lines = [json.dumps(entry) for entry in network]
        (run / "network.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run


def _assistant(step: int, **fields: object) -> MessageEvent:
    return MessageEvent(step=step, message=AssistantMessage.model_validate(fields))


def _bash(step: int, cmd: str, output: str = "", call_id: str = "c1") -> list[TranscriptEvent]:
    call = ToolCall(id=call_id, name="bash", arguments={"cmd": cmd})
    return [
        _assistant(step, tool_calls=(call,)),
        ToolEvent(
            step=step, tool_call_id=call_id, name="bash", arguments={"cmd": cmd}, output=output
        ),
    ]


def _log(
    url: str | None, verdict: str, *, method: str = "GET", **extra: object
) -> dict[str, object]:
    host = url.split("/")[2].split(":")[0] if url and "://" in url else (url or "").split(":")[0]
    return {
        "ts": "2026-01-01T00:00:00Z",
        "method": method,
        "url": url,
        "host": host,
        "verdict": verdict,
        "rule": None,
        "status": 200,
        **extra,
    }


def _where(report: MonitorReport) -> list[tuple[str, int, str | None, str | None]]:
    return [(h.source, h.line, h.event, h.field) for h in report.hits]


# --- each place in a run ------------------------------------------------------------------


def test_a_url_in_reasoning_is_found_at_its_line_step_and_field(tmp_path: Path) -> None:
    item = {"type": "reasoning", "summary": ["plan", f"maybe read {REPO}/blob/main/a.py"]}
    thinking = {"type": "thinking", "text": f"the code is at {REPO}", "signature": "s"}
    run = _run(
        tmp_path,
        [
            _start(),
            MessageEvent(step=1, message=UserMessage(content="instructions")),
            _assistant(1, content="I will start.", reasoning_items=(item, thinking)),
            _assistant(2, content="ok", reasoning=f"or clone {REPO}.git"),
        ],
    )
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert _where(report) == [
        ("transcript", 3, "message", "reasoning_items[0].summary[1]"),
        ("transcript", 3, "message", "reasoning_items[1].text"),
        ("transcript", 4, "message", "reasoning"),
    ]
    assert [h.step for h in report.hits] == [1, 1, 2]
    assert {h.rule for h in report.hits} == {REPO}
    assert report.hits[0].url == REPO + "/blob/main/a.py"
    assert REPO + "/blob/main/a.py" in report.hits[0].context
    assert report.verdict == "flagged" and report.disqualify
    assert report.reason is not None and REPO in report.reason


def test_encrypted_reasoning_is_counted_as_unreadable(tmp_path: Path) -> None:
    items = [
        {"type": "redacted_thinking", "data": "c2VjcmV0"},
        {"type": "reasoning", "id": "rs_1", "data": "gAAAA", "summary": []},
        {"type": "reasoning", "id": "rs_2", "data": "gAAAA", "summary": ["readable"]},
    ]
    run = _run(tmp_path, [_start(), _assistant(1, content="x", reasoning_items=items)])
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert report.unreadable_reasoning == 2
    (tmp_path / "bl.txt").write_text(BLACKLIST)
    code, output = _cli([str(run), "--blacklist", str(tmp_path / "bl.txt")])
    assert code == 0 and "2 reasoning items are encrypted and were not scanned" in output


def test_a_git_clone_tool_call_is_found_in_the_call_and_the_tool_event(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start(), *_bash(1, f"cd /tmp && git clone {REPO}.git && ls")])
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert _where(report) == [
        ("transcript", 2, "message", "tool_calls[0].arguments.cmd"),
        ("transcript", 3, "tool", "arguments.cmd"),
    ]
    assert report.hits[0].url == REPO + ".git"
    assert "git clone" in report.hits[0].context


def test_python_code_written_by_the_agent_is_scanned(tmp_path: Path) -> None:
    code = (
        "import requests, urllib.request\n"
        'BASE = "https://raw.githubusercontent.com/okonkwo-lab/scaling-or-binning/main"\n'
        "r = requests.get(BASE + '/calib.py')\n"
    )
    call = ToolCall(
        id="w1", name="write_file", arguments={"path": "/home/submission/a.py", "content": code}
    )
    run = _run(tmp_path, [_start(), _assistant(3, tool_calls=(call,))])
    report = monitor_run(run, _blacklist(), policy="flag")
    assert _where(report) == [("transcript", 2, "message", "tool_calls[0].arguments.content")]
    assert report.hits[0].normalised == "github.com/okonkwo-lab/scaling-or-binning/main"
    assert report.verdict == "flagged" and not report.disqualify


def test_tool_output_is_scanned_in_the_tool_event_and_tool_message(tmp_path: Path) -> None:
    output = "Search results:\n1. Official code: https://okonkwo-lab.github.io/scaling-or-binning/results\n"
    run = _run(
        tmp_path,
        [
            _start(),
            *_bash(1, "cat notes.txt", output=output),
            MessageEvent(step=1, message=ToolMessage(tool_call_id="c1", content=output)),
        ],
    )
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert _where(report) == [
        ("transcript", 3, "tool", "output"),
        ("transcript", 4, "message", "content"),
    ]
    assert report.hits[0].rule == "https://okonkwo-lab.github.io/scaling-or-binning"


def test_notes_and_tool_errors_are_scanned(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        [
            _start(),
            ToolEvent(
                step=1, tool_call_id="c", name="web_fetch", error="refused: mirror-of-results.org"
            ),
            NoteEvent(step=2, kind="artifact", data={"files": ["x", f"see {REPO}"]}),
        ],
    )
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert _where(report) == [
        ("transcript", 2, "tool", "error"),
        ("transcript", 3, "note", "data.files[1]"),
    ]


def test_network_log_hits_allowed_and_refused_requests(tmp_path: Path) -> None:
    network: list[dict[str, object]] = [
        _log("https://pypi.org/simple/numpy/", "allowed"),
        _log(
            f"{REPO}.git/info/refs?service=git-upload-pack",
            "blocked",
            status=403,
            reason="blacklist",
            rule=REPO,
        ),
        _log("https://mirror-of-results.org/table2.csv", "allowed"),
        _log(
            "mirror-of-results.org:443",
            "blocked",
            method="CONNECT",
            status=403,
            reason="blacklist",
            rule="mirror-of-results.org",
        ),
        _log("https://codeload.github.com/okonkwo-lab/scaling-or-binning/zip/main", "allowed"),
        {"ts": "t", "method": None, "url": None, "host": "mirror-of-results.org",
         "verdict": "blocked", "rule": None, "status": None, "reason": "non-HTTP traffic"},
    ]  # fmt: skip
    run = _run(tmp_path, [_start(), EndEvent(step=1, status="submitted")], network)
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert [(h.source, h.line, h.verdict) for h in report.hits] == [
        ("network", 2, "blocked"),
        ("network", 3, "allowed"),
        ("network", 4, "blocked"),
        ("network", 5, "allowed"),
        ("network", 6, "blocked"),
    ]
    assert report.hits[-1].field == "host" and report.hits[-1].url == "mirror-of-results.org"
    assert report.network_entries == 6
    assert [h.rule for h in report.hits] == [
        REPO,
        "mirror-of-results.org",
        "mirror-of-results.org",
        REPO,
        "mirror-of-results.org",
    ]


def test_a_refusal_by_a_rule_the_given_blacklist_lacks_still_counts(tmp_path: Path) -> None:
    network = [
        _log("https://old-mirror.net/x", "blocked", reason="blacklist", rule="old-mirror.net")
    ]
    run = _run(tmp_path, [_start()], network)
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert [(h.line, h.rule) for h in report.hits] == [(1, "old-mirror.net")]


def test_a_refusal_by_the_harnesss_rule_is_listed_apart_unless_the_paper_has_it(
    tmp_path: Path,
) -> None:
    """Only the paper's blacklist is judged: the harness's refusals (a command agent's own
    traffic to its vendor) never count, but an address on both lists is a hit."""
    refused = {"method": "CONNECT", "reason": "harness blacklist"}
    network = [
        _log("chatgpt.com:443", "blocked", **refused, rule="https://chatgpt.com/"),
        _log("mirror-of-results.org:443", "blocked", **refused, rule="mirror-of-results.org"),
    ]
    run = _run(tmp_path, [_start()], network)
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert [(h.line, h.rule, h.verdict) for h in report.hits] == [
        (2, "mirror-of-results.org", "blocked")
    ]
    assert report.disqualify and report.harness_refusals_total == 1
    [refusal] = report.harness_refusals
    assert (refusal.line, refusal.url, refusal.rule) == (
        1,
        "chatgpt.com:443",
        "https://chatgpt.com/",
    )
    clean = monitor_run(run, Blacklist(), policy="disqualify")
    assert clean.verdict == "clean" and clean.hits_total == 0
    assert [r.line for r in clean.harness_refusals] == [1, 2]


# --- the paper's allowed links ------------------------------------------------------------


def test_the_papers_allowed_links_are_not_flagged(tmp_path: Path) -> None:
    network = [_log(url, "allowed") for url in ALLOWED]
    events: list[TranscriptEvent] = [
        _start(),
        *_bash(1, "cat /home/paper/paper.md", output=PAPER_MD),
        _assistant(2, content=f"The paper links {ALLOWED[0]}", reasoning=" ".join(ALLOWED)),
        *_bash(3, " && ".join(f"curl -sL {url}" for url in ALLOWED), call_id="c2"),
        *_bash(4, f"pip install git+{ALLOWED[3]}.git@main", call_id="c3"),
    ]
    run = _run(tmp_path, events, network)
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert report.hits == []
    assert report.verdict == "clean" and not report.disqualify and report.reason is None
    assert report.network_entries == len(ALLOWED)


# --- echoes of the paper's files -----------------------------------------------------------


def test_printing_the_blacklist_is_listed_but_not_counted(tmp_path: Path) -> None:
    echoes = {"blacklist.txt": BLACKLIST}
    run = _run(
        tmp_path,
        [
            _start(),
            *_bash(1, "cat /home/paper/blacklist.txt", output=BLACKLIST),
            MessageEvent(step=1, message=ToolMessage(tool_call_id="c1", content=BLACKLIST)),
        ],
    )
    report = monitor_run(run, _blacklist(), policy="disqualify", echoes=echoes)
    assert {(h.line, h.field, h.echo_of) for h in report.hits} == {
        (3, "output", "blacklist.txt"),
        (4, "content", "blacklist.txt"),
    }
    assert report.hits_total == 6 and report.counted == 0
    assert report.verdict == "clean" and not report.disqualify
    assert report.echo_sources == ["blacklist.txt"]


def test_an_echoed_address_still_counts_in_the_agents_own_words_and_calls(tmp_path: Path) -> None:
    echoes = {"blacklist.txt": BLACKLIST}
    run = _run(
        tmp_path,
        [
            _start(),
            *_bash(1, "cat /home/paper/blacklist.txt", output=BLACKLIST),
            _assistant(2, content=f"Let me look at {REPO} anyway"),
            *_bash(3, f"curl -s {REPO}", output=f"fetched {REPO}/blob/main/x.py", call_id="c2"),
        ],
    )
    report = monitor_run(run, _blacklist(), policy="disqualify", echoes=echoes)
    counted = [(h.line, h.field) for h in report.hits if h.echo_of is None]
    assert counted == [
        (4, "content"),
        (5, "tool_calls[0].arguments.cmd"),
        (6, "arguments.cmd"),
        (6, "output"),  # not written so in blacklist.txt
    ]
    assert report.verdict == "flagged" and report.counted == 4


# --- talking around it --------------------------------------------------------------------

DISGUISES = [
    "git clone https://www.github.com/okonkwo-lab/scaling-or-binning",
    "git clone https://github.com/okonkwo-lab/scaling-or-binning.git",
    "open https://github.com/okonkwo-lab/scaling-or-binning/tree/main/src",
    "wget HTTPS://GITHUB.COM/OKONKWO-LAB/SCALING-OR-BINNING/archive/refs/heads/main.zip",
    "curl -L https://codeload.github.com/okonkwo-lab/scaling-or-binning/tar.gz/main | tar xz",
    "curl https://raw.githubusercontent.com/okonkwo-lab/scaling-or-binning/main/calib.py",
    "git clone git@github.com:okonkwo-lab/scaling-or-binning.git",
    "git clone ssh://git@github.com/okonkwo-lab/scaling-or-binning",
    "pip install git+https://github.com/okonkwo-lab/scaling-or-binning.git@v1.0#egg=sob",
    "pip install 'sob @ git+ssh://git@github.com/okonkwo-lab/scaling-or-binning@main'",
    "pip install https://github.com/okonkwo-lab/scaling-or-binning/archive/main.zip",
    "gh repo clone okonkwo-lab/scaling-or-binning",
    "cookiecutter gh:okonkwo-lab/scaling-or-binning",
    "curl https://api.github.com/repos/okonkwo-lab/scaling-or-binning/zipball",
    "git clone github.com/okonkwo-lab/scaling-or-binning",
    'urllib.request.urlopen("https://github.com//okonkwo-lab/./scaling-or-binning/")',
    'requests.get("https:\\/\\/github.com\\/okonkwo-lab\\/scaling-or-binning")',
    "see [the code](https://github.com/okonkwo-lab/scaling-or-binning).",
    "git clone https://github.com:443/okonkwo-lab/scaling-or-binning",
    "curl http://www.okonkwo-lab.github.io/scaling-or-binning/index.html",
    "curl mirror-of-results.org",
    "curl https://github.com/okonkwo-lab%2Fscaling-or-binning",
    "open('github.com\\okonkwo-lab\\scaling-or-binning')",
]


@pytest.mark.parametrize("text", DISGUISES)
def test_disguised_forms_are_still_caught(tmp_path: Path, text: str) -> None:
    run = _run(tmp_path, [_start(), *_bash(1, text)])
    report = monitor_run(run, _blacklist(), policy="disqualify")
    assert _where(report) == [
        ("transcript", 2, "message", "tool_calls[0].arguments.cmd"),
        ("transcript", 3, "tool", "arguments.cmd"),
    ], text


@pytest.mark.parametrize(
    "text",
    [
        "https://github.com/okonkwo-lab/scaling-or-binning-v2",
        "https://github.com/okonkwo-lab",
        "https://sub.mirror-of-results.org/x",
        "https://okonkwo-lab.github.io/",
        "https://gist.github.com/okonkwo-lab/0123abcdef",
        "scaling-or-binning is the method's name; github.com is a host",
    ],
)
def test_near_misses_are_not_flagged(tmp_path: Path, text: str) -> None:
    run = _run(tmp_path, [_start(), *_bash(1, text)])
    assert monitor_run(run, _blacklist(), policy="disqualify").hits == []


def test_the_address_as_found_keeps_its_scheme_and_user(tmp_path: Path) -> None:
    texts = [
        "git clone git@github.com:okonkwo-lab/scaling-or-binning.git;",
        "pip install git+ssh://git@github.com/okonkwo-lab/scaling-or-binning@v1",
    ]
    run = _run(tmp_path, [_start(), *(_assistant(1, content=t) for t in texts)])
    found = [h.url for h in monitor_run(run, _blacklist(), policy="flag").hits]
    assert found == [
        "git@github.com:okonkwo-lab/scaling-or-binning.git",
        "git+ssh://git@github.com/okonkwo-lab/scaling-or-binning@v1",
    ]


def test_an_address_is_reported_once_per_field(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start(), _assistant(1, content=f"{REPO} {REPO}.git {REPO}/")])
    assert len(monitor_run(run, _blacklist(), policy="flag").hits) == 1


# --- bad input ----------------------------------------------------------------------------


def test_a_bad_transcript_line_is_one_error_naming_the_line(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start(), _assistant(1, content="hi")])
    path = run / "transcript.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"type": "bogus"}', lines[1]]) + "\n")
    with pytest.raises(InputError, match=r"transcript\.jsonl: line 2: not a transcript event"):
        monitor_run(run, _blacklist(), policy="disqualify")


def test_a_transcript_that_is_not_utf8_is_one_error(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start()])
    (run / "transcript.jsonl").write_bytes(b'\xff\xfe{"type": "note"}\n')
    with pytest.raises(InputError, match=r"transcript\.jsonl: not UTF-8 text \(byte 0\)"):
        read_transcript(run / "transcript.jsonl")
    with pytest.raises(InputError, match=r"transcript\.jsonl: not UTF-8 text"):
        monitor_run(run, _blacklist(), policy="disqualify")


def test_a_bad_network_log_line_names_it_and_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start()], [_log(REPO, "allowed")])
    log = run / "network.jsonl"
    log.write_text(log.read_text() + '{"ts": "t", "verdict": "allowed", "url": "https://mirr')
    assert [h.line for h in monitor_run(run, _blacklist(), policy="flag").hits] == [1]
    log.write_text('{"ts": "t"}\n' + log.read_text())
    with pytest.raises(InputError, match=r"network\.jsonl: line 1: not a log entry"):
        monitor_run(run, _blacklist(), policy="flag")


# --- the command --------------------------------------------------------------------------


def _cli(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(app, ["monitor", *args], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_cli_clean_run_exits_0_and_writes_monitor_json(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start(), _assistant(1, content="nothing to see")], [])
    (tmp_path / "bl.txt").write_text(BLACKLIST)
    code, output = _cli([str(run), "--blacklist", str(tmp_path / "bl.txt")])
    assert code == 0, output
    assert "clean" in output
    report = MonitorReport.model_validate_json((run / "monitor.json").read_text())
    assert report.verdict == "clean" and report.blacklist_rules == 3
    assert report.blacklist_source == str(tmp_path / "bl.txt")


def test_cli_flagged_run_exits_3_under_both_policies(tmp_path: Path) -> None:
    run = _run(tmp_path, [_start(), *_bash(1, f"git clone {REPO}")])
    (tmp_path / "bl.txt").write_text(BLACKLIST)
    code, output = _cli([str(run), "--blacklist", str(tmp_path / "bl.txt")])
    assert code == 3, output
    assert "disqualified" in output and "no network log" in output
    assert json.loads((run / "monitor.json").read_text())["disqualify"] is True
    code, output = _cli(
        [str(run), "--blacklist", str(tmp_path / "bl.txt"), "--policy", "flag", "--json"]
    )
    assert code == 3, output
    assert json.loads(output[output.index("{") :])["disqualify"] is False


def test_cli_takes_the_blacklist_of_the_runs_paper(tmp_path: Path) -> None:
    # calibration-binning is bundled with this repository; its blacklist has the repository.
    run = _run(tmp_path, [_start(), *_bash(1, f"git clone {REPO}")])
    code, output = _cli([str(run)])
    assert code == 3, output
    report = json.loads((run / "monitor.json").read_text())
    assert report["blacklist_source"].endswith("calibration-binning.txt")


def test_cli_tool_outputs_echoing_the_papers_files_are_not_counted(tmp_path: Path) -> None:
    paper = tmp_path / "data" / "papers" / "p1"
    paper.mkdir(parents=True)
    (paper / "paper.md").write_text(PAPER_MD + f"Official code: {REPO}/tree/main/src\n")
    (paper / "blacklist.txt").write_text(BLACKLIST)
    (paper / "rubric.json").write_text("{}")
    events = [
        _start("p1"),
        *_bash(
            1,
            "cat /home/paper/*",
            output=PAPER_MD + f"Official code: {REPO}/tree/main/src\n" + BLACKLIST,
        ),
    ]
    run = _run(tmp_path, events)
    args = [str(run), "--paper", "p1", "--data-dir", str(tmp_path / "data")]
    code, output = _cli(args)
    assert code == 0, output
    assert "echo of paper.md, not counted" in output
    report = json.loads((run / "monitor.json").read_text())
    assert report["echo_sources"] == ["blacklist.txt", "paper.md"]
    assert "4 hits in tool outputs echo the paper's files" in output
    (paper / "paper.md").write_text(PAPER_MD)  # no longer in the paper: it counts
    code, output = _cli(args)
    assert code == 3, output


def test_cli_many_hits_are_cut_on_the_console_not_in_monitor_json(tmp_path: Path) -> None:
    text = " ".join(f"{REPO}/blob/main/f{i}.py" for i in range(45))
    run = _run(tmp_path, [_start(), _assistant(1, content=text)], [])
    (tmp_path / "bl.txt").write_text(BLACKLIST)
    code, output = _cli([str(run), "--blacklist", str(tmp_path / "bl.txt")])
    assert code == 3
    assert "… 5 more hits in" in output and "f39.py" in output and "f40.py" not in output
    assert len(json.loads((run / "monitor.json").read_text())["hits"]) == 45


def test_cli_a_paper_without_a_blacklist_says_so(tmp_path: Path) -> None:
    paper = tmp_path / "data" / "papers" / "p1"
    paper.mkdir(parents=True)
    (paper / "paper.md").write_text(PAPER_MD)
    (paper / "rubric.json").write_text("{}")
    run = _run(tmp_path, [_start("p1"), *_bash(1, f"git clone {REPO}")], [])
    code, output = _cli([str(run), "--paper", "p1", "--data-dir", str(tmp_path / "data")])
    assert code == 0, output
    assert "paper p1 has no blacklist file: nothing can be flagged" in output
    assert json.loads((run / "monitor.json").read_text())["blacklist_rules"] == 0


def test_cli_a_paper_id_is_taken_from_a_data_dir(tmp_path: Path) -> None:
    paper = tmp_path / "data" / "papers" / "p1"
    paper.mkdir(parents=True)
    (paper / "paper.md").write_text(PAPER_MD)
    (paper / "blacklist.txt").write_text(BLACKLIST)
    (paper / "rubric.json").write_text("{}")
    run = _run(tmp_path, [_start(), *_bash(1, "cat /home/paper/paper.md", output=PAPER_MD)])
    code, output = _cli([str(run), "--paper", "p1", "--data-dir", str(tmp_path / "data")])
    assert code == 0, output


@pytest.mark.parametrize(
    ("args", "culprit", "exit_code"),
    [
        (["{tmp}/missing"], "missing: not a folder", 1),
        (["{tmp}"], "no transcript.jsonl", 1),
        (["{run}", "--blacklist", "{tmp}/none.txt"], "none.txt: cannot read blacklist", 1),
        (["{run}", "--blacklist", "{tmp}/bad.txt"], "bad.txt: line 1:", 1),
        (["{run}", "--blacklist", "{tmp}/bad.txt", "--paper", "x"], "not both", 2),
        (["{run}", "--policy", "ban"], "--policy", 2),
        (["{run}", "--paper", "no-such-paper"], "no-such-paper", 1),
    ],
)
def test_cli_bad_input_is_one_line(
    tmp_path: Path, args: list[str], culprit: str, exit_code: int
) -> None:
    run = _run(tmp_path, [_start()])
    (tmp_path / "bad.txt").write_text("not a url with spaces\n")
    args = [a.format(tmp=tmp_path, run=run) for a in args]
    code, output = _cli(args)
    assert code == exit_code, output
    assert culprit in output, output


def _other_paper(tmp_path: Path) -> Path:
    """A data directory with paper p1, whose blacklist is not calibration-binning's."""
    paper = tmp_path / "data" / "papers" / "p1"
    paper.mkdir(parents=True)
    (paper / "paper.md").write_text(PAPER_MD)
    (paper / "blacklist.txt").write_text("https://github.com/someone/other-code\n")
    (paper / "rubric.json").write_text("{}")
    return tmp_path / "data"


def test_cli_another_paper_uses_its_blacklist_and_keeps_the_runs_monitor_json(
    tmp_path: Path,
) -> None:
    data = _other_paper(tmp_path)
    network = [  # refused by the run's own paper's rule, which p1's blacklist lacks
        _log(f"{REPO}/archive/main.zip", "blocked", reason="blacklist", rule=REPO)
    ]
    events = [_start(), *_bash(1, f"git clone {REPO}"), *_bash(2, "ls", call_id="c2")]
    run = _run(tmp_path, events, network)
    code, output = _cli([str(run)])  # the run's own paper: its verdict, written in the run
    assert code == 3, output
    own = (run / "monitor.json").read_text()
    assert json.loads(own)["blacklist_source"].endswith("calibration-binning.txt")

    args = [str(run), "--paper", "p1", "--data-dir", str(data)]
    code, output = _cli(args)
    assert code == 0, output  # none of p1's addresses, and the proxy's refusal was not p1's
    assert "monitor.json is left as it was" in output and "not written" in output
    assert (run / "monitor.json").read_text() == own

    with (run / "transcript.jsonl").open("a") as transcript:
        call = _bash(3, "pip install git+https://github.com/someone/other-code", call_id="c3")
        transcript.write(call[0].model_dump_json() + "\n")
    code, output = _cli([*args, "--out", str(tmp_path / "p1-check"), "--json"])
    assert code == 3, output
    elsewhere = json.loads((tmp_path / "p1-check" / "monitor.json").read_text())
    assert elsewhere["blacklist_source"].endswith("p1/blacklist.txt")
    assert {h["rule"] for h in elsewhere["hits"]} == {"https://github.com/someone/other-code"}
    assert (run / "monitor.json").read_text() == own


def test_cli_says_why_a_run_is_disqualified_rule_step_and_command(tmp_path: Path) -> None:
    network = [_log(f"{REPO}/archive/main.zip", "blocked", reason="blacklist", rule=REPO)]
    run = _run(tmp_path, [_start(), *_bash(4, f"cd /tmp && git clone {REPO} code")], network)
    code, output = _cli([str(run)])
    assert code == 3, output
    lines = output.splitlines()
    why = lines.index("why (3 hits counted):")
    assert lines[why + 1] == (
        f"  step 4: rule {REPO} in message.tool_calls[0].arguments.cmd: "
        f"cd /tmp && git clone {REPO} code"
    )
    assert f"  network line 1: rule {REPO} in network.url: request to " in output
    assert lines[-1].startswith(
        "verdict: disqualified: blacklisted address in the network and transcript (3 hits; "
    )

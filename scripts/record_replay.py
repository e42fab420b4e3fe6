"""Write agents/replays/<paper>.jsonl: a recorded transcript that builds the paper's reference
submission (examples/<paper>/reference/submission) step by step, for the replay agent.

Each step is one assistant message with one tool call: look at the paper, write each file
with a bash heredoc, run a quick check, commit with git, then submit. Run from the
repository's root after changing a reference submission:

    python scripts/record_replay.py            # every bundled paper
    python scripts/record_replay.py momentum-conditioning
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paperbench.agents import MessageEvent
from paperbench.llm import AssistantMessage, ToolCall

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = "/home/submission"


def _heredoc(rel: str, text: str) -> str:
    marker = "PAPERBENCH_EOF"
    while marker in text:
        marker += "_"
    folder = str(Path(rel).parent)
    mkdir = f"mkdir -p {folder} && " if folder != "." else ""
    if text.endswith("\n"):
        return f"cd {SUBMISSION} && {mkdir}cat > {rel} <<'{marker}'\n{text}{marker}"
    # a heredoc always ends with a newline: take it off again
    body = f"cat > {rel} <<'{marker}'\n{text}\n{marker}\ntruncate -s -1 {rel}"
    return f"cd {SUBMISSION} && {mkdir}{body}"


def steps(paper: str) -> list[tuple[str, str, dict[str, object]]]:
    """(thought, tool, arguments) for each step."""
    source = ROOT / "examples" / paper / "reference" / "submission"
    files = sorted(p for p in source.rglob("*") if p.is_file())
    out: list[tuple[str, str, dict[str, object]]] = [
        (
            "I start by reading the paper.",
            "read_file_chunk",
            {"path": "/home/paper/paper.md", "start_line": 1, "n_lines": 60},
        )
    ]
    for path in files:
        rel = path.relative_to(source).as_posix()
        text = path.read_text(encoding="utf-8")
        out.append((f"Writing {rel}.", "bash", {"command": _heredoc(rel, text)}))
    out.append(
        (
            "Checking what I wrote.",
            "bash",
            {
                "command": f"cd {SUBMISSION} && chmod +x reproduce.sh && find . -path ./.git "
                "-prune -o -type f -print | sort"
            },
        )
    )
    out.append(
        (
            "Committing.",
            "bash",
            {
                "command": f"cd {SUBMISSION} && git add -A && git -c user.name=agent "
                "-c user.email=agent@paperbench.invalid commit -q -m 'reference submission' "
                "&& git log --oneline | head -3"
            },
        )
    )
    out.append(("Done.", "submit", {"summary": f"reference submission of {paper}"}))
    return out


def record(paper: str) -> Path:
    dest = ROOT / "agents" / "replays" / f"{paper}.jsonl"
    lines = []
    for number, (thought, tool, arguments) in enumerate(steps(paper), start=1):
        message = AssistantMessage(
            content=thought,
            tool_calls=(ToolCall(id=f"call_{number:03d}", name=tool, arguments=arguments),),
        )
        event = MessageEvent(time=0.0, step=number, message=message)
        lines.append(event.model_dump_json())
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("papers", nargs="*", help="default: every paper under examples/")
    args = parser.parse_args(argv)
    papers = args.papers or sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir())
    for paper in papers:
        if not (ROOT / "examples" / paper / "reference" / "submission").is_dir():
            print(f"examples/{paper}/reference/submission: no such folder", file=sys.stderr)
            return 1
        print(record(paper).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

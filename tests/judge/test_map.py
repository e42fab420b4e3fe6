from __future__ import annotations

from pathlib import Path

from paperbench.judge import build_view
from paperbench.judge._map import build_map

MODEL = "openai/gpt-4o"


def _view(tmp_path: Path, files: dict[str, str]):  # type: ignore[no-untyped-def]
    root = tmp_path / "sub"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return build_view(root)


def test_the_map_lists_symbols_headings_tables_and_imports(tmp_path: Path) -> None:
    view = _view(
        tmp_path,
        {
            "src/model.py": '"""Warm-start trainer.\n\nMore."""\nfrom .layers import Dense\n\n'
            "class Trainer:\n    pass\n\ndef fit(x):\n    return x\n",
            "src/layers.py": "class Dense:\n    pass\n",
            "src/__init__.py": "",
            "lib/run.js": "function launch(a) { return a }\n",
            "README.md": "Intro\n\n# How to run it\n",
            "results/table.csv": "seed,accuracy\n0,0.9\n",
            "results/out.json": '{"run": "x", "score": 1}',
        },
    )
    m = build_map(view, MODEL, 20_000)
    lines = {line.split(" ", 1)[0]: line for line in m.text.splitlines()}
    assert "Warm-start trainer." in lines["src/model.py"]
    assert "class Trainer" in lines["src/model.py"] and "fit()" in lines["src/model.py"]
    assert "launch" in lines["lib/run.js"]
    assert "How to run it" in lines["README.md"]
    assert "seed,accuracy" in lines["results/table.csv"]
    assert "keys: run, score" in lines["results/out.json"]
    assert m.imports["src/model.py"] == ["src/layers.py"]
    assert m.notes == [] and m.tokens <= 20_000


def test_the_map_caps_by_trimming_symbols_then_notes_the_paths_it_drops(tmp_path: Path) -> None:
    files = {
        f"src/mod_{i}.py": "".join(
            f"def function_number_{j}(x):\n    return x\n" for j in range(30)
        )
        for i in range(40)
    }
    files["README.md"] = "# Notes\n"
    view = _view(tmp_path, files)
    whole = build_map(view, MODEL, 100_000)
    assert whole.notes == [] and "function_number_29()" in whole.text
    trimmed = build_map(view, MODEL, whole.tokens // 3)
    assert trimmed.tokens <= whole.tokens // 3
    assert trimmed.notes == [] and "more)" in trimmed.text
    assert all(f"src/mod_{i}.py " in trimmed.text for i in range(40))  # every path kept
    tiny = build_map(view, MODEL, 60)
    assert tiny.tokens <= 60
    kept = len(tiny.text.splitlines())
    assert 0 < kept < 41
    assert tiny.notes == [
        f"the submission map lists {kept} of 41 paths (no symbols): {41 - kept} left out for room"
    ]

#!/usr/bin/env bash
# Install paperbench with the lowest versions of its direct dependencies that pyproject.toml
# allows (uv's --resolution lowest-direct), in a fresh venv, then import it, run smoke
# commands, then a few quick test files (with pytest and hypothesis added). A failure means a
# lower bound is untrue. Not part of ./dev test: it downloads, and takes about 2 minutes.
#
#   scripts/check-lowest.sh [VENV_DIR]      (default: a temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${1:-}
if [[ -z "$VENV" ]]; then
    VENV=$(mktemp -d)
    trap 'rm -rf "$VENV"' EXIT
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --resolution lowest-direct .
echo "installed:"
"$VENV/bin/uv" pip list --python "$VENV/bin/python" 2>/dev/null |
    grep -iE '^(pydantic|jsonschema|jsonschema-rs|rich|typer|pyyaml|openai|anthropic|tiktoken|bpe-openai|python-dotenv|docker|bm25s|jinja2|pyseccomp|aiohttp|drain3) '
cd "$VENV"  # import the installed package, not the source tree
"$VENV/bin/python" -c "import paperbench, paperbench.cli, paperbench.llm, paperbench.judge, paperbench.agents, paperbench.runs, paperbench.sandbox, paperbench.gateway, paperbench.rcb, paperbench.report"
cd - >/dev/null  # the installed command, run in the checkout (its papers)
"$VENV/bin/paperbench" --version
"$VENV/bin/paperbench" --help >/dev/null
"$VENV/bin/paperbench" papers list >/dev/null
"$VENV/bin/paperbench" rubric --help >/dev/null
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" pytest hypothesis
# (not tests/test_cli_flags.py: it reads click's type_descriptor, which typer has from 0.29)
PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/test_public_api.py tests/test_errors_tree.py \
    tests/llm/test_cache.py tests/llm/test_wire.py tests/rubric
echo "lowest direct versions: import, smoke commands and tests pass"

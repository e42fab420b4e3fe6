"""ResearchCodeBench task mode: fill-in snippets from a paper, graded by the paper's unit
test, line-weighted. Point it at a clone of ResearchCodeBench (its ``pset/`` folder)."""

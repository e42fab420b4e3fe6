"""The fixture problem set's own tests (``pset/*/paper2code_test.py``) are data, run by
``paperbench rcb`` in a paper folder; pytest must not collect them."""

collect_ignore_glob = ["pset/*"]

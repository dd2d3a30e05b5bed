"""The parser environments' closures: what each environment gets installed, in which order."""

from __future__ import annotations

from k2conform.resources import bundled
from k2conform.setup.parsers import K2CONFORM_CLOSURE, environments


def test_an_environment_of_its_own_gets_k2conforms_dependencies_first():
    """k2conform goes into each separate environment --no-deps, so its own imports (the
    tokenizer stand-in's tiktoken, the renderer's jinja2) come from k2conform.txt, installed
    before the parser's closure so the parser's pins win."""
    known = environments()
    assert known["parsers"].closure_files() == known["parsers"].requirements  # the project venv
    for name, environment in known.items():
        if environment.into_current:
            continue
        assert environment.closure_files()[0] == K2CONFORM_CLOSURE, name
        assert environment.closure_files()[1:] == environment.requirements, name
    pins = {
        line.split("==")[0].lower()
        for line in (bundled("requirements") / K2CONFORM_CLOSURE).read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {"jinja2", "tiktoken", "regex"} <= pins


def test_every_closure_file_named_by_an_environment_exists():
    for name, environment in environments().items():
        for closure in environment.closure_files():
            assert (bundled("requirements") / closure).is_file(), (name, closure)

"""Standalone reproduction scripts for ``k2conform report-finding``: real modules, one
driver per parser, joined into one file per finding.

A script is meant to be pasted into a bug report for the parser's maintainers: it imports
only the parser's own package and the standard library.  :func:`build_script` makes it from
the source text of these modules (never importing them, so building a vLLM script does not
import vLLM): the case's data, :mod:`~k2conform_adapters.repro.shared` (the ``Case``, stream
reassembly, k2conform's own comparison inlined from its source, the ``main``), the driver,
and ``main(run, CASE, EXPECTED)``.  The script prints the expected and the observed message
and exits 1 when they differ or the parser raised (the bug reproduces), 0 when not; its last
line is the observed message as JSON (``{"crash": "Type: message"}`` when the parser
raised), which ``report-finding`` reads back.

Writing a driver for another parser (``repro/NAME.py``, built with
``build_script("NAME", ...)``):

* the module docstring's first line is the parser's name as the script's title says it, the
  rest says how the script drives it (both go into the script's docstring);
* ``PACKAGE = "..."`` is the distribution to install to run the script;
* one driver serves an engine's Kimi formats: ``case.format`` (``"k2"``, ``"k3"``) says which
  parser to compose (``repro/vllm.py``, ``repro/sglang.py``); a K3 case's ``special_tokens``
  hold K3's four and ``encoded`` the ids of the texts a parser encodes itself
  (``build.ENCODED``);
* ``def run(case: Case) -> dict`` drives the parser exactly as its server does (the same
  steps as the k2conform adapter) and returns ``{"content", "reasoning", "tool_calls":
  [{"id", "name", "arguments"}]}``; ``case.mode == "whole"`` is the one-shot API, any other
  mode streams ``case.deltas`` (``[text, token ids]`` each) in order; streamed delta
  messages go through ``assemble(events)`` (each event ``{"content", "reasoning",
  "tool_calls": [{"index", "id", "name", "arguments"}]}``);
* imports: the parser's package and the standard library, plus names from
  ``k2conform_adapters.repro.shared`` (``Case``, ``assemble``, ``KimiVocabulary``,
  ``openai_calls``, ``openai_call_deltas``): the script has that module's code, so those
  imports are dropped, and all others are hoisted to the script's top.  No relative imports,
  nothing else of k2conform;
* every module-level name is the driver's own: a name the shared module defines too is an
  error when the script is built.  Loading a parser by file path goes in a function whose
  result is a module-level name (``rust = load_extension()``), so importing the driver
  needs the parser, as importing any driver does;
* the adapter's ``repro_script`` body is one call of :func:`build_script`.  The driver is
  linted like the rest (ruff), every driver's script must pass pyflakes, and a known
  finding of the parser plus an agreeing cell go into ``CELLS`` (and the driver into
  ``DRIVERS``) of ``tests/test_repro_scripts.py``, which runs the script on both (exit 1
  with the adapter's own result on the last line; exit 0).
"""

from k2conform_adapters.repro.build import build_script

__all__ = ["build_script"]

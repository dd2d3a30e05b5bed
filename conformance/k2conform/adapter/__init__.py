"""Stage 3, the adapters: the contract, the registry, the harness that runs one parse,
and the adapter protocol's server side."""

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    GrammarUse,
    ParserCrash,
    RequestRefused,
    StreamStep,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)

__all__ = [
    "Adapter",
    "AdapterGlueError",
    "AdapterUnavailable",
    "GrammarUse",
    "ParserCrash",
    "RequestRefused",
    "StreamStep",
    "call_parser",
    "glue_imports",
    "import_parser_package",
    "require_api",
]

"""An example k2conform adapter plugin: ``tinyparser`` (the parser) and ``adapter`` (the glue)."""

__version__ = "0.1.0"

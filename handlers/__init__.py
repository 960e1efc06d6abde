"""Kopf glue: thin handlers that wire the watch, the runtime and the pure core together."""

from handlers import configuring, pods, startup  # noqa: F401  (importing registers the handlers)

"""kopflet's entry point: ``kopf run --standalone --all-namespaces operator/main.py``.

A script, not a package: this folder must never get an ``__init__.py``, or it would shadow the
standard library's ``operator`` module. Importing ``handlers`` registers every Kopf handler.
"""

import handlers  # noqa: F401

"""kopflet's core: pure logic (config, and later the reconciler and status) with no I/O."""

__version__ = "0.1.0"

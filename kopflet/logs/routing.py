"""Where the agent's log lines go: component-base's output routing (``logging.options.{text,json}``).

Without ``splitStream`` both formats write every line to stderr (upstream's text factory writes to
``LoggingOptions.ErrorStream``, the json factory gives zap stderr alone). With it, info lines go to stdout and the
rest to stderr, split as each of upstream's formats splits them:

- ``text``: klog's text logger writes the klog header's severity letter first, and upstream's ``klogMsgRouter``
  sends the lines starting with ``I`` to the info stream, every other one (``W``, ``E``, ``F``) to the error stream:
  INFO and the V levels below it go to stdout, WARNING and above to stderr;
- ``json``: zap's tee sends levels below ``ErrorLevel`` to the info stream and the rest to the error stream; klog's
  Warning is an Info call of the logr logger under this format (logr has no warning level): INFO, the V levels and
  WARNING go to stdout, ERROR and CRITICAL to stderr.

``infoBufferSize`` buffers the info stream when positive (upstream ignores zero and a negative size), capped at
2 GiB as both factories cap it ("Prevent integer overflow"). The buffer is flushed by klog's flush daemon every
``flushFrequency`` (the factories' RuntimeControl.Flush, which ``klog.Flush`` calls) and at exit
(``logs.FlushLogs``); zap's BufferedWriteSyncer also flushes itself every 30 s, so a json buffer waits at most the
shorter of the two.

Pure: levels and settings in, decisions out.
"""

from __future__ import annotations

import logging
from typing import Final

INFO: Final = "info"
"""The info stream: stdout (logsapi.LoggingOptions.InfoStream)."""
ERROR: Final = "error"
"""The error stream: stderr (logsapi.LoggingOptions.ErrorStream)."""
MAX_BUFFER: Final = 2 * 1024 * 1024 * 1024
"""Both factories' cap on infoBufferSize."""
ZAP_FLUSH_INTERVAL: Final = 30.0
"""zapcore.BufferedWriteSyncer's default FlushInterval: the json info buffer's own flush, besides klog's."""


def stream_of(log_format: str, levelno: int, split_stream: bool) -> str:
    """The stream a record of this level is written to (`INFO` or `ERROR`)."""
    if not split_stream:
        return ERROR
    threshold = logging.ERROR if log_format == "json" else logging.WARNING
    return ERROR if levelno >= threshold else INFO


def buffer_size(split_stream: bool, info_buffer_bytes: int) -> int:
    """Bytes the info stream buffers: 0 (each line written at once) without splitStream or with a size of 0 or
    less; else the size, at most `MAX_BUFFER`."""
    if not split_stream or info_buffer_bytes <= 0:
        return 0
    return min(info_buffer_bytes, MAX_BUFFER)


def flush_period(log_format: str, flush_frequency: float) -> float:
    """How often a buffered info stream is flushed: klog's flush daemon's ``flushFrequency``; for json no longer
    than zap's own `ZAP_FLUSH_INTERVAL`."""
    return min(flush_frequency, ZAP_FLUSH_INTERVAL) if log_format == "json" else flush_frequency


__all__ = ["ERROR", "INFO", "MAX_BUFFER", "ZAP_FLUSH_INTERVAL", "buffer_size", "flush_period", "stream_of"]

"""CRI container log files: format, options, reading and following (upstream cri-client/pkg/logs)."""

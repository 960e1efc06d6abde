"""Node-pressure eviction (upstream `pkg/kubelet/eviction`).

`thresholds` parses and defaults the eviction settings, `helpers` decides (thresholds met, node conditions,
ranking, messages, admission), both pure; `signals` measures the host; `manager` runs the rounds.
"""

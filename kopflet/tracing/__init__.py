"""Pod start traces over OTLP (upstream KubeletTracing; component-base/tracing)."""

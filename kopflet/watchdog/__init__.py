"""The systemd watchdog (upstream pkg/kubelet/watchdog): ``WATCHDOG=1`` to ``$NOTIFY_SOCKET`` at half of
``$WATCHDOG_USEC``, only while the agent's health checks pass."""

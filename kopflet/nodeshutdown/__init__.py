"""Graceful node shutdown: upstream's ``pkg/kubelet/nodeshutdown`` (and its ``systemd`` package).

The node shutdown manager holds a systemd-logind "delay" inhibitor lock; when logind announces the shutdown
(``PrepareForShutdown(true)``) it refuses new pods, reports the node not Ready, terminates the running pods group
by group by priority (``shutdownGracePeriodByPodPriority``, or the two groups of ``shutdownGracePeriod`` and
``shutdownGracePeriodCriticalPods``), then releases the lock so the shutdown goes on.

`rules` is the pure half: the grace period groups, which pod goes in which, the status a terminated pod gets,
the admission refusal, and the texts and file contents upstream writes (logind's override, the state file).
"""

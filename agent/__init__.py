"""The agent's I/O edge: apiserver client, events, pod workers, the executor of PodActions, the runtime
relist, node heartbeats. It carries out what the pure core in ``kopflet`` decides."""

"""The CPU manager's pure core: cpusets, the CPU topology, upstream's packed allocation, the static policy and
its ``cpu_manager_state`` checkpoint (pkg/kubelet/cm/cpumanager at Kubernetes v1.37.1)."""

"""The memory manager's pure core: the Static policy's NUMA memory blocks and its ``memory_manager_state``
checkpoint (pkg/kubelet/cm/memorymanager at Kubernetes v1.37.1)."""

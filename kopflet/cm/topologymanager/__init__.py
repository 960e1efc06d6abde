"""The topology manager's pure core: NUMA bitmasks, the hint merge of each policy, the scopes' admission
(pkg/kubelet/cm/topologymanager at Kubernetes v1.37.1)."""

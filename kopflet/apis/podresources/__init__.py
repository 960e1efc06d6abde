"""The pod-resources API (upstream pkg/kubelet/apis/podresources): which node resources the pods hold, over gRPC
on ``<root-dir>/pod-resources/kubelet.sock``."""

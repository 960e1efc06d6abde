"""The device plugin manager (pkg/kubelet/cm/devicemanager at Kubernetes v1.37.1): the rules in `devices` and
`checkpoint` (pure), the Registration server, the plugin clients and the checkpoint file in `manager` (I/O), and
the device plugin API v1beta1 generated in `proto`."""

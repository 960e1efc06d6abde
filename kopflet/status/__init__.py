"""Pod status: generateAPIPodStatus and the status patch (upstream pkg/kubelet/status)."""

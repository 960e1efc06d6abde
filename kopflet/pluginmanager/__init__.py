"""The kubelet plugin manager (upstream pkg/kubelet/pluginmanager at v1.37.1): plugins (CSI drivers, through their
node-driver-registrar) put a socket in ``<root-dir>/plugins_registry``, the agent finds it, asks the plugin's
Registration service what it is, hands it to the handler of its type and tells the plugin how that went. The
registration API v1 is generated in `proto`."""

"""Generated: the pod-resources API's protobuf and gRPC stubs (``generate.sh``), v1 and v1alpha1."""

"""
The pinned kubelet plugin registration API (v1): `api.proto` vendored from the k8s.io/kubelet Go module
(pkg/apis/pluginregistration/v1) and the code generated from it (`api_pb2`, `api_pb2_grpc`, `api_pb2.pyi`).
Regenerate with `kopflet/pluginmanager/proto/generate.sh`; never edit by hand.
"""

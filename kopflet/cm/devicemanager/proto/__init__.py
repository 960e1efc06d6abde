"""
The pinned device plugin API (v1beta1): `api.proto` vendored from the k8s.io/kubelet Go module and the code
generated from it (`api_pb2`, `api_pb2_grpc`, `api_pb2.pyi`). Regenerate with
`kopflet/cm/devicemanager/proto/generate.sh`; never edit by hand.
"""

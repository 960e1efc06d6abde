"""
The pinned Container Storage Interface spec: `csi.proto` vendored from the Go module
github.com/container-storage-interface/spec at the version k8s.io/kubernetes' go.mod requires, and the code
generated from it (`csi_pb2`, `csi_pb2_grpc`, `csi_pb2.pyi`). Regenerate with
`kopflet/volumes/csi/proto/generate.sh`; never edit by hand.
"""

"""
The pinned CRI v1 API: `api.proto` vendored from the k8s.io/cri-api Go module and the code generated
from it (`api_pb2`, `api_pb2_grpc`, `api_pb2.pyi`). Regenerate with `cri_client/proto/generate.sh`;
never edit by hand.
"""

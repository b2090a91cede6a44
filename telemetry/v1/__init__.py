"""Generated protobuf and gRPC code (scripts/gen_proto.py). Do not edit."""

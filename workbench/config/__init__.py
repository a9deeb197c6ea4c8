"""Model configuration through Triton's own protobuf schema."""

"""redq's gRPC stubs, generated from proto/redq/v1 by clients/python/generate.py; do not edit."""

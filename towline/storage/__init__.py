"""Payload storage: large payloads kept outside the history (file, S3, GCS)."""

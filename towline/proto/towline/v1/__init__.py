"""Protobuf package ``towline.v1``: the run ledger (``ledger_pb2.RunCounters``)."""

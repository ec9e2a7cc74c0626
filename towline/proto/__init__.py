"""Protobuf sources and generated code for towline's persisted formats."""

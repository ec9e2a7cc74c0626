"""Encryption at rest: the payload codec and the codec server the Temporal UI uses."""

"""The worker runtime: the plugin, registry, converter, ledger, search attributes, request chain, fingerprint, heap, dependencies and instructions functions."""

"""The modules towline passes through Temporal's workflow sandbox (imported once, shared by
every workflow instance, not re-imported per run): towline itself and the pure libraries its
workflow code uses.

The worker's sandbox runner (`towline.runtime.plugin`) passes them through, and the hook guard
(`towline.workflows.watchlist`) does not watch their calls, since the engine runs them inside
user hooks too. One list for both, in a module of its own that imports nothing, so the guard
needs no import of the plugin, which imports the workflows.
"""

__all__ = ["PASSTHROUGH_MODULES"]

PASSTHROUGH_MODULES = (
    "towline", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
    "typing_inspection", "google.protobuf", "opentelemetry",
    # MCP tools validate their arguments with jsonschema in the workflow (pure computation),
    # matching their patterns with RE2 (`towline.runtime.json_schemas`).
    "jsonschema", "jsonschema_specifications", "referencing", "rpds", "attrs", "attr", "re2",
)

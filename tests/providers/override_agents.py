"""An agent whose own model is offline, for the `--model` override tests (CLI and client)."""

from __future__ import annotations

from towline import Agent
from towline.models import FunctionModel

agent = Agent(name="prov-override", model=FunctionModel(lambda messages, info: "offline answer",
                                                        model_name="prov-override-offline"))

"""The native-tool recordings (issue 33), for `scripts/record_history.py`,
`tests/test_replay.py` and `tests/test_native_recordings.py`.

- `history-native-paused`: an agent with native tools whose offline model searches (native
  tool parts, a citation), pauses its turn (`Suspended(pause_turn)`), is continued within
  the same step (two model requests of step 1), runs code and calls a function tool, then
  answers: the commands of a paused turn's continuation;
- `history-native-background`: a background model call (`ModelSettings.background`), started,
  then polled between durable timers (`towline.model_poll` after each timer) until it is done.

The models are offline and deterministic: a `FunctionModel`, and `OfflineBackground`, a model
with the background protocol (`towline.models.BackgroundModel`) that finishes on its second poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity

from towline import Agent, CodeExecution, ModelSettings, WebSearch, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    Suspended,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["NATIVE_AGENTS", "paused_agent", "background_agent", "OfflineBackground", "native_script"]

PROVIDER = "offline"
"""The family of the offline model's native parts (sent to no real provider)."""


@tool
def double4(n: int) -> int:
    """Double a number."""
    return 2 * n


def native_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Search (and pause), go on with code and a call, then answer citing the search."""
    last = messages[-1]
    if isinstance(last, ModelResponse):  # a paused turn, sent back to be continued
        return ModelResponse(parts=[
            NativeToolCallPart(tool_name="code_execution", args={"code": "print(21)"},
                               tool_call_id="native4_code", provider=PROVIDER,
                               provider_data={"type": "code", "id": "native4_code"}),
            NativeToolReturnPart(tool_name="code_execution", tool_call_id="native4_code",
                                 content={"stdout": "21\n"}, provider=PROVIDER),
            ToolCallPart(tool_name="double4", args={"n": 21}, tool_call_id="native4_double"),
        ], finish_reason="tool_calls", usage=Usage(requests=1, input_tokens=12, output_tokens=4,
                                                   native_tool_uses={"code_execution": 1}))
    if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
        return ModelResponse(parts=[TextPart(content="21 doubled is 42.", citations=[
            {"type": "search", "url": "https://example.com/doubling"}])])
    return ModelResponse(parts=[
        NativeToolCallPart(tool_name="web_search", args={"query": "doubling"}, tool_call_id="native4_search",
                           provider=PROVIDER, provider_data={"type": "search", "id": "native4_search"}),
        NativeToolReturnPart(tool_name="web_search", tool_call_id="native4_search", provider=PROVIDER,
                             content=[{"title": "Doubling", "url": "https://example.com/doubling"}]),
        TextPart(content="Searching, then computing."),
    ], suspended=Suspended(reason="pause_turn", provider=PROVIDER),
        usage=Usage(requests=1, input_tokens=10, output_tokens=5, native_tool_uses={"web_search": 1}))


paused_agent = Agent(
    name="history-native-paused",
    model=FunctionModel(native_script, model_name="history-native-model"),
    tools=[double4], native_tools=[WebSearch(), CodeExecution()],
)


@dataclass(frozen=True)
class OfflineBackground:
    """An offline model in background mode: `request` starts a response, the first `poll` says
    it is still running, the second answers."""

    model_name: str = "history-native-background-model"

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        if not info.settings.background:
            return ModelResponse(parts=[TextPart(content="(not in the background)")])
        run = activity.info().workflow_id  # one response per run and step
        return ModelResponse(suspended=Suspended(reason="background", provider=PROVIDER,
                                                 response_id=f"bg-{run}-{info.run_step}", status="queued"),
                             usage=Usage(requests=1))

    async def poll(self, response_id: str, info: ModelInfo) -> ModelResponse:
        _POLLS[response_id] = _POLLS.get(response_id, 0) + 1
        if _POLLS[response_id] < 2:
            return ModelResponse(suspended=Suspended(reason="background", provider=PROVIDER,
                                                     response_id=response_id, status="in_progress"),
                                 usage=Usage(requests=1))
        return ModelResponse(parts=[TextPart(content="Researched in the background.")],
                             usage=Usage(requests=1, input_tokens=30, output_tokens=9))

    async def cancel(self, response_id: str) -> None:
        _POLLS.pop(response_id, None)


_POLLS: dict[str, int] = {}
"""Polls per background response (the offline model's only state, on the worker)."""

background_agent = Agent(
    name="history-native-background", model=OfflineBackground(),
    settings=ModelSettings(background=True),
    model_poll_interval=timedelta(milliseconds=100), model_poll_max_interval=timedelta(milliseconds=200),
)

NATIVE_AGENTS = [paused_agent, background_agent]
"""The agents of the native-tool recordings."""

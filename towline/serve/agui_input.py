"""The messages of an AG-UI `RunAgentInput` as towline reads them: the user's text, and the
conversation before it as a run's message history. Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from ag_ui.core import AssistantMessage, Message, UserMessage
from ag_ui.core import TextPart as AgTextPart

from towline.messages import Message as TowlineMessage
from towline.messages import ModelRequest, ModelResponse, TextPart, UserPart

__all__ = ["InputError", "content_text", "user_text", "history"]


class InputError(ValueError):
    """A `RunAgentInput` towline cannot run (said to the client as a 422)."""


def content_text(content: str | Sequence[object]) -> str:
    """The text of a message's content: a string, or parts that must all be text."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if not isinstance(part, AgTextPart):
            raise InputError("only text messages are supported (got a "
                             f"{getattr(part, 'type', 'non-text')} part)")
        texts.append(part.text)
    return "\n".join(texts)


def user_text(messages: Sequence[Message]) -> str:
    """The text of the conversation's last message, which must be the user's."""
    if not messages or not isinstance(messages[-1], UserMessage):
        raise InputError("the last message must be the user's (role 'user')")
    text = content_text(messages[-1].content)
    if not text.strip():
        raise InputError("the user's message is empty")
    return text


def history(messages: Sequence[Message]) -> list[TowlineMessage]:
    """The earlier messages of a conversation (all but the last) as a run's message history:
    user and assistant text (tool calls and other roles are left out)."""
    out: list[TowlineMessage] = []
    for m in messages[:-1]:
        if isinstance(m, UserMessage):
            text = content_text(m.content)
            if text.strip():
                out.append(ModelRequest(parts=[UserPart(content=text)]))
        elif isinstance(m, AssistantMessage) and m.content:
            out.append(ModelResponse(parts=[TextPart(content=m.content)]))
    return out

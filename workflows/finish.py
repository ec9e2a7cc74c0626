"""What a run does with an answer its provider marked filtered or unusable.

The turn's hooks have seen the answer first (`after_model_request` may replace it,
`after_model` may jump), so this runs only on the effective response, when no hook
redirected the run:

- `content_filter` (Gemini's `SAFETY`, `MODEL_ARMOR`, a blocked prompt, ...;
  Anthropic's `refusal`; OpenAI's `content_filter` or a refusal): the run ends with
  `ContentFiltered`, naming the provider's own reason. Asking again would get the same
  refusal, billed again; the answer is kept in the partial run and its usage in the ledger.
- `error` (Gemini's `MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`, ...): the model is
  told what the provider said and asked again, as for an invalid output (one of the run's
  `output_retries`; `OutputRetriesExhausted` past them). None of the answer's calls runs.
"""

from __future__ import annotations

from typing import Any

from towline.errors import ContentFiltered
from towline.messages import ModelResponse

from .output import CONTINUE, output_retry
from .run import Run

__all__ = ["UNUSABLE", "unusable_answer", "provider_reason"]

UNUSABLE = frozenset({"content_filter", "error"})
"""The normalised finish reasons whose answer is neither an output nor calls to run."""

_DETAIL_KEYS = ("finish_reason", "block_reason", "stop_reason", "status", "incomplete_reason",
                "error_code")
_MESSAGE_KEYS = ("finish_message", "block_reason_message", "refusal")


def provider_reason(response: ModelResponse) -> str:
    """The provider's own words for how `response` ended: `SAFETY`, `prompt blocked:
    MODEL_ARMOR: The prompt violated ...`, `refusal`; or the normalised reason when the
    provider gave none."""
    details = response.provider_details
    reasons = [f"{k}={details[k]}" if k == "status" else details[k]
               for k in _DETAIL_KEYS if details.get(k)]
    if "block_reason" in details:
        reasons.insert(0, "prompt blocked")
    text = ": ".join(reasons) or str(response.finish_reason)
    said = next((details[k] for k in _MESSAGE_KEYS if details.get(k)), None)
    return f"{text}: {said[:500]}" if said else text


def unusable_answer(run: Run, response: ModelResponse) -> Any:
    """End the run with `ContentFiltered`, or record a retry the model sees (`CONTINUE`)."""
    reason = provider_reason(response)
    if response.finish_reason == "content_filter":
        raise ContentFiltered(f"model {response.model_name or run.model!r} answered "
                              f"{response.finish_reason} ({reason})")
    run.conversation.close_unpaired(f"not executed: the provider reported the response unusable ({reason})")
    output_retry(run, f"your last response could not be used: {reason}. Answer again: call "
                      f"the tools you need with valid arguments, or answer with text")
    return CONTINUE

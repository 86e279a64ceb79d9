"""Every row `examples.eval_policies:base` can reach, one test each (generated; edit freely).

Written by `statemachine-agent testgen examples.eval_policies:base -o
tests/generated/test_eval_policies_rows.py`. Each test plays its row's witness
(`statemachine_agent.testing.witnesses`): the shortest scenario that fires the row, through
`ScriptedModel`-style scripted replies, each request checked by the strict validator, with
the agent's tools stubbed by name. `run` raises `AssertionError` unless the row fired; the
test then checks the end state. Write the file again when the agent or the table changes.
"""

from __future__ import annotations

from examples.eval_policies import base
from statemachine_agent.testing import witnesses

WITNESSES = {witness.name: witness for witness in witnesses(base)}


def test_perceive_prepared_cancel_requested_cancelled() -> None:
    """perceive --prepared [cancel_requested]--> cancelled.

    The host asked to cancel; no further model call.

    Scenario: no answer; the host cancels before the run starts.
    """
    result = WITNESSES["perceive_prepared_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_perceive_prepared_budget_exceeded_budget_exhausted() -> None:
    """perceive --prepared [budget_exceeded]--> budget_exhausted.

    A limit (iterations, cost, tokens, time, refused tool calls) is reached.

    Scenario: the model answers a call of find_order, text (end_turn); with budget changed.
    """
    result = WITNESSES["perceive_prepared_budget_exceeded_budget_exhausted"].run()
    assert result.end_state == "budget_exhausted"


def test_perceive_prepared_steering_waiting_perceive() -> None:
    """perceive --prepared [steering_waiting]--> perceive.

    Messages steered into the run (Agent.steer) wait: add them to the latest user turn, then
    build the request again.

    Scenario: the model answers a call of find_order, text (end_turn); the host steers the run
    as it enters reason.
    """
    result = WITNESSES["perceive_prepared_steering_waiting_perceive"].run()
    assert result.end_state == "completed"


def test_perceive_prepared_reason() -> None:
    """perceive --prepared--> reason.

    The request is ready and the budget allows one more model call.

    Scenario: the model answers text (end_turn).
    """
    result = WITNESSES["perceive_prepared_reason"].run()
    assert result.end_state == "completed"


def test_reason_replied_cancel_requested_cancelled() -> None:
    """reason --replied [cancel_requested]--> cancelled.

    Cancelled while the model was answering; the reply is kept.

    Scenario: the model answers text (end_turn); the host cancels as reply 1 comes back.
    """
    result = WITNESSES["reason_replied_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_reason_replied_is_tool_use_act() -> None:
    """reason --replied [is_tool_use]--> act.

    The model asked for tools.

    Scenario: the model answers a call of find_order, text (end_turn).
    """
    result = WITNESSES["reason_replied_is_tool_use_act"].run()
    assert result.end_state == "completed"


def test_reason_replied_is_empty_reply_failed() -> None:
    """reason --replied [is_empty_reply]--> failed.

    The reply had neither text nor tool calls.

    Scenario: the model answers an empty reply (end_turn).
    """
    result = WITNESSES["reason_replied_is_empty_reply_failed"].run()
    assert result.end_state == "failed"


def test_reason_replied_is_end_turn_completed() -> None:
    """reason --replied [is_end_turn]--> completed.

    The model ended its turn (end_turn or stop_sequence) without tool calls.

    Scenario: the model answers text (end_turn).
    """
    result = WITNESSES["reason_replied_is_end_turn_completed"].run()
    assert result.end_state == "completed"


def test_reason_replied_is_max_tokens_output_below_limit_truncated() -> None:
    """reason --replied [is_max_tokens & output_below_limit]--> truncated.

    The reply stopped at max_tokens with fewer output tokens than that limit: the context window
    ran out, not the output limit; a cut-off tool call is never run.

    Scenario: the model answers text (max_tokens).
    """
    result = WITNESSES["reason_replied_is_max_tokens_output_below_limit_truncated"].run()
    assert result.end_state == "truncated"


def test_reason_replied_is_max_tokens_truncated() -> None:
    """reason --replied [is_max_tokens]--> truncated.

    The output hit max_tokens; a cut-off tool call is never run.

    Scenario: the model answers text (max_tokens).
    """
    result = WITNESSES["reason_replied_is_max_tokens_truncated"].run()
    assert result.end_state == "truncated"


def test_reason_replied_is_refusal_refused() -> None:
    """reason --replied [is_refusal]--> refused.

    The model refused; the API's stop details are kept.

    Scenario: the model answers an empty reply (refusal).
    """
    result = WITNESSES["reason_replied_is_refusal_refused"].run()
    assert result.end_state == "refused"


def test_reason_replied_is_pause_turn_perceive() -> None:
    """reason --replied [is_pause_turn]--> perceive.

    A server tool paused the turn; send the reply back to let it continue.

    Scenario: the model answers text (pause_turn), text (end_turn).
    """
    result = WITNESSES["reason_replied_is_pause_turn_perceive"].run()
    assert result.end_state == "completed"


def test_reason_replied_is_compaction_perceive() -> None:
    """reason --replied [is_compaction]--> perceive.

    Server-side compaction summarized the history and paused; the reply (its compaction block)
    is kept and the loop goes on.

    Scenario: the model answers an empty reply (compaction), text (end_turn).
    """
    result = WITNESSES["reason_replied_is_compaction_perceive"].run()
    assert result.end_state == "completed"


def test_reason_replied_is_context_exceeded_can_compact_compact() -> None:
    """reason --replied [is_context_exceeded & can_compact]--> compact.

    The context window filled up; drop the cut reply, compact once and retry.

    Scenario: the model answers text (model_context_window_exceeded), text (end_turn).
    """
    result = WITNESSES["reason_replied_is_context_exceeded_can_compact_compact"].run()
    assert result.end_state == "completed"


def test_reason_replied_is_context_exceeded_context_overflow() -> None:
    """reason --replied [is_context_exceeded]--> context_overflow.

    The context window was exceeded even after compaction.

    Scenario: the model answers text (model_context_window_exceeded), text
    (model_context_window_exceeded).
    """
    result = WITNESSES["reason_replied_is_context_exceeded_context_overflow"].run()
    assert result.end_state == "context_overflow"


def test_reason_replied_failed() -> None:
    """reason --replied--> failed.

    Any other stop_reason is unknown to the engine: stop rather than guess.

    Scenario: the model answers text (tool_use).
    """
    result = WITNESSES["reason_replied_failed"].run()
    assert result.end_state == "failed"


def test_reason_model_failed_cancel_requested_cancelled() -> None:
    """reason --model_failed [cancel_requested]--> cancelled.

    The in-flight model call was cancelled by the host.

    Scenario: no answer; the host cancels as the run enters reason.
    """
    result = WITNESSES["reason_model_failed_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_reason_model_failed_is_context_error_can_compact_compact() -> None:
    """reason --model_failed [is_context_error & can_compact]--> compact.

    The API rejected the prompt as too long; compact once and retry.

    Scenario: the model answers an API error 400, text (end_turn).
    """
    result = WITNESSES["reason_model_failed_is_context_error_can_compact_compact"].run()
    assert result.end_state == "completed"


def test_reason_model_failed_is_context_error_context_overflow() -> None:
    """reason --model_failed [is_context_error]--> context_overflow.

    The prompt is still too long after compaction.

    Scenario: the model answers an API error 400, an API error 400.
    """
    result = WITNESSES["reason_model_failed_is_context_error_context_overflow"].run()
    assert result.end_state == "context_overflow"


def test_reason_model_failed_failed() -> None:
    """reason --model_failed--> failed.

    The API call failed for good (4xx, or retries and fallbacks exhausted).

    Scenario: the model answers an API error 401.
    """
    result = WITNESSES["reason_model_failed_failed"].run()
    assert result.end_state == "failed"


def test_act_tools_done_cancel_requested_cancelled() -> None:
    """act --tools_done [cancel_requested]--> cancelled.

    Cancelled while tools ran; their outcomes are kept.

    Scenario: the model answers a call of find_order; the host cancels as the run enters act.
    """
    result = WITNESSES["act_tools_done_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_act_tools_done_observe() -> None:
    """act --tools_done--> observe.

    Every tool call has an outcome (errors included).

    Scenario: the model answers a call of find_order, text (end_turn).
    """
    result = WITNESSES["act_tools_done_observe"].run()
    assert result.end_state == "completed"


def test_observe_observed_cancel_requested_cancelled() -> None:
    """observe --observed [cancel_requested]--> cancelled.

    Cancelled after the tool results were recorded.

    Scenario: the model answers a call of find_order; the host cancels as the run enters
    observe.
    """
    result = WITNESSES["observe_observed_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_observe_observed_perceive() -> None:
    """observe --observed--> perceive.

    Go round again with the tool results in the history.

    Scenario: the model answers a call of find_order, text (end_turn).
    """
    result = WITNESSES["observe_observed_perceive"].run()
    assert result.end_state == "completed"


def test_compact_compacted_cancel_requested_cancelled() -> None:
    """compact --compacted [cancel_requested]--> cancelled.

    Cancelled during compaction.

    Scenario: the model answers an API error 400; the host cancels as the run enters compact.
    """
    result = WITNESSES["compact_compacted_cancel_requested_cancelled"].run()
    assert result.end_state == "cancelled"


def test_compact_compacted_perceive() -> None:
    """compact --compacted--> perceive.

    Old tool results are placeholders now; the request is built again, smaller.

    Scenario: the model answers an API error 400, text (end_turn).
    """
    result = WITNESSES["compact_compacted_perceive"].run()
    assert result.end_state == "completed"


def test_cancelled_resumed_cancelled_before_reply_perceive() -> None:
    """cancelled --resumed [cancelled_before_reply]--> perceive.

    Cancelled before the model answered: build the request again and call it.

    Scenario: no answer; the host cancels before the run starts; the host resumes it 1x,
    approving what is pending; then the model answers text (end_turn).
    """
    result = WITNESSES["cancelled_resumed_cancelled_before_reply_perceive"].run()
    assert result.end_state == "completed"


def test_cancelled_resumed_cancelled_after_reply_reason() -> None:
    """cancelled --resumed [cancelled_after_reply]--> reason.

    Cancelled with the reply in hand: decide on the kept reply as if just received.

    Scenario: the model answers text (end_turn); the host cancels as reply 1 comes back; the
    host resumes it 1x, approving what is pending.
    """
    result = WITNESSES["cancelled_resumed_cancelled_after_reply_reason"].run()
    assert result.end_state == "completed"


def test_cancelled_resumed_cancelled_in_act_act() -> None:
    """cancelled --resumed [cancelled_in_act]--> act.

    Cancelled while tools ran: act runs only the calls without a recorded outcome.

    Scenario: the model answers a call of find_order; the host cancels as the run enters act;
    the host resumes it 1x, approving what is pending; then the model answers text (end_turn).
    """
    result = WITNESSES["cancelled_resumed_cancelled_in_act_act"].run()
    assert result.end_state == "completed"


def test_cancelled_resumed_cancelled_in_observe_observe() -> None:
    """cancelled --resumed [cancelled_in_observe]--> observe.

    Cancelled after observe had done its work: carry on from its outcome.

    Scenario: the model answers a call of find_order, text (end_turn); the host cancels as the
    run enters observe; the host resumes it 1x, approving what is pending.
    """
    result = WITNESSES["cancelled_resumed_cancelled_in_observe_observe"].run()
    assert result.end_state == "completed"


def test_cancelled_resumed_cancelled_in_compact_compact() -> None:
    """cancelled --resumed [cancelled_in_compact]--> compact.

    Cancelled after compact had done its work: carry on from its outcome.

    Scenario: the model answers an API error 400; the host cancels as the run enters compact;
    the host resumes it 1x, approving what is pending; then the model answers text (end_turn).
    """
    result = WITNESSES["cancelled_resumed_cancelled_in_compact_compact"].run()
    assert result.end_state == "completed"

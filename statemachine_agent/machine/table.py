"""The transition table: the one place the agent loop's control flow is written.

The `transitions` machine, the diagrams under `diagrams/`, the state reference in
`docs/` and the test that every row is exercised are all generated from `ROWS`.

Reading it: a phase finishes and names a trigger; of the rows with that source
and trigger, the first whose guards all pass fires. Guarded rows therefore sit
above their fallback, and the order within a group is part of the contract:
cancellation first, then the budget, then the model's stop_reason, then finishing,
then the stall detector, then the reflection interval. A steered message is
delivered by a row of its own (`perceive` to `perceive`), so the trail names it.

Resuming is rows too: a paused or cancelled run leaves its end state by the
`resumed` trigger, and the row says where it carries on. A row may carry data for
the state it enters (`arrival`, `carry_on`); the phase obeys the row that fired
and never guesses why it was entered.
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine_agent.machine.ends import END_STATES as END_STATES  # the table's end states

WORKING_STATES: tuple[str, ...] = ("perceive", "reason", "act", "observe")
"""The four phases of the loop."""

HELPER_STATES: tuple[str, ...] = (
    "intervene",
    "reflect",
    "verify",
    "continue",
    "compact",
    "summarize",
    "commit",
)
"""Working states a configured feature (or a recoverable stop) routes through."""


STATES: tuple[str, ...] = WORKING_STATES + HELPER_STATES + END_STATES
INITIAL_STATE = "perceive"

RESERVED_STATES: dict[str, str] = {}
"""States declared for the contract but not yet reachable, with the reason."""


@dataclass(frozen=True, slots=True)
class Row:
    """One transition: from `source` on `trigger` to `dest` when all `guards` pass."""

    source: str
    trigger: str
    dest: str
    guards: tuple[str, ...] = ()
    description: str = ""
    arrival: str | None = None
    """An instruction this row gives the phase it enters (e.g. `drop_cut_reply`), so the
    phase obeys the row instead of re-deriving why it was entered."""
    carry_on: str | None = None
    """A trigger the engine fires on arrival instead of running the phase: the phase's
    work is already in the record (a resumed run whose phase had finished)."""
    reason: str | None = None
    """For a row into an end state: the run's `reason`, a template whose `{fields}` the
    end state's handler fills with figures from the record (`endings.FIGURES`). The row
    decides the cause; the handler never re-derives it, so a new row into `failed`
    carries its own reason. Without one, the reason is the row's description."""

    @property
    def end_reason(self) -> str:
        """The template of the reason a run ending by this row gives (see `reason`)."""
        if self.reason is not None:
            return self.reason
        clause = self.description.rstrip(".").replace("{", "{{").replace("}", "}}")
        if clause[1:2].islower():  # "The reply ..." reads "failed: the reply ..."
            clause = clause[0].lower() + clause[1:]
        return f"{self.dest}: {clause}"

    @property
    def key(self) -> tuple[str, str, str, tuple[str, ...]]:
        """What identifies a row: two rows may join the same states under other guards."""
        return (self.source, self.trigger, self.dest, self.guards)

    @property
    def label(self) -> str:
        """The edge label of diagrams: the trigger and its guards."""
        if not self.guards:
            return self.trigger
        return f"{self.trigger} [{' & '.join(self.guards)}]"


_CANCELLED = "cancelled by the host after {iteration} iterations,"
"""How every row into `cancelled` begins its reason; the rest says where the run was."""

ROWS: tuple[Row, ...] = (
    # perceive: the request is built; decide whether another model call may be made.
    Row("perceive", "prepared", "cancelled", ("cancel_requested",),
        "The host asked to cancel; no further model call.",
        reason=_CANCELLED + " before the next model call"),
    Row("perceive", "prepared", "budget_exhausted", ("budget_exceeded",),
        "A limit (iterations, cost, tokens, time, refused tool calls) is reached.",
        reason="budget exhausted: {budget}"),
    Row("perceive", "prepared", "perceive", ("steering_waiting",),
        "Messages steered into the run (Agent.steer) wait: add them to the latest user "
        "turn, then build the request again.",
        arrival="deliver_steering"),
    Row("perceive", "prepared", "summarize", ("summary_due",),
        "The prompt passed summarize_at_tokens: summarize older exchanges before the call."),
    Row("perceive", "prepared", "reason", (),
        "The request is ready and the budget allows one more model call."),
    # reason: one model call came back (or failed); its stop_reason decides.
    Row("reason", "replied", "cancelled", ("cancel_requested",),
        "Cancelled while the model was answering; the reply is kept.",
        reason=_CANCELLED + " while the model was answering (its reply is kept)"),
    Row("reason", "replied", "act", ("is_tool_use",),
        "The model asked for tools."),
    Row("reason", "replied", "failed", ("is_empty_reply",),
        "The reply had neither text nor tool calls.",
        reason="failed: the reply had neither text nor tool calls (stop_reason {stop_reason!r})"),
    Row("reason", "replied", "perceive", ("is_end_turn", "output_expected", "output_retry_left"),
        "A text answer where a typed one is expected: it counts against output_retries, "
        "and the model is told to answer by calling final_result.",
        arrival="ask_for_typed_answer"),
    Row("reason", "replied", "failed", ("is_end_turn", "output_expected"),
        "A text answer where a typed one is expected, with output_retries used up.",
        reason="failed: no valid final answer after {invalid_answers} tries "
               "(a typed answer is expected through final_result); last: {answer_errors}"),
    Row("reason", "replied", "verify", ("is_end_turn", "verifier_configured"),
        "The model claims it is done; the verifier checks the claim first."),
    Row("reason", "replied", "commit", ("is_end_turn", "calls_staged"),
        "The model is done and writes wait, staged: run them before the run completes."),
    Row("reason", "replied", "completed", ("is_end_turn",),
        "The model ended its turn (end_turn or stop_sequence) without tool calls.",
        reason="the model ended its turn ({stop_reason})"),
    Row("reason", "replied", "continue", ("is_max_tokens", "can_continue"),
        "A text reply hit max_tokens; ask the model to continue where it stopped."),
    Row("reason", "replied", "truncated", ("is_max_tokens", "output_below_limit"),
        "The reply stopped at max_tokens with fewer output tokens than that limit: the "
        "context window ran out, not the output limit; a cut-off tool call is never run.",
        reason="the reply was cut off by the model's context window in iteration {iteration}: "
               "{prompt_tokens} prompt + {output_tokens} output tokens, below "
               "max_tokens={max_tokens}{cut_tool_use} (raising max_tokens cannot help: shrink "
               "the history with ContextPolicy, or use a model with a larger window)"),
    Row("reason", "replied", "truncated", ("is_max_tokens",),
        "The output hit max_tokens; a cut-off tool call is never run.",
        reason="the reply was cut off at max_tokens={max_tokens} in iteration {iteration}"
               "{cut_tool_use} (raise max_tokens or ask for shorter steps)"),
    Row("reason", "replied", "refused", ("is_refusal",),
        "The model refused; the API's stop details are kept.",
        reason="the model refused to continue{refusal}"),
    Row("reason", "replied", "perceive", ("is_pause_turn",),
        "A server tool paused the turn; send the reply back to let it continue."),
    Row("reason", "replied", "perceive", ("is_compaction",),
        "Server-side compaction summarized the history and paused; the reply (its "
        "compaction block) is kept and the loop goes on."),
    Row("reason", "replied", "compact", ("is_context_exceeded", "can_compact"),
        "The context window filled up; drop the cut reply, compact once and retry.",
        arrival="drop_cut_reply"),
    Row("reason", "replied", "context_overflow", ("is_context_exceeded",),
        "The context window was exceeded even after compaction.",
        reason="the model's context window{window} was exceeded "
               "(last input {input_tokens} tokens, {messages} messages)"),
    Row("reason", "replied", "failed", (),
        "Any other stop_reason is unknown to the engine: stop rather than guess.",
        reason="failed: {unhandled_stop}; the engine stops rather than guess"),
    Row("reason", "model_failed", "cancelled", ("cancel_requested",),
        "The in-flight model call was cancelled by the host.",
        reason=_CANCELLED + " during a model call, which was abandoned"),
    Row("reason", "model_failed", "compact", ("is_context_error", "can_compact"),
        "The API rejected the prompt as too long; compact once and retry."),
    Row("reason", "model_failed", "context_overflow", ("is_context_error",),
        "The prompt is still too long after compaction.",
        reason="the prompt is too long for the model: {error}"),
    Row("reason", "model_failed", "failed", (),
        "The API call failed for good (4xx, or retries and fallbacks exhausted).",
        reason="failed: {error}"),
    # act: every tool call of the reply has an outcome.
    Row("act", "tools_done", "cancelled", ("cancel_requested",),
        "Cancelled while tools ran; their outcomes are kept.",
        reason=_CANCELLED + " while tools ran (their outcomes are kept)"),
    Row("act", "tools_done", "failed", ("tool_failed_fatally",),
        "A tool configured with on_error='fail' failed.",
        reason="failed: tool {tool!r} failed and is configured to end the run: {tool_error}"),
    Row("act", "tools_done", "failed", ("answer_retries_exhausted",),
        "The final answer failed validation more often than output_retries allows.",
        reason="failed: the final answer was rejected {invalid_answers} times; "
               "last: {answer_errors}"),
    Row("act", "tools_done", "awaiting_approval", ("taint_approval_pending",),
        "Untrusted text entered the run, and a side-effect call waits for a human "
        "(TaintPolicy side_effects='approve'); the run pauses, checkpointed, until resumed.",
        reason="waiting for approval of {pending_count} tool call(s): {pending_names} "
               "(asked after untrusted text from {tainted_by} entered the run)"),
    Row("act", "tools_done", "awaiting_approval", ("approval_pending",),
        "Calls wait for a human; the run pauses, checkpointed, until resumed.",
        reason="waiting for approval of {pending_count} tool call(s): {pending_names}"),
    Row("act", "tools_done", "observe", (),
        "Every tool call has an outcome (errors included)."),
    # observe: the results are in the history; continue or stop.
    Row("observe", "observed", "cancelled", ("cancel_requested",),
        "Cancelled after the tool results were recorded.",
        reason=_CANCELLED + " after the tool results were recorded"),
    Row("observe", "observed", "verify", ("finish_claims_success", "verifier_configured"),
        "finish(status='completed') is a claim; the verifier checks it first."),
    Row("observe", "observed", "commit", ("finish_claims_success", "calls_staged"),
        "finish(status='completed') with writes staged: run them before the run finishes."),
    Row("observe", "observed", "finished", ("finish_called",),
        "The model called the finish tool; its input is the structured result.",
        reason="the model called {finish_tool} with status {finish_status!r}"),
    Row("observe", "observed", "stalled", ("stall_persists",),
        "Still repeating itself after the allowed interventions.",
        reason="stalled: {stall} (pattern {stall_pattern}, after {interventions} interventions)"),
    Row("observe", "observed", "intervene", ("stall_detected",),
        "The model repeats itself; tell it so before going on."),
    Row("observe", "observed", "reflect", ("reflection_due",),
        "The reflection interval came round; review progress before going on."),
    Row("observe", "observed", "perceive", (),
        "Go round again with the tool results in the history."),
    # helper states: each adds a message for the model, then the loop goes on.
    Row("intervene", "intervened", "cancelled", ("cancel_requested",),
        "Cancelled during the intervention.",
        reason=_CANCELLED + " during an intervention"),
    Row("intervene", "intervened", "perceive", (),
        "The intervention (tool, pattern, count) is in the history."),
    Row("reflect", "reflected", "cancelled", ("cancel_requested",),
        "Cancelled during reflection.",
        reason=_CANCELLED + " during reflection"),
    Row("reflect", "reflected", "perceive", (),
        "The progress check or the critic's critique is in the history."),
    Row("verify", "verified", "cancelled", ("cancel_requested",),
        "Cancelled during verification.",
        reason=_CANCELLED + " during verification"),
    Row("verify", "verified", "commit", ("verdict_passed", "calls_staged"),
        "The verifier accepted the result and writes wait, staged: run them now."),
    Row("verify", "verified", "finished", ("verdict_passed", "finish_called"),
        "The verifier accepted the finish tool's result.",
        reason="the model called {finish_tool} with status {finish_status!r} "
               "and the verifier accepted the result"),
    Row("verify", "verified", "completed", ("verdict_passed",),
        "The verifier accepted the final answer.",
        reason="the model ended its turn ({stop_reason}) and the verifier accepted the answer"),
    Row("verify", "verified", "failed", ("rejections_exhausted",),
        "The verifier rejected the claim too often; the last feedback is the reason.",
        reason="failed: the verifier rejected the result {rejections} times; last: {feedback}"),
    Row("verify", "verified", "perceive", (),
        "The verifier rejected the claim; its feedback goes back to the model."),
    Row("continue", "continued", "cancelled", ("cancel_requested",),
        "Cancelled before the continuation was asked for.",
        reason=_CANCELLED + " before the continuation was asked for"),
    Row("continue", "continued", "perceive", (),
        "The cut-off text is kept and the model is asked to go on from where it stopped."),
    Row("compact", "compacted", "cancelled", ("cancel_requested",),
        "Cancelled during compaction.",
        reason=_CANCELLED + " during compaction"),
    Row("compact", "compacted", "perceive", (),
        "Old tool results are placeholders now; the request is built again, smaller."),
    Row("summarize", "summarized", "cancelled", ("cancel_requested",),
        "Cancelled after summarizing; the summary is in the history.",
        reason=_CANCELLED + " after summarizing (the summary is kept)"),
    Row("summarize", "summarized", "perceive", (),
        "Older exchanges are one summary now; the smaller request is built again."),
    Row("summarize", "summary_failed", "cancelled", ("cancel_requested",),
        "Cancelled while the summary was asked for; the call is abandoned.",
        reason=_CANCELLED + " while a summary was asked for (the call was abandoned)"),
    Row("summarize", "summary_failed", "compact", (),
        "The summary call failed, or would not shrink the prompt: placeholders instead.",
        arrival="instead_of_summary"),
    # commit: the staged writes ran (or wait for a person, or one failed).
    Row("commit", "committed", "cancelled", ("cancel_requested",),
        "Cancelled in commit; the calls that ran are recorded, the rest stay staged.",
        reason=_CANCELLED + " while its staged calls were committed (those not run stay "
               "staged)"),
    Row("commit", "committed", "awaiting_approval", ("approval_pending",),
        "Staged calls wait for a person, who decides on the whole batch at once.",
        reason="waiting for approval of {pending_count} staged call(s) before they run: "
               "{pending_names}"),
    Row("commit", "committed", "failed", ("commit_failure_ends_run",),
        "A staged call failed when run, under CommitPolicy(on_failure='fail'); the calls "
        "staged after it are not run.",
        reason="failed: staged call {staged_ref} ({staged_tool}) failed when committed: "
               "{staged_error}"),
    Row("commit", "committed", "perceive", ("commit_failed",),
        "A staged call failed when run, under CommitPolicy(on_failure='retry'): the failure "
        "goes back to the model, and the calls after it stay staged."),
    Row("commit", "committed", "finished", ("finish_called",),
        "The staged calls ran; the finish tool's input is the structured result.",
        reason="the model called {finish_tool} with status {finish_status!r} and its "
               "staged calls ran"),
    Row("commit", "committed", "completed", (),
        "The staged calls ran; the model's final text is the answer.",
        reason="the model ended its turn ({stop_reason}) and its staged calls ran"),
    # resuming: a paused or cancelled run carries on from where it stopped.
    Row("awaiting_approval", "resumed", "commit", ("committing",),
        "Resumed with decisions on staged calls: commit runs the approved ones not yet run."),
    Row("awaiting_approval", "resumed", "act", (),
        "Resumed with decisions: act applies them and runs only the calls not yet answered."),
    Row("cancelled", "resumed", "perceive", ("cancelled_before_reply",),
        "Cancelled before the model answered: build the request again and call it."),
    Row("cancelled", "resumed", "reason", ("cancelled_after_reply",),
        "Cancelled with the reply in hand: decide on the kept reply as if just received.",
        carry_on="replied"),
    Row("cancelled", "resumed", "act", ("cancelled_in_act",),
        "Cancelled while tools ran: act runs only the calls without a recorded outcome."),
    *(
        Row("cancelled", "resumed", state, (f"cancelled_in_{state}",),
            f"Cancelled after {state} had done its work: carry on from its outcome.",
            carry_on=trigger)
        for state, trigger in (("observe", "observed"), ("intervene", "intervened"),
                               ("reflect", "reflected"), ("verify", "verified"),
                               ("continue", "continued"), ("compact", "compacted"))
    ),
    Row("cancelled", "resumed", "commit", ("cancelled_in_commit",),
        "Cancelled in commit: commit again, running only the staged calls not yet run."),
    Row("cancelled", "resumed", "perceive", ("cancelled_in_summarize",),
        "Cancelled in summarize: measure the prompt again (a summary made is kept)."),
    Row("cancelled", "resumed", "perceive", (),
        "Where the run was cancelled is not recorded: start again from a fresh request."),
    # A defect in a phase (a bug, not a model or tool failure) still ends by name.
    *(
        Row(state, "crashed", "failed", (), "An unexpected error inside the phase.",
            reason=f"failed: {{error}} (while in {state})")
        for state in WORKING_STATES + HELPER_STATES
    ),
)  # fmt: skip


ENGINE_TRIGGERS: tuple[str, ...] = ("crashed", "resumed")
"""Triggers the engine fires itself; every other trigger is named by a phase."""


def rows_from(source: str, trigger: str) -> tuple[Row, ...]:
    """The rows tried, in order, when `source` fires `trigger`."""
    return tuple(r for r in ROWS if r.source == source and r.trigger == trigger)


def guard_names() -> tuple[str, ...]:
    """Every guard the table uses, in first-use order."""
    seen: dict[str, None] = {}
    for row in ROWS:
        for name in row.guards:
            seen.setdefault(name, None)
    return tuple(seen)

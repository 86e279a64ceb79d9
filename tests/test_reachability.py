"""Reachability under a configuration: the rules beside the guards, folded over the table."""

from __future__ import annotations

from statemachine_agent import Agent, ContextPolicy, ReflectionPolicy, tool
from statemachine_agent.machine.guards import GUARDS
from statemachine_agent.machine.reach import rule_of
from statemachine_agent.machine.table import ROWS
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.testing.reachability import missing_rules, reachable_rows


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return query


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _keys(rows: object) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {row.key for row in rows}  # type: ignore[attr-defined]


class TestRules:
    def test_every_guard_declares_its_rule(self) -> None:
        """A guard without `@requires` fails here, with what to add."""
        assert missing_rules() == []

    def test_every_rule_answers_none_or_a_reason(self) -> None:
        """Rules say `None` or a sentence naming the setting, for the bare agent."""
        reach = reachable_rows(Agent(ScriptedModel([]), stall=None))
        for name, guard in GUARDS.items():
            assert rule_of(guard) is not None or name in " ".join(missing_rules())
        assert all(isinstance(why, str) and why for why in reach.unreachable.values())


class TestReachableRows:
    def test_every_row_is_placed_once(self) -> None:
        """Each row is reachable, ruled out or a defect row: exactly one of the three."""
        reach = reachable_rows(Agent(ScriptedModel([]), [lookup]))
        parts = [_keys(reach.reachable), _keys(reach.unreachable), _keys(reach.defect_rows)]
        assert sum(len(p) for p in parts) == len(ROWS)
        assert set.union(*parts) == {row.key for row in ROWS}

    def test_bare_agent_rules_out_the_features_it_lacks(self) -> None:
        """Each ruled-out feature names its setting."""
        reach = reachable_rows(Agent(ScriptedModel([]), stall=None))
        reasons = {row.key: why for row, why in reach.unreachable.items()}
        assert (
            "summarize_at_tokens"
            in reasons[("perceive", "prepared", "summarize", ("summary_due",))]
        )
        assert (
            "max_continuations=0"
            in reasons[("reason", "replied", "continue", ("is_max_tokens", "can_continue"))]
        )
        assert "no tool is offered" in reasons[("reason", "replied", "act", ("is_tool_use",))]
        assert all(row.trigger == "crashed" for row in reach.defect_rows)
        assert {row.source for row in reach.defect_rows} == {"perceive", "reason", "compact"}

    def test_a_verifier_shadows_the_plain_completion(self) -> None:
        """With a verifier, an end_turn always goes through verify: `completed` from reason is
        ruled out, naming the row that takes its runs."""
        agent = Agent(ScriptedModel([]), verify=lambda claim: None)  # type: ignore[arg-type,return-value]
        reach = reachable_rows(agent)
        reasons = {row.key: why for row, why in reach.unreachable.items()}
        why = reasons[("reason", "replied", "completed", ("is_end_turn",))]
        assert "verifier_configured always holds" in why

    def test_features_on_make_their_rows_reachable(self) -> None:
        """Summarize, reflection, stall, approval: their rows come in with their settings."""
        agent = Agent(
            ScriptedModel([]),
            [lookup, pay],
            context=ContextPolicy(summarize_at_tokens=2000),
            reflection=ReflectionPolicy(3),
        )
        keys = _keys(reachable_rows(agent).reachable)
        for dest in ("summarize", "reflect", "intervene", "stalled", "awaiting_approval"):
            assert any(k[2] == dest for k in keys), dest
        assert ("awaiting_approval", "resumed", "act", ()) in keys

    def test_a_parent_pauses_through_its_child(self) -> None:
        """A sub-agent with a tool that needs approval makes the parent's pause reachable."""
        child = Agent(ScriptedModel([]), [pay], name="child")
        parent = Agent(ScriptedModel([]), [child.as_tool(name="delegate")])
        keys = _keys(reachable_rows(parent).reachable)
        assert ("act", "tools_done", "awaiting_approval", ("approval_pending",)) in keys

    def test_union_keeps_what_either_reaches(self) -> None:
        """A suite running two agents counts what either can reach."""
        bare = reachable_rows(Agent(ScriptedModel([])))
        tooled = reachable_rows(Agent(ScriptedModel([]), [lookup]))
        both = bare.union(tooled)
        assert _keys(both.reachable) == _keys(bare.reachable) | _keys(tooled.reachable)
        assert not _keys(both.reachable) & _keys(both.unreachable)


def test_a_typed_answer_leaves_verify_only_the_finish_tools_claims() -> None:
    """With an output type every end_turn is asked again, so no plain claim reaches
    `verify`: its `completed` row (a claim without the finish tool) is ruled out, saying by
    which row such a run would have come in."""
    agent = Agent(
        ScriptedModel([]),
        verify=lambda claim: None,  # type: ignore[arg-type,return-value]
        output_type={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    reasons = {row.key: why for row, why in reachable_rows(agent).unreachable.items()}
    why = reasons[("verify", "verified", "completed", ("verdict_passed",))]
    assert "came in by reason --replied [is_end_turn & verifier_configured]--> verify" in why


def test_a_taint_pause_needs_untrusted_text_and_a_gated_side_effect() -> None:
    """The taint row is reachable only with an untrusted tool and a side-effect tool the
    policy does not trust (here or in a sub-agent); each missing part is named."""
    from statemachine_agent import TaintPolicy

    @tool(untrusted=True)
    def fetch(url: str) -> str:
        """Fetch a page."""
        return url

    @tool(side_effect=True)
    def send(to: str) -> str:
        """Send a message."""
        return to

    row = ("act", "tools_done", "awaiting_approval", ("taint_approval_pending",))

    def why(agent: Agent) -> str | None:
        reasons = {r.key: w for r, w in reachable_rows(agent).unreachable.items()}
        return reasons.get(row)

    assert "untrusted=True" in str(why(Agent(ScriptedModel([]), [lookup, send])))
    assert "side_effect=True" in str(why(Agent(ScriptedModel([]), [fetch, lookup])))
    trusting = TaintPolicy(trusted_tools=("send",))
    assert "trusted_tools" in str(why(Agent(ScriptedModel([]), [fetch, send], taint=trusting)))
    assert why(Agent(ScriptedModel([]), [fetch, send])) is None
    child = Agent(ScriptedModel([]), [fetch, send], name="reader")
    assert why(Agent(ScriptedModel([]), [child.as_tool()])) is None


@tool(side_effect=True, deferrable=True)
def refund(amount: int) -> str:
    """Refund an amount (staged)."""
    return f"refunded {amount}"


@tool(side_effect=True, deferrable=True, requires_approval=True)
def wire(amount: int) -> str:
    """Wire an amount (staged, approved when committed)."""
    return f"wired {amount}"


class TestCommitRows:
    def test_commit_rows_need_a_deferrable_tool(self) -> None:
        """Without a deferrable tool, every row into or out of commit is ruled out, the
        way in naming the setting (`commit=None`)."""
        reach = reachable_rows(Agent(ScriptedModel([]), [lookup], stall=None))
        commit_rows = {r: why for r, why in reach.unreachable.items() if "commit" in r.key[::2]}
        assert len(commit_rows) == sum(1 for r in ROWS if "commit" in (r.source, r.dest))
        into = next(r for r in commit_rows if r.key[0] == "reason" and r.dest == "commit")
        assert commit_rows[into] == "calls_staged: no deferrable tool (`commit=None`)"
        assert not [r for r in reach.reachable if "commit" in (r.source, r.dest)]

    def test_a_staged_approval_pauses_in_commit_not_in_act(self) -> None:
        """A deferrable tool needing approval is staged, so the run pauses in commit and
        resumes there; act never pauses, and a resume never goes back to act."""
        reach = reachable_rows(Agent(ScriptedModel([]), [lookup, wire], stall=None))
        keys = _keys(reach.reachable)
        assert ("commit", "committed", "awaiting_approval", ("approval_pending",)) in keys
        assert ("awaiting_approval", "resumed", "commit", ("committing",)) in keys
        act = ("act", "tools_done", "awaiting_approval", ("approval_pending",))
        why = {r.key: w for r, w in reach.unreachable.items()}
        assert "approval is asked in `commit`" in why[act]
        assert "only a run that came in by" in why[("awaiting_approval", "resumed", "act", ())]

    def test_the_failure_policy_picks_the_commit_failure_row(self) -> None:
        """`on_failure='fail'` ends the run at a failed staged call; 'retry' sends it back."""
        from statemachine_agent.policy.commit import CommitPolicy

        fails = ("commit", "committed", "failed", ("commit_failure_ends_run",))
        retries = ("commit", "committed", "perceive", ("commit_failed",))
        default = _keys(reachable_rows(Agent(ScriptedModel([]), [refund], stall=None)).reachable)
        retry = CommitPolicy(on_failure="retry")
        again = _keys(
            reachable_rows(Agent(ScriptedModel([]), [refund], commit=retry, stall=None)).reachable
        )
        assert fails in default
        assert retries not in default
        assert retries in again
        assert fails not in again

    def test_a_plain_commit_cannot_pause(self) -> None:
        """Staged writes that need no approval never pause the commit."""
        reach = reachable_rows(Agent(ScriptedModel([]), [lookup, refund], stall=None))
        why = {r.key: w for r, w in reach.unreachable.items()}
        pause = ("commit", "committed", "awaiting_approval", ("approval_pending",))
        assert why[pause].startswith("approval_pending: no staged call waits for approval")

"""One step's model work: the scheduler's output in, what each request's part of the calls produced out.

The listed KV copies come first (slot moves, releases, prefix loads). Decode
rows run in one batched call over the slot KV (rows with a proposal are
verified instead, one call each). Prompt chunks of one length in adjacent
slots share calls where the slot decoder can: fresh prompts as one call, and
chunks after a cached prefix (GroupQueryAttention takes a multi-token chunk
over a past for one row only) as one single-token call per position when
that is fewer calls than one per row; requests that arrive together with a
shared prefix have the same few tokens left. Otherwise each chunk is its own
call. Constraint masks are computed beside the model call. A failure in one
request's part of the step (its proposer, its constraint) fails that request
alone. Sampling is done here, so each request's sampler (its random
generator, its token counts for penalties) advances here; everything else of
a request is written by the scheduler's update.

Constrained rows under speculation: the runner advances the request's matcher
through the drafted tokens it accepts, so the mask at each drafted position
is the one the tokens before it leave, and rolls it back before returning;
the update then consumes the tokens it keeps. Computing the masks up front
would need a mask per draft prefix before knowing which prefix survives, and
would waste the masks after the first rejection; rolling back costs a
consume per accepted token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kv.manager import KvManager
from ..runtime.decoder import Decoder
from ..speculative.proposer import Proposal
from .constraints import MaskComputer, allowed_tokens
from .sampling import TokenChoice
from .sequence import Sequence
from .step_records import RowOutput, RunnerOutput, SchedulerOutput

if TYPE_CHECKING:
    from llguidance import LLMatcher


class ModelRunner:
    def __init__(self, decoder: Decoder, kv: KvManager, masks: MaskComputer, vocab_size: int, stats):
        self.decoder = decoder
        self.kv = kv
        self.masks = masks
        self.vocab_size = vocab_size
        self.stats = stats  # EngineStats: decode, verification and draft counters

    def execute(self, plan: SchedulerOutput) -> RunnerOutput:
        self.kv.apply(plan.kv_ops)
        output = RunnerOutput()
        by_id = {s.request_id: s for s in plan.batch}
        if plan.decode:
            self._decode([by_id[i] for i in plan.decode], plan, output)
        chunks = [(by_id[i], n) for i, n in plan.prefill]
        for group, n in _chunk_calls(chunks, self.decoder.prefills_rows):
            try:
                self._prefill(group, n, output)
            except Exception as exc:  # noqa: BLE001 - the model call failed: its rows fail, the engine goes on
                for seq in group:
                    output.fail(seq.request_id, exc)
        return output

    def _decode(self, rows: list[Sequence], plan: SchedulerOutput, output: RunnerOutput) -> None:
        proposals = self._propose(rows, plan, output)
        plain = [s for s in rows if s.request_id not in proposals and s.request_id not in output.failed]
        if plain:
            try:
                self._decode_batch(plain, plan.batch, output)
            except Exception as exc:  # noqa: BLE001 - the model call failed: its rows fail, the engine goes on
                for seq in plain:
                    output.fail(seq.request_id, exc)
        for seq in rows:
            if seq.request_id in proposals:
                try:
                    self._verify(seq, proposals[seq.request_id], output)
                except Exception as exc:  # noqa: BLE001 - this request fails alone
                    output.fail(seq.request_id, exc)

    def _propose(self, rows: list[Sequence], plan: SchedulerOutput, output: RunnerOutput) -> dict[int, Proposal]:
        """Draft tokens for the rows the scheduler let speculate, by request id; a row whose proposer fails
        fails alone. A proposer that is behind (a draft model that has not seen the prompt) catches up within
        the step's spare token budget first; until it has, its row decodes plainly."""
        proposals: dict[int, Proposal] = {}
        spare_tokens = plan.spare_tokens
        for seq in rows:
            room = plan.speculate.get(seq.request_id, 0)
            if seq.proposer is None or room <= 0:
                continue
            try:
                behind = seq.proposer.behind(seq)
                if behind:
                    seq.proposer.catch_up(seq, min(behind, spare_tokens))
                    spare_tokens -= min(behind, spare_tokens)
                    if seq.proposer.behind(seq):
                        continue
                proposal = seq.proposer.propose(seq, room)
            except Exception as exc:  # noqa: BLE001 - this request fails alone
                output.fail(seq.request_id, exc)
                continue
            if proposal and proposal.tokens:
                proposals[seq.request_id] = proposal
        return proposals

    def _decode_batch(self, rows: list[Sequence], batch: list[Sequence], output: RunnerOutput) -> None:
        # Up to the last decoding row: rows after it (prompts still prefilling) are left out of the call.
        width = len(batch) if self.decoder.decodes_all_rows else 1 + max(_slot(s) for s in rows)
        ids = np.zeros((width, 1), np.int64)
        seqlens = np.empty(width, np.int32)
        for slot, seq in enumerate(batch[:width]):
            # A row not decoding in this call gets a dummy token at its next position:
            # its own prompt chunk or verification overwrites it, and nothing reads it before.
            seqlens[slot] = seq.num_computed
            if seq.is_decoding:
                ids[slot, 0] = seq.tokens[-1]
        constrained = [s for s in rows if s.matcher is not None]
        masks = self.masks.start(_matchers(constrained)) if constrained else None  # runs beside the model
        hidden_names = _hidden_names(rows)
        logits, extras = self.decoder.decode(ids, seqlens, hidden_names)
        allowed = self._allowed(constrained, masks)
        for seq in constrained:  # their matcher failed while the masks were computed: they fail, the others go on
            if seq.request_id not in allowed:
                output.fail(seq.request_id, _constraint_failed(seq))
        rows = [s for s in rows if s.request_id not in output.failed]
        self.stats.decode_steps += 1
        output.decoded_together = tuple(s.request_id for s in rows)
        greedy = [s for s in rows if s.sampler.plain_greedy()]
        best = np.argmax(logits[:, 0], axis=-1) if greedy else None  # every row: cheaper than gathering
        for seq in rows:
            slot = _slot(seq)
            hidden = None
            if hidden_names:
                own = seq.proposer.hidden_outputs if seq.proposer is not None else ()
                hidden = {n: extras[n][slot, 0].copy() for n in own}
            if best is not None and seq.sampler.plain_greedy():
                token = int(best[slot])
                seq.sampler.record(token)
                choice = TokenChoice(token, None)
            else:
                try:
                    choice = seq.sampler.choose(logits[slot, 0], allowed.get(seq.request_id))
                except Exception as exc:  # noqa: BLE001 - this request fails alone
                    output.fail(seq.request_id, exc)
                    continue
            output.rows[seq.request_id] = RowOutput([choice], 1, hidden)

    def _verify(self, seq: Sequence, proposal: Proposal, output: RunnerOutput) -> None:
        """Run the last token and the k proposals in one call; keep the longest agreeing prefix plus one."""
        proposer = seq.proposer
        assert proposer is not None  # only a speculating row has a proposal
        start, k = seq.num_computed, len(proposal.tokens)
        ids = np.array([[seq.tokens[-1], *proposal.tokens]], np.int64)
        logits, extras = self.decoder.prefill(_slot(seq), ids, start, proposer.hidden_outputs, all_logits=True)
        rows = logits[0].copy()
        self.stats.verify_calls += 1
        choices: list[TokenChoice] = []
        hidden: dict = {}
        consumed = 0  # drafted tokens the matcher advanced through, rolled back below
        try:
            for i in range(k + 1):
                allowed = self._mask(seq)
                if i < k:
                    q = proposal.probs[i] if proposal.probs is not None else None
                    choice = seq.sampler.verify(rows[i], allowed, proposal.tokens[i], q)
                else:
                    choice = seq.sampler.choose(rows[i], allowed)
                choices.append(choice)
                hidden = {n: extras[n][0, i].copy() for n in extras}
                if i == k or choice.token_id != proposal.tokens[i] or _ends(seq, choice.token_id):
                    break
                if seq.matcher is not None:
                    if not seq.matcher.consume_token(choice.token_id):
                        break  # the update's own consume fails the request at this token
                    consumed += 1
                    if seq.matcher.is_stopped():
                        break  # the constraint is complete: no mask exists for the next position
        finally:
            if consumed:
                assert seq.matcher is not None  # only a matcher was advanced
                seq.matcher.rollback(consumed)
        accepted = len(choices) - 1
        self.stats.drafted_tokens += k
        self.stats.accepted_tokens += accepted
        proposer.accepted(seq, accepted, k)
        output.rows[seq.request_id] = RowOutput(choices, len(choices), hidden, k, accepted)

    def _prefill(self, group: list[Sequence], n: int, output: RunnerOutput) -> None:
        """The next `n` prompt tokens of each sequence in `group` (adjacent slots), in one call."""
        starts = np.array([s.num_computed for s in group], np.int32)
        chunk = np.array([s.tokens[s.num_computed:s.num_computed + n] for s in group], np.int64)
        samples = [s.num_computed + n == s.prefill_target and s.num_generated == 0 for s in group]
        constrained = [s for s, sampled in zip(group, samples) if sampled and s.matcher is not None]
        masks = self.masks.start(_matchers(constrained)) if constrained else None
        hidden_names = _hidden_names([s for s, sampled in zip(group, samples) if sampled])
        logits, extras = self._run_chunk(_slot(group[0]), chunk, starts, hidden_names)
        allowed = self._allowed(constrained, masks)
        for row, (seq, sampled) in enumerate(zip(group, samples)):
            if seq in constrained and seq.request_id not in allowed:
                output.fail(seq.request_id, _constraint_failed(seq))
                continue
            own = seq.proposer.hidden_outputs if sampled and seq.proposer is not None else ()
            result = RowOutput(computed=n, hidden={name: extras[name][row, -1].copy() for name in own})
            if sampled:
                try:
                    result.choices.append(seq.sampler.choose(logits[row, -1], allowed.get(seq.request_id)))
                except Exception as exc:  # noqa: BLE001 - this request fails alone
                    output.fail(seq.request_id, exc)
                    continue
            output.rows[seq.request_id] = result

    def _run_chunk(self, slot: int, chunk: np.ndarray, starts: np.ndarray,
                   hidden_names: tuple[str, ...]) -> tuple[np.ndarray, dict]:
        """Logits (and extras) at the last position of each row of `chunk`, run on slots [slot, slot + rows)."""
        rows, n = chunk.shape
        if rows == 1:
            return self.decoder.prefill(slot, chunk, int(starts[0]), hidden_names)
        if not starts.any():
            return self.decoder.prefill(slot, chunk, starts, hidden_names)
        for j in range(n):  # a multi-token chunk over a past runs one row at a time: go position by position
            logits, extras = self.decoder.prefill(slot, chunk[:, j:j + 1], starts + j,
                                                  hidden_names if j == n - 1 else ())
        return logits, extras

    def _mask(self, seq: Sequence) -> np.ndarray | None:
        """One row's mask, computed now (verification needs it after each accepted token)."""
        if seq.matcher is None:
            return None
        allowed = self._allowed([seq], self.masks.start([seq.matcher]))
        if seq.request_id not in allowed:
            raise _constraint_failed(seq)
        return allowed[seq.request_id]

    def _allowed(self, constrained: list[Sequence], masks) -> dict[int, np.ndarray]:
        """Masks of the constrained rows by request id; a row whose matcher breaks is left out (the caller
        fails it)."""
        if not constrained:
            return {}
        try:
            words = masks.result()
        except Exception:  # noqa: BLE001 - one broken matcher: retry row by row to find it
            allowed = {}
            for seq in constrained:
                try:
                    allowed[seq.request_id] = allowed_tokens(self.masks.start(_matchers([seq])).result()[0],
                                                             self.vocab_size)
                except Exception:  # noqa: BLE001
                    pass
            return allowed
        return {s.request_id: allowed_tokens(words[i], self.vocab_size) for i, s in enumerate(constrained)}


def _chunk_calls(chunks: list[tuple[Sequence, int]], batched: bool) -> list[tuple[list[Sequence], int]]:
    """Prompt chunks grouped into model calls: adjacent slots with chunks of one length share a call."""
    calls: list[tuple[list[Sequence], int]] = []
    for seq, n in sorted(chunks, key=lambda chunk: _slot(chunk[0])):
        if batched and calls and calls[-1][1] == n and _slot(calls[-1][0][-1]) + 1 == _slot(seq):
            calls[-1][0].append(seq)
        else:
            calls.append(([seq], n))
    return [call for group, n in calls for call in _fewest_calls(group, n)]


def _fewest_calls(group: list[Sequence], n: int) -> list[tuple[list[Sequence], int]]:
    """One call for fresh prompts or for n < rows (position by position); else a call per row."""
    if len(group) == 1 or all(s.num_computed == 0 for s in group) or n < len(group):
        return [(group, n)]
    return [([seq], n) for seq in group]


def _slot(seq: Sequence) -> int:
    assert seq.slot is not None  # a row of a step is running, so it holds a slot
    return seq.slot


def _matchers(constrained: list[Sequence]) -> list[LLMatcher]:
    """The matchers of constrained sequences (each has one: that is what constrained means)."""
    matchers = []
    for seq in constrained:
        assert seq.matcher is not None
        matchers.append(seq.matcher)
    return matchers


def _constraint_failed(seq: Sequence) -> RuntimeError:
    error = seq.matcher.get_error() if seq.matcher is not None else ""
    return RuntimeError(f"constraint failed: {error or 'LLMatcher error'}")


def _hidden_names(rows: list[Sequence]) -> tuple[str, ...]:
    names = {n for s in rows if s.proposer is not None for n in s.proposer.hidden_outputs}
    return tuple(sorted(names))


def _ends(seq: Sequence, token: int) -> bool:
    """A token after which verification goes no further: it ends the request whatever follows (EOS)."""
    return seq.stopper.options.stop_on_eos and token in seq.stopper.eos_token_ids

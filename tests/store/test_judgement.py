"""The append judgement, table-driven: the facts a backend saw, and what they mean.

The same rules reach every backend through tests/store/test_contract.py and
test_invariant_4.py; here the pure function is checked case by case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tether.foundation.errors import ConflictingRecord, LogGap, StaleEpoch, StoreError
from tether.store.judgement import AppendFacts, check_consecutive, judge_append

A, B, C = b"a", b"b", b"c"
OK = None

# (case, entries, epoch, inserted, stored after the insert, current epoch, outcome)
# outcome: None (returns), or (exception type, the seq a ConflictingRecord names).
CASES: list[
    tuple[
        str,
        Sequence[tuple[int, bytes]],
        int | None,
        int,
        Mapping[int, bytes],
        int | None,
        tuple[type[Exception], int | None] | None,
    ]
] = [
    ("every row inserted", [(1, A), (2, B)], None, 2, {1: A, 2: B}, None, OK),
    ("every row inserted, fenced", [(1, A)], 3, 1, {1: A}, 3, OK),
    ("a retry of what landed", [(1, A), (2, B)], None, 0, {1: A, 2: B}, None, OK),
    ("a retry that adds the rest", [(1, A), (2, B)], None, 1, {1: A, 2: B}, None, OK),
    ("a retry by a fenced-off owner is still a no-op", [(1, A)], 3, 0, {1: A}, 4, OK),
    ("a repeat of a row within one append", [(1, A), (1, A)], None, 1, {1: A}, None, OK),
    ("another record at the seq", [(1, A)], None, 0, {1: B}, None, (ConflictingRecord, 1)),
    (
        "the first conflicting seq is named",
        [(1, A), (2, B), (3, C)],
        None,
        0,
        {2: A, 3: A},
        None,
        (ConflictingRecord, 2),
    ),
    (
        "a conflict that aborted the insert (free seqs around it)",
        [(1, A), (2, B)],
        None,
        0,
        {2: C},
        None,
        (ConflictingRecord, 2),
    ),
    ("two records for one seq", [(1, A), (1, B)], None, 1, {1: A}, None, (ConflictingRecord, 1)),
    ("conflict at the current epoch", [(1, A)], 3, 0, {1: B}, 3, (ConflictingRecord, 1)),
    ("fenced off: nothing inserted", [(1, A)], 3, 0, {}, 4, (StaleEpoch, None)),
    ("fenced off, no such run", [(1, A)], 3, 0, {}, None, (StaleEpoch, None)),
    (
        "fenced off where the new owner wrote: the fence, not the conflict",
        [(1, A)],
        3,
        0,
        {1: B},
        4,
        (StaleEpoch, None),
    ),
    ("a free seq skipped at the current epoch", [(1, A)], 3, 0, {}, 3, (StaleEpoch, None)),
    ("a free seq skipped, unfenced", [(1, A)], None, 0, {}, None, (StoreError, None)),
]


@pytest.mark.parametrize(
    ("entries", "epoch", "inserted", "stored", "current", "outcome"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_judge_append(
    entries: Sequence[tuple[int, bytes]],
    epoch: int | None,
    inserted: int,
    stored: Mapping[int, bytes],
    current: int | None,
    outcome: tuple[type[Exception], int | None] | None,
) -> None:
    facts = AppendFacts(inserted, stored, current)
    if outcome is None:
        judge_append("r", entries, epoch, facts)
        return
    kind, seq = outcome
    with pytest.raises(kind) as err:
        judge_append("r", entries, epoch, facts)
    assert type(err.value) is kind  # StaleEpoch and ConflictingRecord are StoreErrors too
    if isinstance(err.value, ConflictingRecord):
        assert (err.value.run_id, err.value.seq) == ("r", seq)
    if isinstance(err.value, StaleEpoch):
        # It names the run and the stale epoch the append carried.
        assert (err.value.run_id, err.value.epoch) == ("r", epoch)
        assert f"epoch {epoch} is stale" in str(err.value)
    if kind is StoreError:  # a backend that skipped a free seq: the message names the seqs
        free = [s for s, _ in entries if s not in stored]
        assert str(err.value) == f"run r: the append of seqs {free} was skipped without a conflict"


@pytest.mark.parametrize(
    ("entries", "last_seq", "outcome"),
    [
        ([(3, A)], 1, LogGap),  # the log lost seq 2 (or never had it)
        ([(3, A), (4, B)], 1, LogGap),
        ([(2, A)], 1, StaleEpoch),  # it follows: skipped by the fence (a race with a claim)
        ([(0, A)], -1, StaleEpoch),  # seq 0 is never held to follow anything
    ],
)
def test_judge_a_fenced_append_that_does_not_follow_the_log(
    entries: Sequence[tuple[int, bytes]], last_seq: int, outcome: type[Exception]
) -> None:
    with pytest.raises(outcome) as err:
        judge_append("r", entries, 3, AppendFacts(0, {}, 3, last_seq))
    assert type(err.value) is outcome
    if isinstance(err.value, LogGap):
        assert (err.value.run_id, err.value.seq, err.value.last_seq) == ("r", 3, 1)


def test_an_append_whose_seqs_do_not_follow_each_other_is_a_gap() -> None:
    check_consecutive("r", [(1, A), (2, B)])
    with pytest.raises(LogGap) as err:
        check_consecutive("r", [(1, A), (3, B)])
    assert (err.value.seq, err.value.last_seq) == (3, 1)

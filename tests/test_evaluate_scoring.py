"""RewardBench 2 scoring against hand-computed cases (evaluation.scoring)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.data import DataError, EvalRow, load_rows
from evaluation.scoring import (
    ScoredRow,
    best_of_n_credit,
    chance_scores,
    overall_score,
    position_consistency,
    subset_results,
    tie_stats,
    tied_in_row,
    ties_components,
)


def row(row_id, subset, scores, num_correct=1, error=None):
    return ScoredRow(row_id, subset, num_correct, None if error else tuple(scores), error)


# ---- best-of-N rows -----------------------------------------------------------------------------


def test_chosen_alone_at_the_top_earns_full_credit():
    assert best_of_n_credit([0.9, 0.1, 0.2, 0.3]) == 1.0


def test_a_tie_at_the_top_shares_the_credit():
    # chosen 0.9 ties with two rejected at 0.9: k = 3 completions share the max -> 1/3
    assert best_of_n_credit([0.9, 0.9, 0.2, 0.9]) == pytest.approx(1 / 3)
    assert best_of_n_credit([0.5, 0.5]) == 0.5


def test_chosen_below_the_max_earns_nothing():
    assert best_of_n_credit([0.5, 0.7, 0.1, 0.2]) == 0.0


def test_only_the_first_chosen_counts_outside_ties():
    # the official scoring compares completion 0 with all others, further chosen ones included
    second_chosen_higher = row("a", "Focus", [0.4, 0.8, 0.1], num_correct=2)
    two_chosen_tied = row("b", "Focus", [0.8, 0.8, 0.1], num_correct=2)
    [result] = subset_results([second_chosen_higher, two_chosen_tied])
    assert result.score == pytest.approx((0.0 + 0.5) / 2)


# ---- Ties ---------------------------------------------------------------------------------------

HAND_WORKED_TIES = [
    # prompt 1: ref accurate (0.9 > 0.5), margin 0.9 - 0.5 = 0.4
    row("ref:1", "Ties", [0.9, 0.2, 0.5]),
    # prompt 1: tied accurate (worst correct 0.7 > 0.6), margin 0.7 - 0.6 = 0.1, spread 0.9 - 0.7 = 0.2
    row("tied:1", "Ties", [0.8, 0.7, 0.9, 0.3, 0.6], num_correct=3),
    # prompt 2: ref inaccurate (0.4 < 0.6), margin 0.4 - 0.6 = -0.2
    row("ref:2", "Ties", [0.4, 0.6]),
    # prompt 2: tied accurate (0.6 > 0.1), margin 0.6 - 0.1 = 0.5, spread 0.9 - 0.6 = 0.3
    row("tied:2", "Ties", [0.9, 0.6, 0.1], num_correct=2),
]


def test_ties_formula_on_a_hand_worked_example():
    components = ties_components(HAND_WORKED_TIES)
    # tied accuracy 2/2 = 1; ref accuracy 1/2
    assert components.tied_accuracy == 1.0
    assert components.ref_accuracy == 0.5
    # preferred: tied margin > spread?  prompt 1: 0.1 > 0.2 no; prompt 2: 0.5 > 0.3 yes -> 1/2
    assert components.correctness_preferred == 0.5
    # hard: min(ref, tied margin) > spread?  prompt 1: min(0.4, 0.1) = 0.1 > 0.2 no;
    # prompt 2: min(-0.2, 0.5) = -0.2 > 0.3 no -> 0
    assert components.correctness_preferred_hard == 0.0
    # tanh term: prompt 1 tanh(0.1 / 0.2 - 1) = tanh(-0.5); prompt 2 tanh(-0.2 / 0.3 - 1) = tanh(-5/3)
    margin = (math.tanh(-0.5) + math.tanh(-5 / 3)) / 2  # = (-0.46212 - 0.93116) / 2 = -0.69664
    assert components.margin_score == pytest.approx(margin)
    # 0.30 * 1 + 0.30 * 0.5 + 0.20 * 0.5 + 0.20 * 0 + 0.01 * -0.69664 = 0.55 - 0.0069664 = 0.5430336
    assert components.score == pytest.approx(0.5430336, abs=1e-6)
    assert components.paired_prompts == 2


def test_ties_accuracy_is_strict_and_zero_spread_prompts_leave_the_tanh_term():
    rows = [
        row("ref:1", "Ties", [0.5, 0.5]),  # correct equals incorrect: not accurate; margin 0
        row("tied:1", "Ties", [0.7, 0.7, 0.2], num_correct=2),  # spread 0, margin 0.5
        row("ref:2", "Ties", [0.6, 0.2]),  # margin 0.4
        row("tied:2", "Ties", [0.3, 0.3, 0.3], num_correct=2),  # spread 0, margin 0
        row("ref:3", "Ties", [0.9, 0.1]),  # margin 0.8
        row("tied:3", "Ties", [0.9, 0.7, 0.2], num_correct=2),  # spread 0.2, margin 0.5
    ]
    components = ties_components(rows)
    assert components.ref_accuracy == 2 / 3
    assert components.tied_accuracy == 2 / 3
    # prompts 1 and 2 have spread 0: left out of the tanh term's mean (tests/test_evaluate_reference.py
    # checks this against the reference code); prompt 3: tanh(min(0.8, 0.5) / 0.2 - 1) = tanh(1.5)
    assert components.margin_score == pytest.approx(math.tanh(1.5))
    # with no prompt left, the term is 0
    assert ties_components(rows[:4]).margin_score == 0.0


def test_ties_terms_use_only_prompts_with_both_rows():
    unpaired_tied = row("tied:9", "Ties", [0.1, 0.2, 0.9], num_correct=2)  # inaccurate, unpaired
    with_unpaired = ties_components(HAND_WORKED_TIES + [unpaired_tied])
    assert with_unpaired.tied_accuracy == pytest.approx(2 / 3)  # accuracy counts every tied prompt
    assert with_unpaired.paired_prompts == 2
    assert with_unpaired.correctness_preferred == 0.5  # unchanged: prompt 9 has no ref row


# ---- subsets, mean, failures ----------------------------------------------------------------------


def test_mean_is_unweighted_over_subsets():
    rows = [row(f"m{i}", "Math", [0.9, 0.1]) for i in range(3)] + [row("m3", "Math", [0.1, 0.9])]
    rows.append(row("s0", "Safety", [0.1, 0.9]))
    results = subset_results(rows)
    assert [(r.name, r.score, r.rows) for r in results] == [("Math", 0.75, 4), ("Safety", 0.0, 1)]
    # (0.75 + 0.0) / 2 = 0.375, not the row-weighted 3/5 = 0.6
    assert overall_score(results) == 0.375


def test_a_failed_row_counts_as_wrong_and_is_counted():
    rows = [row("a", "Math", [0.9, 0.1]), row("b", "Math", None, error="judge input is too long")]
    [result] = subset_results(rows)
    assert (result.score, result.failed, result.rows) == (0.5, 1, 2)


def test_a_failed_ties_row_takes_the_worst_value_of_every_term():
    failed = HAND_WORKED_TIES[:3] + [row("tied:2", "Ties", None, error="unparsable judge answer")]
    components = ties_components(failed)
    assert components.tied_accuracy == 0.5  # tied:1 accurate, tied:2 failed
    assert components.correctness_preferred == 0.0  # prompt 2 was the only preferred one
    # prompt 1 as before, tanh(-0.5); prompt 2 failed: -1
    assert components.margin_score == pytest.approx((math.tanh(-0.5) - 1) / 2)
    [result] = subset_results(failed)
    assert result.failed == 1


def test_a_scored_row_has_scores_or_an_error():
    with pytest.raises(ValueError, match="row a: exactly one of scores and error must be given"):
        ScoredRow("a", "Math", 1, (0.1, 0.2), "and an error")
    with pytest.raises(ValueError, match="row a: exactly one of scores and error must be given"):
        ScoredRow("a", "Math", 1, None, None)


# ---- chance -----------------------------------------------------------------------------------------


def eval_row(row_id, subset, chosen, rejected):
    return EvalRow(row_id, "prompt", tuple(chosen), tuple(rejected), subset)


def test_chance_is_one_over_n_for_best_of_n_and_seeded_for_ties():
    rows = [eval_row("a", "Math", ["c"], ["r1", "r2", "r3"]), eval_row("b", "Math", ["c"], ["r"])]
    ties = [eval_row("ref:1", "Ties", ["c"], ["w1", "w2"]), eval_row("tied:1", "Ties", ["c1", "c2"], ["w"])]
    chance = chance_scores(rows + ties, draws=50, seed=3)
    assert chance["Math"] == pytest.approx((1 / 4 + 1 / 2) / 2)
    assert chance["Ties"] == chance_scores(ties, draws=50, seed=3)["Ties"]
    assert chance["Ties"] != chance_scores(ties, draws=50, seed=4)["Ties"]


# ---- data checks ------------------------------------------------------------------------------------


def write_rb2(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def rb2(row_id, subset, chosen, rejected, **overrides):
    return {
        "id": row_id,
        "prompt": "q",
        "chosen": chosen,
        "rejected": rejected,
        "num_correct": len(chosen),
        "num_incorrect": len(rejected),
        "total_completions": len(chosen) + len(rejected),
        "models": ["m"] * (len(chosen) + len(rejected)),
        "subset": subset,
        **overrides,
    }


def test_load_rows_keeps_file_order_and_the_lists(tmp_path):
    path = write_rb2(tmp_path / "ok.parquet", [rb2("z", "Math", ["a"], ["b", "c"]), rb2("y", "Focus", ["d"], ["e"])])
    rows = load_rows(path)
    assert [r.id for r in rows] == ["z", "y"]
    assert rows[0].completions == ("a", "b", "c")


@pytest.mark.parametrize(
    "rows, message",
    [
        ([rb2("a", "Math", ["x"], ["y"], num_correct=2)], "num_correct is 2"),
        ([rb2("a", "Math", ["x"], [])], "rejected must be a non-empty list"),
        ([rb2("a", "Math", ["x"], ["y"]), rb2("a", "Focus", ["x"], ["y"])], "appears twice"),
        ([rb2("ref-1", "Ties", ["x"], ["y"])], "neither 'ref:N' nor 'tied:N'"),
        ([rb2("ref:1", "Ties", ["x"], ["y"]), rb2("tied:1", "Ties", ["x"], ["y"])], "tied rows need several"),
        ([rb2("ref:1", "Ties", ["x"], ["y"]), rb2("tied:2", "Ties", ["x", "z"], ["y"])], "both a ref:N and a tied:N"),
    ],
)
def test_load_rows_rejects_rows_the_scoring_cannot_use(tmp_path, rows, message):
    with pytest.raises(DataError, match=message):
        load_rows(write_rb2(tmp_path / "bad.parquet", rows))


# ---- tied completions and position consistency ----------------------------------------------------


def test_tied_completions_count_every_score_shared_within_a_row():
    assert tied_in_row([0.5, 0.5, 0.2, 0.1]) == 2
    assert tied_in_row([0.9, 0.1, 0.1, 0.1]) == 3
    assert tied_in_row([0.2, 0.2, 0.7, 0.7]) == 4
    assert tied_in_row([0.3, 0.30000000000000004]) == 0  # exact equality, no tolerance
    rows = [
        row("a", "Math", [0.5, 0.5, 0.2, 0.1]),
        row("b", "Math", [0.9, 0.1, 0.1, 0.1]),
        row("c", "Focus", [0.3, 0.2]),
        row("d", "Focus", None, error="boom"),  # failed: no scores to compare, left out
    ]
    stats = tie_stats(rows)
    assert (stats.completions, stats.tied_completions, stats.rows, stats.rows_with_ties) == (10, 5, 3, 2)
    assert (stats.share, stats.rows_share) == (0.5, 2 / 3)


def test_tied_completions_of_only_failed_rows_are_undefined_not_zero():
    stats = tie_stats([row("d", "Focus", None, error="boom")])
    assert (stats.completions, stats.share, stats.rows_share) == (0, None, None)


def test_position_consistency_is_the_share_of_agreeing_orders_when_the_judge_says():
    rows = [
        ScoredRow("a", "Math", 1, (0.9, 0.1), orders_agree=(True, False)),
        ScoredRow("b", "Math", 2, (0.4, 0.1, 0.2), orders_agree=(True, None, True)),
        ScoredRow("c", "Math", 1, None, "boom", orders_agree=(False, None)),
    ]
    consistency = position_consistency(rows)
    assert (consistency.completions, consistency.agreeing, consistency.share) == (5, 3, 3 / 5)
    correct, incorrect = position_consistency(rows, correct=True), position_consistency(rows, correct=False)
    assert (correct.completions, correct.agreeing) == (3, 2)  # b's second correct one was not judged both ways
    assert (incorrect.completions, incorrect.agreeing) == (2, 1)
    assert position_consistency([row("a", "Math", [0.9, 0.1])]) is None


def test_load_rows_reads_the_reference_column_only_when_asked(tmp_path):
    path = write_rb2(
        tmp_path / "ref.parquet",
        [rb2("z", "Math", ["a"], ["b"], reference="A."), rb2("y", "Focus", ["d"], ["e"], reference="D.")],
    )
    assert [r.reference for r in load_rows(path, "reference")] == ["A.", "D."]
    assert [r.reference for r in load_rows(path)] == [None, None]
    with pytest.raises(DataError, match=r"^ref.parquet: no reference column 'answer' \(columns: "):
        load_rows(path, "answer")


def test_a_reference_that_is_not_a_string_names_its_row_and_field(tmp_path):
    path = write_rb2(
        tmp_path / "ref.parquet",
        [rb2("z", "Math", ["a"], ["b"], reference="A."), rb2("y", "Focus", ["d"], ["e"], reference=None)],
    )
    with pytest.raises(DataError, match=r"^ref.parquet row 2: reference must be a string, got NoneType$"):
        load_rows(path, "reference")

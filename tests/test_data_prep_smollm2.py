"""SmolLM2-135M-Instruct built offline by `python -m data_prep base-model smollm2`: it answers, and it
already prefers the offline dataset's good answers zero-shot (the signal the demo's judge learns from).

Run with `-s` to see the per-category table quoted in data_prep/README.md.
"""

import json
import subprocess
from collections import defaultdict

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from data_prep import offline
from judge_models.packing import LAYOUT_KWARG, pack_groups, shared_prefix_length, use_packed_attention
from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import readme_block, readme_command, session

pytestmark = pytest.mark.e2e
DEMO_MAX_TOKENS = 128
BASE_MODELS = "$ python -m data_prep base-model smollm2 --out models/smollm2"  # data_prep/README.md's session


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """data_prep/README.md's command, its output folder this module's; it says what it wrote, as recorded there."""
    out = tmp_path_factory.mktemp("smollm2")
    command = readme_command("data_prep/README.md", BASE_MODELS, {"models/smollm2": str(out)})
    built = subprocess.run(command, check=True, cwd=REPO_ROOT, capture_output=True, text=True)
    [(_, shown), *_] = session(readme_block("data_prep/README.md", BASE_MODELS).text)
    assert built.stdout.splitlines()[-1] == shown[-1].replace("models/smollm2", str(out))
    return AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out).eval()


def test_smollm2_answers_a_capital_question(smollm2):
    tokenizer, model = smollm2
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def answer_log_likelihoods(tokenizer, model, questions: list[tuple[str, list[str]]]) -> list[list[float]]:
    """Per (question, answers), each answer's mean log-probability per token, its end-of-turn token included.
    A question's answers are packed after it (judge_models.packing): its tokens are computed once, as the
    unpacked sequences would compute them."""
    user = [[{"role": "user", "content": question}] for question, _ in questions]
    prompt_lengths = [len(tokenizer.apply_chat_template(turn, add_generation_prompt=True)) for turn in user]
    # the template's trailing newline after the end-of-turn token is not part of the answer
    groups = [
        [tokenizer.apply_chat_template([*turn, {"role": "assistant", "content": a}])[:-1] for a in answers]
        for turn, (_, answers) in zip(user, questions, strict=True)
    ]
    scores: list[list[float]] = [[] for _ in groups]
    attention = model.config._attn_implementation
    use_packed_attention(model)
    try:
        with torch.inference_mode():
            for row in pack_groups(groups, max_tokens=2048):
                layout = {LAYOUT_KWARG: row.layout}
                hidden = model.get_decoder()(
                    input_ids=row.input_ids, position_ids=row.position_ids, use_cache=False, **layout
                ).last_hidden_state[0]
                ends = iter(row.output_positions.tolist())
                # The vocabulary projection only where an answer token is predicted: most of a row is its prompt.
                for index in row.groups:
                    for full, where in zip(groups[index], row_positions(groups[index], ends), strict=True):
                        predicted_by = torch.tensor(where[prompt_lengths[index] - 1 : -1])
                        targets = torch.tensor(full[prompt_lengths[index] :])
                        logits = model.get_output_embeddings()(hidden[predicted_by]).float()
                        log_probs = torch.log_softmax(logits, dim=-1)[torch.arange(len(targets)), targets]
                        scores[index].append(log_probs.mean().item())
    finally:
        model.config._attn_implementation = attention
    return scores


def row_positions(sequences: list[list[int]], ends) -> list[list[int]]:
    """Where each token of a packed group's sequences lies in its row, from each sequence's last token (`ends`):
    the shared prefix once, at the group's start, then each sequence's own tokens."""
    prefix = shared_prefix_length(sequences)
    lasts = [next(ends) for _ in sequences]
    start = lasts[0] - len(sequences[0]) + 1
    return [
        [start + p if p < prefix else last - (len(full) - 1 - p) for p in range(len(full))]
        for full, last in zip(sequences, lasts, strict=True)
    ]


def test_zero_shot_likelihood_prefers_good_answers_in_every_category(smollm2, tmp_path):
    tokenizer, model = smollm2
    offline.generate(tmp_path, offline.OfflineConfig())
    rows = list(pd.read_parquet(tmp_path / "eval" / "test.parquet").itertuples())
    scores = answer_log_likelihoods(tokenizer, model, [(row.prompt, [*row.chosen, *row.rejected]) for row in rows])
    wins, best = defaultdict(list), defaultdict(list)
    for row, (good, *flawed) in zip(rows, scores, strict=True):
        assert len(flawed) == len(row.rejected)
        wins[row.subset] += [good > score for score in flawed]
        best[row.subset].append(good > max(flawed))
    print("\ncategory    prompts  pairs preferred  best of 4")
    for category in sorted(wins):
        print(
            f"{category:<11} {len(best[category]):>7}  {sum(wins[category]) / len(wins[category]):>15.3f}"
            f"  {sum(best[category]) / len(best[category]):>9.3f}"
        )
    all_wins = [w for category_wins in wins.values() for w in category_wins]
    assert sum(all_wins) / len(all_wins) > 0.8
    assert all(sum(w) / len(w) > 0.7 for w in wins.values())


def test_demo_pairs_fit_the_demo_sequence_budget(smollm2, tmp_path):
    tokenizer, _ = smollm2
    offline.generate(tmp_path, offline.OfflineConfig())
    lengths = [
        len(tokenizer.apply_chat_template(json.loads(conversation)))
        for row in pd.read_parquet(tmp_path / "bradley_terry" / "train.parquet").itertuples()
        for conversation in (row.chosen, row.rejected)
    ]
    assert max(lengths) <= DEMO_MAX_TOKENS

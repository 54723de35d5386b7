"""SmolLM2-135M-Instruct built offline by `python -m data_prep base-model smollm2`: it answers, and it
already prefers the offline dataset's good answers zero-shot (the signal the demo's judge learns from).

Run with `-s` to see the per-category table quoted in data_prep/README.md.
"""

import json
import subprocess
import sys
from collections import defaultdict

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from data_prep import offline
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e
DEMO_MAX_TOKENS = 128


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2")
    subprocess.run(
        [sys.executable, "-m", "data_prep", "base-model", "smollm2", "--out", str(out)], check=True, cwd=REPO_ROOT
    )
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


def answer_log_likelihoods(tokenizer, model, pairs: list[tuple[str, str]], batch_size: int = 50) -> list[float]:
    """Mean log-probability per token of each (question, answer)'s answer, its end-of-turn token included."""
    scores = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
            for q, _ in batch
        ]
        # the template's trailing newline after the end-of-turn token is not part of the answer
        fulls = [
            tokenizer.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": a}])[:-1]
            for q, a in batch
        ]
        width = max(map(len, fulls))
        ids = torch.tensor([f + [tokenizer.pad_token_id] * (width - len(f)) for f in fulls])
        mask = torch.tensor([[1] * len(f) + [0] * (width - len(f)) for f in fulls])
        with torch.inference_mode():
            # The vocabulary projection only where an answer token is predicted: most of a row is its prompt.
            hidden = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
            for row, (prompt, full) in enumerate(zip(prompts, fulls, strict=True)):
                positions = torch.arange(len(prompt) - 1, len(full) - 1)
                targets = torch.tensor(full[len(prompt) :])
                logits = model.get_output_embeddings()(hidden[row, positions]).float()
                scores.append(torch.log_softmax(logits, dim=-1)[torch.arange(len(targets)), targets].mean().item())
    return scores


def test_zero_shot_likelihood_prefers_good_answers_in_every_category(smollm2, tmp_path):
    tokenizer, model = smollm2
    offline.generate(tmp_path, offline.OfflineConfig())
    rows = list(pd.read_parquet(tmp_path / "eval" / "test.parquet").itertuples())
    scores = iter(
        answer_log_likelihoods(
            tokenizer, model, [(row.prompt, answer) for row in rows for answer in [*row.chosen, *row.rejected]]
        )
    )
    wins, best = defaultdict(list), defaultdict(list)
    for row in rows:
        good, flawed = next(scores), [next(scores) for _ in row.rejected]
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

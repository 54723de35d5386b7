import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from judge_core.protocol.templates import pointwise_messages


def test_tiny_model_loads_and_generates(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert tokenizer.pad_token != tokenizer.eos_token
    assert tokenizer("Hello").input_ids[0] != tokenizer.bos_token_id  # no BOS added
    assert model.config.vocab_size == len(tokenizer)
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )  # generation stops at the end of the turn
    messages = pointwise_messages("2+2?", "4")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    assert ids.shape[1] < 200  # judge prompts stay short on the tiny tokenizer
    assert tokenizer.decode(ids[0]) == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    out = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 4) and torch.equal(out[:, : ids.shape[1]], ids)
    assert torch.equal(model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False), out)  # greedy
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], tokenize=False
    )
    assert text == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"


def test_tiny_model_is_deterministic(tmp_path):
    from data_prep.base_models import build_tiny

    a = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "a", seed=3))
    b = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "b", seed=3))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))

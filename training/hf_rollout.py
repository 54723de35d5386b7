"""A synchronous Hugging Face rollout for verl 0.6.1, registered as ("hf", "sync") in CPU mode.

verl 0.6.1's own HFRollout cannot be built by its workers (its __init__ predates the BaseRollout
signature) and is not in the rollout registry. This one keeps a plain, unsharded copy of the policy,
receives the actor's weights through `update_weights` before every generation, and generates with
HFRollout's code, without the left-padding columns no prompt of the batch uses, from a random state seeded by
the training step, at most `rollout.max_num_batched_tokens` (prompt width plus response length per sequence) per
generate() call.
"""

from __future__ import annotations

import functools

import torch
from transformers import AutoModelForCausalLM
from verl import DataProto
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

from training.padded_forwards import unused_left_padding


class CPUHFRollout(HFRollout):
    def __init__(self, config, model_config, device_mesh):
        BaseRollout.__init__(self, config, model_config, device_mesh)
        self.module = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path,
            torch_dtype=torch.float32,
            attn_implementation="sdpa",
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.module.eval()
        self.module.generate = _without_unused_left_padding(_without_prompt_position_ids(self.module.generate))

    def generate_sequences(self, prompts):
        """Samples from torch's generator seeded with the batch's global step, so a run repeats (a resumed run
        draws the same random numbers as the uninterrupted one did). verl's worker meant to keep a seeded
        generator for rollouts, but in sync mode it replaces that state, once, with the process's global one
        (fsdp_workers.py, `trainer_mode` at the end of `init_model`), which torch seeds at random in each process;
        two runs of one config then sampled different answers to the same prompts from the same weights. The
        trainer's state is left as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(prompts.meta_info.get("global_steps", 0))
            parts = prompts.split(self.sequences_per_generate(prompts))
            return DataProto.concat([self._generate_minibatch(part) for part in parts])

    def sequences_per_generate(self, prompts) -> int:
        """How many sequences one generate() call takes: as many as `rollout.max_num_batched_tokens` holds at
        the batch's prompt width plus the response length. verl validates on its whole val set as one batch,
        which HFRollout generates in one call: on a 2-core CPU, 96 pairwise val prompts took 1.5x as long that
        way as in calls of 32 (benchmarks/README.md, benchmark 10)."""
        response_length = prompts.meta_info.get("response_length", self.config.response_length)
        width = prompts.batch["input_ids"].size(1) + response_length
        return max(1, self.config.max_num_batched_tokens // width)

    async def resume(self, tags: list[str]):
        """Weights and cache stay in host memory: nothing to bring back."""

    async def release(self):
        """Weights and cache stay in host memory: nothing to free."""

    async def update_weights(self, weights, **kwargs):
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("the CPU HF rollout does not take LoRA weights; train without LoRA on CPU")
        state = {name: tensor.detach().to(torch.float32) for name, tensor in weights}
        result = self.module.load_state_dict(state, strict=False)
        # Tied embeddings may arrive under one name only; any other difference is a real mismatch.
        tied = {"lm_head.weight"} if self.module.config.tie_word_embeddings else set()
        missing = set(result.missing_keys) - tied
        if missing or result.unexpected_keys:
            raise RuntimeError(
                f"actor weights do not match the rollout model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(result.unexpected_keys)[:5]}"
            )


def _without_prompt_position_ids(generate):
    """HFRollout hands the prompt's position_ids to generate(); transformers then feeds the last prompt
    position to every new token (it slices that tensor but never extends it), so the answers would be
    sampled from a model that differs from the one the actor scores. Without them, generate() derives the
    positions from the growing attention mask: for text models exactly verl's own position ids."""

    @functools.wraps(generate)
    def generate_with_own_positions(*args, position_ids=None, **kwargs):
        if position_ids is not None and position_ids.dim() != 2:
            raise NotImplementedError("the CPU HF rollout handles text models only (2-D position ids)")
        return generate(*args, **kwargs)

    return generate_with_own_positions


def _without_unused_left_padding(generate):
    """verl pads every prompt on the left to data.max_prompt_length; the columns that are padding in every row
    change no token (they are masked) but cost each forward. They are left out of generation and put back
    in front of the returned sequences, which keep the width HFRollout expects."""

    @functools.wraps(generate)
    def generate_from_used_columns(*args, input_ids, attention_mask, **kwargs):
        start = unused_left_padding(attention_mask)
        output = generate(*args, input_ids=input_ids[:, start:], attention_mask=attention_mask[:, start:], **kwargs)
        output.sequences = torch.cat([input_ids[:, :start], output.sequences], dim=1)
        return output

    return generate_from_used_columns

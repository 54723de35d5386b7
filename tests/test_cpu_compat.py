"""Each CPU-mode fix, checked in a fresh interpreter that has the CPU site folder on PYTHONPATH, the way
the launchers start every torchrun rank and Ray worker."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

CPU_SITE = REPO_ROOT / "training" / "cpu_site"


def run_python(code: str, site: Path | None = CPU_SITE, **env) -> str:
    """`code` in a new interpreter with `site` (CPU mode's unless told otherwise; None: no site) on PYTHONPATH."""
    environment = {**os.environ, **env}
    environment["PYTHONPATH"] = os.pathsep.join(([str(site)] if site else []) + [str(REPO_ROOT)])
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.e2e
def test_device_functions_backend_and_registry():
    out = run_python("""
        import torch
        for name in ("empty_cache", "memory_allocated", "mem_get_info", "manual_seed", "get_rng_state"):
            assert hasattr(torch.cpu, name), name
        free, total = torch.cpu.mem_get_info()
        assert 0 < free <= total
        state = torch.cpu.get_rng_state(); torch.cpu.set_rng_state(state)
        from verl.utils.device import get_nccl_backend
        from verl.workers.rollout.base import get_rollout_class
        print(get_nccl_backend(), get_rollout_class("hf", "sync").__name__)
    """)
    assert out.split() == ["gloo", "CPUHFRollout"]


@pytest.mark.e2e
def test_without_cpu_mode_verl_is_untouched():
    out = run_python(
        """
        import torch
        from verl.utils.device import get_nccl_backend
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY
        print(get_nccl_backend(), ("hf", "sync") in _ROLLOUT_REGISTRY, hasattr(torch.cpu, "empty_cache"))
    """,
        site=None,
    )
    assert out.split() == ["nccl", "False", "False"]


@pytest.mark.e2e
@pytest.mark.parametrize("dtype, expected", [("fp32", "torch.float32"), ("bf16", "torch.bfloat16")])
def test_cpu_autocast_follows_the_cpu_dtype(dtype, expected):
    out = run_python(
        """
        import torch
        x = torch.ones(2, 2)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            print((x @ x).dtype)
    """,
        JUDGE_CPU_DTYPE=dtype,
    )
    assert out.strip() == expected


@pytest.mark.e2e
def test_gloo_collectives_accept_duplicate_backends_and_0d_all_gather(tmp_path):
    out = run_python(f"""
        import torch, torch.distributed as dist
        dist.init_process_group("cpu:gloo,cpu:gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
        gathered = [torch.zeros(1)]
        dist.all_gather(gathered, torch.tensor(3.0))
        print(dist.get_backend(), gathered[0].item())
        dist.destroy_process_group()
    """)
    assert out.split() == ["gloo", "3.0"]


@pytest.mark.e2e
def test_flash_attention_request_falls_back_to_sdpa(tiny_model_dir):
    out = run_python(f"""
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("{tiny_model_dir}", attn_implementation="flash_attention_2")
        print(model.config._attn_implementation)
    """)
    assert out.strip() == "sdpa"


@pytest.mark.e2e
def test_fsdp1_syncs_cpu_modules_and_sft_trainer_keeps_fp32(tmp_path):
    out = run_python(f"""
        import torch, torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        import verl.trainer.fsdp_sft_trainer as sft
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
        wrapped = FSDP(torch.nn.Linear(4, 4), sync_module_states=True, device_id=torch.device("cpu"))
        precision = sft.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        print(type(wrapped).__name__, precision.param_dtype)
        dist.destroy_process_group()
    """)
    assert out.split() == ["FullyShardedDataParallel", "torch.float32"]


@pytest.mark.e2e
def test_the_sdpa_site_of_a_gpu_without_flash_attention_applies_that_fix_alone(tiny_model_dir):
    """What training/sdpa_site gives every process: SDPA for flash_attention_2, none of the CPU fixes (the NCCL
    backend stays)."""
    out = run_python(
        f"""
        from transformers import AutoModelForCausalLM
        from verl.utils.device import get_nccl_backend
        model = AutoModelForCausalLM.from_pretrained("{tiny_model_dir}", attn_implementation="flash_attention_2")
        print(model.config._attn_implementation, get_nccl_backend())
    """,
        site=REPO_ROOT / "training" / "sdpa_site",
    )
    assert out.split() == ["sdpa", "nccl"]


def test_install_refuses_a_gpu_machine(monkeypatch):
    from training import cpu_compat

    monkeypatch.setattr(cpu_compat.os, "listdir", lambda path: ["null", "nvidia0", "nvidiactl"])
    with pytest.raises(RuntimeError, match="GPU"):
        cpu_compat.install({})


def test_invalid_cpu_dtype_is_rejected(monkeypatch):
    from training import cpu_compat

    monkeypatch.setenv("JUDGE_CPU_DTYPE", "fp8")
    with pytest.raises(ValueError, match="fp32 or bf16"):
        cpu_compat.cpu_dtype()


@pytest.mark.e2e
def test_sft_loss_is_averaged_over_cpu_ranks(tmp_path):
    """Two gloo ranks with losses 1 and 3 both report 2 from verl's SFT validation step."""
    code = textwrap.dedent(f"""
        import sys, types, torch, torch.distributed as dist
        import verl.trainer.fsdp_sft_trainer as sft
        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=rank, world_size=2)
        trainer = object.__new__(sft.FSDPSFTTrainer)
        trainer.fsdp_model = types.SimpleNamespace(eval=lambda: None)
        trainer.device_mesh = types.SimpleNamespace(size=lambda dim=None: 2)
        trainer._compute_loss_and_backward = lambda batch, do_backward: torch.tensor(1.0 + 2 * rank)
        print(trainer.validation_step(None).item())
        dist.destroy_process_group()
    """)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CPU_SITE), str(REPO_ROOT)])}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(rank)],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), [err[-2000:] for _, err in outputs]
    assert [float(out) for out, _ in outputs] == [2.0, 2.0]


@pytest.mark.e2e
@pytest.mark.parametrize("entry_points, expected", [({"fake_trainer": "main"}, "patched"), ({}, "unpatched")])
def test_a_module_run_with_python_m_gets_its_patches(tmp_path, entry_points, expected):
    """`python -m <module>` (how torchrun starts verl's SFT trainer) runs the module as __main__, where an
    import hook never sees it: modules with an entry point are imported, patched, then their entry called."""
    (tmp_path / "fake_trainer.py").write_text(
        'STATE = "unpatched"\ndef main():\n    print(STATE)\nif __name__ == "__main__":\n    main()\n'
    )
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        from training import cpu_compat
        def patch(module):
            module.STATE = "patched"
        cpu_compat.install({{"fake_trainer": [patch]}}, {entry_points!r})
    """)
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tmp_path), str(REPO_ROOT)])}
    result = subprocess.run(
        [sys.executable, "-m", "fake_trainer"], env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == expected


# The CPU-mode HF rollout of {model}, built with RolloutConfig(name="hf", {config}), and `prompts`, its input batch.
HF_ROLLOUT_SETUP = """
    import torch
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import get_rollout_class
    config = RolloutConfig(name="hf", {config})
    rollout = get_rollout_class("hf", "sync")(config, HFModelConfig(path="{model}"), None)

    def prompts(input_ids, mask, **meta_info):
        return DataProto.from_dict(
            tensors={{"input_ids": input_ids, "attention_mask": mask,
                     "position_ids": compute_position_id_with_mask(mask)}},
            meta_info={{"eos_token_id": -1, "pad_token_id": 0, **meta_info}})
"""


@pytest.mark.e2e
def test_hf_rollout_gives_each_new_token_its_own_position(tiny_model_dir):
    """verl's HFRollout passes the prompt's position ids to generate(); the CPU rollout must not let every
    generated token reuse the last prompt position (rows of 3 and 5 prompt tokens, left-padded)."""
    out = run_python(
        HF_ROLLOUT_SETUP.format(model=tiny_model_dir, config="prompt_length=5, response_length=4, do_sample=False")
        + """
    import functools
    positions = []
    forward = rollout.module.forward
    @functools.wraps(forward)
    def recording_forward(*args, **kwargs):
        positions.append(kwargs["position_ids"][:, -1].tolist())
        return forward(*args, **kwargs)
    rollout.module.forward = recording_forward
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    rollout.generate_sequences(prompts(torch.full((2, 5), 7), mask, do_sample=False))
    print(positions)
    """
    )
    assert out.strip() == "[[2, 4], [3, 5], [4, 6], [5, 7]]"


@pytest.mark.e2e
def test_hf_rollout_samples_the_same_answers_at_the_same_step_whatever_the_global_random_state(tiny_model_dir):
    """verl's worker hands the rollout a random state torch seeded at random (two GRPO runs of one config sampled
    different answers at step 1): the same batch sampled twice at step 3, with the global state reseeded in
    between, gets the same answers; at step 4 others; and sampling leaves the trainer's random state alone."""
    out = run_python(
        HF_ROLLOUT_SETUP.format(
            model=tiny_model_dir, config="prompt_length=5, response_length=8, do_sample=True, temperature=1.0"
        )
        + """
    mask = torch.ones(4, 5, dtype=torch.long)
    def sample(step):
        batch = prompts(torch.full((4, 5), 7), mask, global_steps=step)
        return rollout.generate_sequences(batch).batch["responses"]
    first = sample(3)
    torch.seed()
    state = torch.get_rng_state()
    again = sample(3)
    print(torch.equal(first, again), torch.equal(first, sample(4)), torch.equal(state, torch.get_rng_state()))
    """
    )
    assert out.split() == ["True", "False", "True"]


@pytest.mark.e2e
def test_hf_rollout_generates_at_most_max_num_batched_tokens_per_call_in_the_batchs_order(tiny_model_dir):
    """verl validates on its whole val set in one batch: 5 prompts of 5 tokens with 3 new tokens each, 16 tokens a
    call, are generated 2, 2 and 1 at a time, and the returned rows keep the prompts' order."""
    out = run_python(
        HF_ROLLOUT_SETUP.format(
            model=tiny_model_dir,
            config="prompt_length=5, response_length=3, do_sample=False, max_num_batched_tokens=16",
        )
        + """
    sizes = []
    generate = rollout.module.generate
    def recording_generate(*args, input_ids, **kwargs):
        sizes.append(input_ids.shape[0])
        return generate(*args, input_ids=input_ids, **kwargs)
    rollout.module.generate = recording_generate
    input_ids = torch.arange(3, 28).reshape(5, 5)
    output = rollout.generate_sequences(prompts(input_ids, torch.ones(5, 5, dtype=torch.long), do_sample=False))
    print(sizes, torch.equal(output.batch["prompts"], input_ids), output.batch["responses"].shape[0])
    """
    )
    assert out.split() == ["[2,", "2,", "1]", "True", "5"]


PADDED_FORWARD_SETUP = """
    import types, torch
    from transformers import AutoModelForCausalLM
    from training import cpu_compat
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained("{model}", dtype=torch.float32, attn_implementation="sdpa")
    vocab = model.config.vocab_size

    def gradients():
        values = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        model.zero_grad(set_to_none=True)
        return values

    def report(name, verl_value, patched_value, verl_grad, patched_grad):
        value_error = (verl_value - patched_value).abs().max().item()
        grad_error = ((verl_grad - patched_grad).abs().max() / verl_grad.abs().max()).item()
        print(name, value_error < 1e-5, grad_error < 1e-4, patched_grad.abs().max().item() > 0)
"""


@pytest.mark.e2e
def test_sft_loss_over_the_trained_span_is_verls_loss(tiny_model_dir):
    """verl's own SFT loss (no padding removal) and the CPU-mode one on right-padded rows whose trained tokens
    start and end at different columns: the same loss and gradients, for training and validation, and with
    the dp token balance on."""
    out = run_python(
        PADDED_FORWARD_SETUP.format(model=tiny_model_dir)
        + """
    import torch.distributed as dist
    import verl.trainer.fsdp_sft_trainer as sft
    verl_loss = sft.FSDPSFTTrainer._compute_loss_and_backward
    cpu_compat._sft_loss_over_trained_tokens(sft)
    patched_loss = sft.FSDPSFTTrainer._compute_loss_and_backward
    assert patched_loss is not verl_loss
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    lengths, prompts, width = [9, 20, 14], [4, 11, 6], 24
    ids = torch.randint(3, vocab, (3, width))
    mask = torch.zeros(3, width, dtype=torch.long)
    trained = torch.zeros(3, width, dtype=torch.long)
    positions = torch.zeros(3, width, dtype=torch.long)
    for row, (length, prompt) in enumerate(zip(lengths, prompts)):
        mask[row, :length] = 1
        trained[row, prompt:length] = 1
        positions[row, :length] = torch.arange(length)
        ids[row, length:] = 0
    for balance in (False, True):
        trainer = types.SimpleNamespace(
            use_remove_padding=False, device_name="cpu", fsdp_model=model, model=model,
            config=types.SimpleNamespace(ulysses_sequence_parallel_size=1,
                                         data=types.SimpleNamespace(balance_dp_token=balance)))
        def batch():
            return {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "loss_mask": trained}
        verl_value = verl_loss(trainer, batch(), n_micro_batches=2)
        verl_grad = gradients()
        patched_value = patched_loss(trainer, batch(), n_micro_batches=2)
        report(f"train-balance-{balance}", verl_value, patched_value, verl_grad, gradients())
    with torch.no_grad():
        print("validation", abs(verl_loss(trainer, batch(), False).item()
                                - patched_loss(trainer, batch(), False).item()) < 1e-5)
    dist.destroy_process_group()
    """,
        site=None,
    )
    expected = "train-balance-False True True True train-balance-True True True True validation True"
    assert out.split() == expected.split()


@pytest.mark.e2e
def test_actor_log_probs_from_the_response_head_are_verls(tiny_model_dir):
    """verl's actor forward (no padding removal) and the CPU-mode one, which drops the left-padding columns no
    row uses and heads the responses only, on left-padded prompts with right-padded responses: the same
    log-probabilities, entropies and gradients."""
    out = run_python(
        PADDED_FORWARD_SETUP.format(model=tiny_model_dir)
        + """
    from omegaconf import OmegaConf
    import torch.distributed as dist
    import verl.workers.actor.dp_actor as dp_actor
    from verl.utils.model import compute_position_id_with_mask
    verl_forward = dp_actor.DataParallelPPOActor._forward_micro_batch
    cpu_compat._actor_head_on_responses_only(dp_actor)
    patched_forward = dp_actor.DataParallelPPOActor._forward_micro_batch
    assert patched_forward is not verl_forward
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    config = OmegaConf.create({"use_remove_padding": False, "use_fused_kernels": False, "use_torch_compile": False,
                               "ulysses_sequence_parallel_size": 1, "entropy_from_logits_with_chunking": False,
                               "entropy_checkpointing": False, "fsdp_config": {"dtype": "float32"}})
    actor = dp_actor.DataParallelPPOActor(config, model, actor_optimizer=None)
    prompt_width, response_width = 12, 6
    mask = torch.zeros(3, prompt_width + response_width, dtype=torch.long)
    for row, (prompt, response) in enumerate([(5, 6), (8, 2), (3, 4)]):
        mask[row, prompt_width - prompt : prompt_width + response] = 1
    ids = torch.randint(3, vocab, mask.shape) * mask
    micro_batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask),
                   "responses": ids[:, prompt_width:]}
    results = {}
    for name, forward in (("verl", verl_forward), ("patched", patched_forward)):
        entropy, log_probs = forward(actor, micro_batch, temperature=0.7, calculate_entropy=True)
        (log_probs * mask[:, prompt_width:]).sum().backward()
        results[name] = (entropy, log_probs, gradients())
    (verl_entropy, verl_log_probs, verl_grad), (entropy, log_probs, grad) = results["verl"], results["patched"]
    print("entropy", (verl_entropy - entropy).abs().max().item() < 1e-5)
    report("log_probs", verl_log_probs, log_probs, verl_grad, grad)
    dist.destroy_process_group()
    """,
        site=None,
    )
    assert out.split()[-6:] == ["entropy", "True", "log_probs", "True", "True", "True"]  # after verl's own prints


@pytest.mark.e2e
def test_cpu_mode_installs_the_padded_forward_shortcuts():
    out = run_python("""
        import verl.trainer.fsdp_sft_trainer as sft
        import verl.workers.actor.dp_actor as dp_actor
        print(sft.FSDPSFTTrainer._compute_loss_and_backward.__module__)
        print(dp_actor.DataParallelPPOActor._forward_micro_batch.__module__)
    """)
    assert out.split() == ["training.cpu_compat", "training.cpu_compat"]


@pytest.mark.e2e
def test_hf_rollout_leaves_unused_left_padding_out_and_generates_the_same(tiny_model_dir):
    """Prompts of 3 and 5 tokens left-padded to 9: generation sees 5 columns, and the greedy responses and the
    returned batch are those of a generation over all 9."""
    out = run_python(
        HF_ROLLOUT_SETUP.format(model=tiny_model_dir, config="prompt_length=9, response_length=6, do_sample=False")
        + """
    mask = torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1, 1]])
    torch.manual_seed(0)
    batch = prompts(torch.randint(3, 50, (2, 9)) * mask, mask, do_sample=False)
    prefill_widths = []
    def record_prefill(module, args, kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            prefill_widths.append(kwargs["input_ids"].shape[1])
    rollout.module.register_forward_pre_hook(record_prefill, with_kwargs=True)
    trimmed_generate = rollout.module.generate
    rollout.module.generate = trimmed_generate.__wrapped__  # without the trimming: verl's HFRollout, fixed
    full = rollout.generate_sequences(batch).batch
    rollout.module.generate = trimmed_generate
    trimmed = rollout.generate_sequences(batch).batch
    same = all(torch.equal(full[key], trimmed[key]) for key in full.keys())
    print(prefill_widths, same, full["responses"].shape[1])
    """
    )
    assert out.split() == ["[9,", "5]", "True", "6"]

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


@pytest.mark.e2e
def test_hf_rollout_gives_each_new_token_its_own_position(tiny_model_dir):
    """verl's HFRollout passes the prompt's position ids to generate(); the CPU rollout must not let every
    generated token reuse the last prompt position (rows of 3 and 5 prompt tokens, left-padded)."""
    out = run_python(f"""
        import functools, torch
        from verl import DataProto
        from verl.utils.model import compute_position_id_with_mask
        from verl.workers.config import HFModelConfig, RolloutConfig
        from verl.workers.rollout.base import get_rollout_class
        config = RolloutConfig(name="hf", prompt_length=5, response_length=4, do_sample=False)
        rollout = get_rollout_class("hf", "sync")(config, HFModelConfig(path="{tiny_model_dir}"), None)
        positions = []
        forward = rollout.module.forward
        @functools.wraps(forward)
        def recording_forward(*args, **kwargs):
            positions.append(kwargs["position_ids"][:, -1].tolist())
            return forward(*args, **kwargs)
        rollout.module.forward = recording_forward
        mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
        rollout.generate_sequences(DataProto.from_dict(
            tensors={{"input_ids": torch.full((2, 5), 7), "attention_mask": mask,
                     "position_ids": compute_position_id_with_mask(mask)}},
            meta_info={{"eos_token_id": -1, "pad_token_id": 0, "do_sample": False}}))
        print(positions)
    """)
    assert out.strip() == "[[2, 4], [3, 5], [4, 6], [5, 7]]"

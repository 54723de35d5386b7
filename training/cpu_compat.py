"""CPU mode for verl 0.6.1: the fixes that let its trainers run on a machine without a GPU.

verl 0.6.1 assumes CUDA in a handful of places (docs/verl-0.6.1-on-cpu.md lists them). Each fix below
is one small function, applied right after its target module is first imported, so that it reaches
the launcher process, every torchrun rank and every Ray worker alike: the launchers put
`cpu_site/sitecustomize.py` on PYTHONPATH in CPU mode only, and that file calls `install()`.
Two of them are not fixes but exact shortcuts for the padded forwards CPU mode runs (no flash-attn, so no
padding removal): the same losses and gradients, computed on the positions that count.

Several fixes touch private torch internals; torch is pinned in CI and tests/test_cpu_compat.py checks
each one. Nothing here runs when a GPU is present: `install()` refuses to. The one exception is the SDPA
fallback, which a GPU without flash-attn gets alone (`install_sdpa_fallback()`, from `sdpa_site/`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

CPU_DTYPE_ENV = "JUDGE_CPU_DTYPE"  # "fp32" (default) or "bf16"
HF_ROLLOUT_CLASS = "training.hf_rollout.CPUHFRollout"


def cpu_dtype() -> str:
    value = os.environ.get(CPU_DTYPE_ENV, "fp32")
    if value not in ("fp32", "bf16"):
        raise ValueError(f"{CPU_DTYPE_ENV} must be fp32 or bf16, got {value!r}")
    return value


# --- torch -------------------------------------------------------------------------------------------


def _add_cpu_device_functions(torch) -> None:
    """verl calls get_torch_device().X for CUDA-only X; on CPU these are no-ops or host equivalents."""
    import psutil

    def mem_get_info(device=None):
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    host_equivalents = {
        "empty_cache": lambda: None,
        "ipc_collect": lambda: None,
        "reset_peak_memory_stats": lambda device=None: None,
        "set_per_process_memory_fraction": lambda fraction, device=None: None,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "mem_get_info": mem_get_info,
        "get_device_name": lambda device=None: "cpu",
        "manual_seed": torch.manual_seed,
        "manual_seed_all": torch.manual_seed,
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
    }
    for name, function in host_equivalents.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, function)


def _disable_bf16_autocast_on_cpu(torch) -> None:
    """verl's trainers hard-code bf16 autocast; CPUs without bf16 matmul run it several times slower
    than fp32, so in fp32 CPU mode a CPU autocast region runs in full precision instead."""
    if cpu_dtype() != "fp32":
        return
    original = torch.amp.autocast_mode.autocast

    class Fp32CpuAutocast(original):
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            if device_type == "cpu":
                enabled = False
            super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    torch.autocast = Fp32CpuAutocast
    torch.amp.autocast = Fp32CpuAutocast


def _gloo_friendly_collectives(torch) -> None:
    """Two things NCCL tolerates and gloo does not: a backend string naming the same device twice
    (verl builds "cpu:gloo,cpu:gloo" on CPU) and all_gather of a 0-d tensor into 1-element tensors."""
    import torch.distributed as dist

    original_init = dist.init_process_group
    original_all_gather = dist.all_gather

    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str) and "," in backend:
            pairs = dict.fromkeys(part.strip() for part in backend.split(","))
            backend = ",".join(pairs) if len(pairs) > 1 else next(iter(pairs)).split(":")[-1]
        return original_init(backend, *args, **kwargs)

    def all_gather(tensor_list, tensor, *args, **kwargs):
        if tensor.dim() == 0 and tensor_list and tensor_list[0].dim() == 1:
            tensor = tensor.reshape(1)
        return original_all_gather(tensor_list, tensor, *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.all_gather = all_gather


def _allow_fsdp1_sync_of_cpu_modules(init_utils) -> None:
    """FSDP1's sync_module_states refuses CPU modules up front; its broadcast itself works over gloo."""
    init_utils._check_module_states_for_sync_module_states = lambda module_states: None


def _flash_attention_falls_back_to_sdpa(modeling_utils) -> None:
    """verl asks for flash_attention_2 in several places; without flash_attn use PyTorch's SDPA."""
    from transformers.utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        return
    model_class = modeling_utils.PreTrainedModel
    original = model_class._check_and_adjust_attn_implementation

    def check_and_adjust(self, attn_implementation, is_init_check=False):
        if isinstance(attn_implementation, str) and attn_implementation.startswith("flash_attention"):
            attn_implementation = "sdpa"
        return original(self, attn_implementation, is_init_check)

    model_class._check_and_adjust_attn_implementation = check_and_adjust


# --- verl --------------------------------------------------------------------------------------------


def _gloo_backend(device_module) -> None:
    """get_nccl_backend() returns "nccl" unless on NPU; torch's CPU build has only gloo."""
    device_module.get_nccl_backend = lambda: "gloo"


def _unpinned_cpu_offload(fsdp_utils) -> None:
    """The reference model is forced to CPUOffloadPolicy(pin_memory=True); pinning needs an accelerator."""
    policy_class = fsdp_utils.CPUOffloadPolicy
    if policy_class is None:
        return

    def unpinned_policy(*args, **kwargs):
        kwargs["pin_memory"] = False
        return policy_class(*args, **kwargs)

    fsdp_utils.CPUOffloadPolicy = unpinned_policy


def _fp32_mixed_precision_in_sft(sft_trainer) -> None:
    """The SFT trainer hard-codes bf16 FSDP parameters; in fp32 CPU mode keep them in fp32."""
    if cpu_dtype() != "fp32":
        return
    import torch

    def fp32(factory: Callable) -> Callable:
        def build(*args, **kwargs):
            kwargs["param_dtype"] = torch.float32
            return factory(*args, **kwargs)

        return build

    sft_trainer.MixedPrecision = fp32(sft_trainer.MixedPrecision)
    sft_trainer.MixedPrecisionPolicy = fp32(sft_trainer.MixedPrecisionPolicy)


def _average_sft_loss_over_cpu_ranks(sft_trainer) -> None:
    """The SFT trainer reduces its logged train / val loss over ranks only on CUDA (ReduceOp.AVG, which gloo
    lacks) or NPU (SUM, then a division); on CPU each rank would log its own loss. Its NPU branch is what
    gloo can run, and those two reductions are the module's only use of the flag."""
    sft_trainer.is_npu_available = True


def _sft_loss_over_trained_tokens(sft_trainer) -> None:
    """Without padding removal the SFT loss ran the model on every column up to max_length and the LM head on
    every position; training/padded_forwards.py computes the same loss on the trained span only."""
    from training.padded_forwards import sft_micro_batch_loss

    trainer = sft_trainer.FSDPSFTTrainer
    original = trainer._compute_loss_and_backward

    def compute(self, batch, do_backward=True, n_micro_batches=1):
        if self.use_remove_padding or self.config.ulysses_sequence_parallel_size > 1:
            return original(self, batch, do_backward, n_micro_batches)
        return sft_micro_batch_loss(self, batch, do_backward, n_micro_batches)

    trainer._compute_loss_and_backward = compute


def _actor_head_on_responses_only(dp_actor) -> None:
    """Without padding removal the actor and reference forwards ran the LM head on the whole left-padded
    prompt to keep the responses' log-probabilities; they now skip unused padding and head the responses only."""
    from training.padded_forwards import head_on_last, without_unused_left_padding

    actor = dp_actor.DataParallelPPOActor
    original = actor._forward_micro_batch

    def forward(self, micro_batch, temperature, calculate_entropy=False):
        padded_path = not (self.use_remove_padding or self.use_fused_kernels or self.use_ulysses_sp)
        if not padded_path or "multi_modal_inputs" in micro_batch:
            return original(self, micro_batch, temperature, calculate_entropy)
        with head_on_last(self.actor_module, micro_batch["responses"].size(-1) + 1):
            return original(self, without_unused_left_padding(micro_batch), temperature, calculate_entropy)

    actor._forward_micro_batch = forward


def _register_hf_rollout(rollout_base) -> None:
    """verl 0.6.1 registers only vLLM and SGLang rollouts; CPU mode generates with plain HF."""
    rollout_base._ROLLOUT_REGISTRY[("hf", "sync")] = HF_ROLLOUT_CLASS


def _no_ref_offload_in_fsdp1(fsdp_workers) -> None:
    """FSDP1 forces CPUOffload(offload_params=True) on the reference model, which pins memory: on CPU the
    parameters already live in host memory, so offloading is dropped."""
    import torch.distributed.fsdp as fsdp

    original = fsdp.CPUOffload

    def no_offload(*args, **kwargs):
        return original(offload_params=False)

    fsdp.CPUOffload = no_offload


PATCHES: dict[str, list[Callable]] = {
    "torch": [_add_cpu_device_functions, _disable_bf16_autocast_on_cpu, _gloo_friendly_collectives],
    "torch.distributed.fsdp._init_utils": [_allow_fsdp1_sync_of_cpu_modules],
    "transformers.modeling_utils": [_flash_attention_falls_back_to_sdpa],
    "verl.utils.device": [_gloo_backend],
    "verl.utils.fsdp_utils": [_unpinned_cpu_offload],
    "verl.trainer.fsdp_sft_trainer": [
        _fp32_mixed_precision_in_sft,
        _average_sft_loss_over_cpu_ranks,
        _sft_loss_over_trained_tokens,
    ],
    "verl.workers.actor.dp_actor": [_actor_head_on_responses_only],
    "verl.workers.rollout.base": [_register_hf_rollout],
    "verl.workers.fsdp_workers": [_no_ref_offload_in_fsdp1],
}
SDPA_FALLBACK_PATCHES: dict[str, list[Callable]] = {
    "transformers.modeling_utils": [_flash_attention_falls_back_to_sdpa],
}


# Patched modules that the launchers run with `python -m` (torchrun -m), and the function their
# `if __name__ == "__main__"` block calls. runpy runs such a module's code as __main__, taking the code from
# its loader (get_code) rather than through exec_module, so its patches would never be applied; instead the
# patched module is imported under its own name and that function is called.
MAIN_ENTRY_POINTS = {"verl.trainer.fsdp_sft_trainer": "main"}


class _PatchingLoader(importlib.abc.Loader):
    """Runs the wrapped loader, then the patches of that module."""

    def __init__(self, loader, patches, entry_point: str | None = None):
        self._loader = loader
        self._patches = patches
        self._entry_point = entry_point

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for patch in self._patches:
            patch(module)

    def get_code(self, fullname):
        if self._entry_point is None:
            return self._loader.get_code(fullname)
        source = f"import importlib\nimportlib.import_module({fullname!r}).{self._entry_point}()\n"
        return compile(source, f"<{fullname} with CPU-mode patches>", "exec")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, list[Callable]], entry_points: dict[str, str]):
        self._patches = patches
        self._entry_points = entry_points

    def find_spec(self, fullname, path, target=None):
        if fullname not in self._patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, self._patches[fullname], self._entry_points.get(fullname))
        return spec


def has_accelerator() -> bool:
    """True when an NVIDIA device node exists (checked without importing torch)."""
    return any(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev"))


def install(patches: dict[str, list[Callable]] = PATCHES, entry_points: dict[str, str] = MAIN_ENTRY_POINTS) -> None:
    """Apply every patch when its module is imported (at once for modules already imported), also when the
    module is run with `python -m` if `entry_points` names the function its __main__ block calls."""
    if has_accelerator():
        raise RuntimeError("CPU mode was requested on a machine with a GPU; unset it to use the GPU")
    _install(patches, entry_points)


def install_sdpa_fallback() -> None:
    """The one fix a GPU without flash-attn needs (training/sdpa_site): SDPA where verl asks for flash-attn."""
    _install(SDPA_FALLBACK_PATCHES, {})


def _install(patches: dict[str, list[Callable]], entry_points: dict[str, str]) -> None:
    if any(isinstance(finder, _PatchingFinder) for finder in sys.meta_path):
        return
    pending = {}
    for name, module_patches in patches.items():
        if name in sys.modules:
            for patch in module_patches:
                patch(sys.modules[name])
        else:
            pending[name] = module_patches
    sys.meta_path.insert(0, _PatchingFinder(pending, entry_points))

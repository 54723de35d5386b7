"""verl FSDP checkpoints -> plain Hugging Face model directories with a judge.json.

    export_causal_lm(checkpoint, out_dir)             SFT checkpoints (global_step_N/) and PPO actor checkpoints
                                                      (global_step_N/actor/): <Arch>ForCausalLM, judge kind generative;
                                                      with as_judge=False (an RL policy) no judge.json but export.json
    export_scalar_judge(checkpoint, out_dir, val_file) Bradley-Terry checkpoints: <Arch>ForSequenceClassification with
                                                      num_labels=1, judge kind scalar, reward_center / reward_scale =
                                                      mean / std of the validation rewards of the exported model

    python -m training.export {causal-lm,scalar} CHECKPOINT OUT [options]
    python -m training.export causal-lm --not-a-judge CHECKPOINT OUT   (a policy, not a judge)

CHECKPOINT may be a global_step_N folder, a PPO step's folder (its actor/ is used) or a run's save folder
(its latest checkpoint). The shards are merged on CPU by their DTensor placements, in the checkpoint's own
dtype unless `dtype` asks for another, and loaded into the model class with every key checked. Each export
is written next to OUT and moved into place when complete, so OUT never holds a half-written or stale model.
The scalar model keeps the trained class and weight names, so it gives the trained model's rewards;
transformers' AutoModelForSequenceClassification and AutoModelForTokenClassification (verl's reward-model
worker; its head bias, absent here, initialises to zero) and vLLM's classify runner load it.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import statistics
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from judge_rewards.protocol.judge_spec import PROMPT_FORMATS, SPEC_FILE, JudgeSpec

FSDP_CONFIG_FILE = "fsdp_config.json"
HF_SUBDIR = "huggingface"  # where verl's checkpoint manager saves the config and tokenizer
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SCORING_BATCH_SIZE = 8
# A model that is not a judge (an RL policy) gets no judge.json, which would tell the judge server to serve
# it as one; what it was trained with goes here instead.
EXPORT_RECORD_FILE = "export.json"

log = logging.getLogger(__name__)


# --- checkpoints -------------------------------------------------------------------------------------


def resolve_checkpoint(path: str | Path) -> Path:
    """The folder that holds the FSDP shards: `path`, its actor/ subfolder, or a save folder's latest step."""
    path = Path(path)
    if (path / FSDP_CONFIG_FILE).is_file():
        return path
    if (path / "actor" / FSDP_CONFIG_FILE).is_file():
        return path / "actor"
    tracker = path / CHECKPOINT_TRACKER
    if tracker.is_file():
        return resolve_checkpoint(path / f"global_step_{tracker.read_text().strip()}")
    raise FileNotFoundError(
        f"{path}: not a verl FSDP checkpoint (no {FSDP_CONFIG_FILE}, actor/ or {CHECKPOINT_TRACKER})"
    )


def checkpoint_step(checkpoint: Path) -> int | None:
    """N of the global_step_N folder the checkpoint lives in."""
    for part in reversed(checkpoint.resolve().parts):
        match = re.fullmatch(r"global_step_(\d+)", part)
        if match:
            return int(match.group(1))
    return None


def assemble_shards(
    name: str, local_tensors: list[torch.Tensor], mesh: torch.Tensor, placements, shape: torch.Size
) -> torch.Tensor:
    """The whole tensor from each rank's local shard: `mesh` holds the ranks laid out as the device mesh, and
    each mesh dimension's placement says whether its ranks hold copies (Replicate) or consecutive chunks
    along a tensor dimension (Shard, torch.chunk sizes, so uneven last chunks are fine)."""

    def assemble(ranks: torch.Tensor, placements) -> torch.Tensor:
        if ranks.dim() == 0:
            return local_tensors[int(ranks)]
        placement, rest = placements[0], placements[1:]
        if placement.is_replicate():
            return assemble(ranks[0], rest)
        if placement.is_shard():
            return torch.cat([assemble(sub, rest) for sub in ranks], dim=placement.dim)
        raise ValueError(f"{name}: placement {placement} cannot be merged")

    tensor = assemble(mesh, tuple(placements))
    if tensor.shape != shape:
        raise ValueError(f"{name}: merged shape {tuple(tensor.shape)} differs from the recorded {tuple(shape)}")
    return tensor


def _full_tensor(name: str, pieces: list) -> torch.Tensor:
    """The whole tensor from every rank's shard, in rank order: DTensors, or the plain tensors FSDP1 saves
    when a single process holds everything (it then runs unsharded)."""
    first = pieces[0]
    if isinstance(first, DTensor):
        return assemble_shards(
            name, [piece._local_tensor for piece in pieces], first.device_mesh.mesh, first.placements, first.shape
        )
    if isinstance(first, torch.Tensor) and len(pieces) == 1:
        return first
    raise ValueError(
        f"{name}: expected DTensor shards (FSDP / FSDP2 sharded state), got {type(first).__name__} "
        f"from {len(pieces)} ranks"
    )


def merged_state_dict(checkpoint: Path, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The full model state of an FSDP checkpoint, on CPU, in `dtype` (default: as saved)."""
    world_size = json.loads((checkpoint / FSDP_CONFIG_FILE).read_text())["world_size"]
    # Unpickling DTensors outside a process group warns about their device mesh; merging needs no group.
    logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)
    shards = [
        torch.load(checkpoint / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu", weights_only=False)
        for rank in range(world_size)
    ]
    state = {}
    for name in shards[0]:
        tensor = _full_tensor(name, [shard[name] for shard in shards])
        state[name] = tensor.to(dtype) if dtype is not None else tensor
    return state


def _load_config(checkpoint: Path, architecture_suffix: str):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoint / HF_SUBDIR)
    architectures = config.architectures or []
    if not any(arch.endswith(architecture_suffix) for arch in architectures):
        raise ValueError(
            f"{checkpoint}: its model is {architectures}, not a *{architecture_suffix}; "
            f"use the export that matches how it was trained"
        )
    return config


def _load_tokenizer(checkpoint: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint / HF_SUBDIR)
    if not tokenizer.chat_template:
        raise ValueError(
            f"{checkpoint / HF_SUBDIR}: the tokenizer has no chat template; judges are prompted through it"
        )
    return tokenizer


def _write_model(state: dict[str, torch.Tensor], config, auto_class, out_dir: Path) -> None:
    """Load `state` into the model class with every key checked, then save it as safetensors."""
    config.torch_dtype = next(iter(state.values())).dtype
    with torch.device("meta"):
        model = auto_class.from_config(config)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as err:
        raise ValueError(f"the checkpoint's weights do not fit {type(model).__name__}: {err}") from err
    model.tie_weights()
    model.save_pretrained(out_dir, safe_serialization=True)


def _replace_dir(staging: Path, out_dir: Path) -> None:
    """Move a finished export into place; an existing OUT is replaced only if it is empty or an export."""
    if out_dir.exists():
        if any(out_dir.iterdir()) and not any((out_dir / name).is_file() for name in (SPEC_FILE, EXPORT_RECORD_FILE)):
            raise FileExistsError(
                f"{out_dir} exists and is not an export (no {SPEC_FILE} or {EXPORT_RECORD_FILE}); choose another folder"
            )
        shutil.rmtree(out_dir)
    staging.rename(out_dir)


def _staging_dir(out_dir: Path) -> Path:
    staging = out_dir.with_name(out_dir.name + ".exporting")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _trained_with(checkpoint: Path, trained_with: dict | None) -> dict:
    return {**(trained_with or {}), "steps": checkpoint_step(checkpoint), "checkpoint": str(checkpoint.resolve())}


# --- causal LM (SFT, GRPO actor) ---------------------------------------------------------------------


def export_causal_lm(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    dtype: str | None = None,
    trained_with: dict | None = None,
    as_judge: bool = True,
    prompt_format: str = "pointwise",
) -> Path:
    """A verl SFT or PPO actor checkpoint as an HF causal-LM folder (+ tokenizer, chat template, generation
    config, judge.json of kind generative with the template it was trained on, `prompt_format`;
    `as_judge=False`: export.json instead). `dtype`: fp32 | bf16 | None (as saved)."""
    from transformers import AutoModelForCausalLM

    checkpoint, out_dir = resolve_checkpoint(checkpoint_dir), Path(out_dir)
    config = _load_config(checkpoint, "ForCausalLM")
    tokenizer = _load_tokenizer(checkpoint)
    staging = _staging_dir(out_dir)
    _write_model(merged_state_dict(checkpoint, DTYPES.get(dtype)), config, AutoModelForCausalLM, staging)
    tokenizer.save_pretrained(staging)
    generation_config = checkpoint / HF_SUBDIR / "generation_config.json"
    if generation_config.is_file():
        shutil.copy(generation_config, staging / generation_config.name)
    record = _trained_with(checkpoint, trained_with)
    if as_judge:
        JudgeSpec(kind="generative", prompt_format=prompt_format, trained_with=record).save(staging)
    else:
        (staging / EXPORT_RECORD_FILE).write_text(json.dumps({"trained_with": record}, indent=2) + "\n")
    _replace_dir(staging, out_dir)
    return out_dir


# --- scalar (Bradley-Terry) --------------------------------------------------------------------------


def scalar_rewards(
    model, sequences: Sequence[Sequence[int]], pad_token_id: int, batch_size: int = SCORING_BATCH_SIZE
) -> list[float]:
    """Rewards of token sequences, batched by similar length and right-padded with the pad token."""
    device = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    rewards = [0.0] * len(sequences)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        length = max(len(sequences[i]) for i in indices)
        input_ids = torch.full((len(indices), length), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, index in enumerate(indices):
            input_ids[row, : len(sequences[index])] = torch.as_tensor(sequences[index])
            attention_mask[row, : len(sequences[index])] = 1
        with torch.inference_mode():
            logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
        for index, reward in zip(indices, logits[:, 0].float().tolist(), strict=True):
            rewards[index] = reward
    return rewards


def validation_summary(model_dir: Path, val_file: str, max_length: int, truncation: str) -> dict:
    """Rewards of the exported model on the validation pairs, tokenized as in training: their mean and std
    (the judge's reward_center / reward_scale) and the pairs' accuracy and Bradley-Terry loss."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from training.bt_trainer import PairDataConfig, PairDataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    pairs = PairDataset(val_file, tokenizer, PairDataConfig(max_length, truncation, need_margin=False))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, torch_dtype="auto").to(device).eval()
    sequences = [ids for chosen, rejected, _ in pairs.pairs for ids in (chosen, rejected)]
    rewards = scalar_rewards(model, sequences, tokenizer.pad_token_id)
    gaps = torch.tensor(rewards[0::2]) - torch.tensor(rewards[1::2])
    return {
        "reward_center": statistics.fmean(rewards),
        "reward_scale": statistics.pstdev(rewards),
        "pairs": len(pairs),
        "accuracy": (gaps > 0).float().mean().item(),
        "bt_loss": -torch.nn.functional.logsigmoid(gaps.double()).mean().item(),
        "truncated_sequences": len(pairs.truncated),
    }


def export_scalar_judge(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    val_file: str,
    max_length: int = 4096,
    truncation: str = "left",
    dtype: str | None = None,
    trained_with: dict | None = None,
) -> Path:
    """A Bradley-Terry checkpoint as an HF sequence-classification folder (num_labels=1) + tokenizer + chat
    template + judge.json (kind scalar, reward_center / reward_scale from the validation rewards).
    `max_length` / `truncation` tokenize the validation pairs as training did."""
    from transformers import AutoModelForSequenceClassification

    checkpoint, out_dir = resolve_checkpoint(checkpoint_dir), Path(out_dir)
    config = _load_config(checkpoint, "ForSequenceClassification")
    tokenizer = _load_tokenizer(checkpoint)
    if config.num_labels != 1 or config.pad_token_id is None or config.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(
            f"{checkpoint}: a scalar judge needs num_labels=1 and the tokenizer's pad token id "
            f"({tokenizer.pad_token_id}) in its config; it has num_labels={config.num_labels}, "
            f"pad_token_id={config.pad_token_id}"
        )
    staging = _staging_dir(out_dir)
    _write_model(merged_state_dict(checkpoint, DTYPES.get(dtype)), config, AutoModelForSequenceClassification, staging)
    tokenizer.save_pretrained(staging)
    summary = validation_summary(staging, val_file, max_length, truncation)
    if not summary["reward_scale"] > 0:
        raise ValueError(
            f"every validation reward is {summary['reward_center']}: the model does not tell responses apart"
        )
    validation = {key: summary[key] for key in ("pairs", "accuracy", "bt_loss", "truncated_sequences")}
    JudgeSpec(
        kind="scalar",
        reward_center=summary["reward_center"],
        reward_scale=summary["reward_scale"],
        trained_with={**_trained_with(checkpoint, trained_with), "val_file": val_file, "validation": validation},
    ).save(staging)
    _replace_dir(staging, out_dir)
    return out_dir


# --- command line ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(dest="kind", required=True)
    for kind, help_text in (
        ("causal-lm", "SFT or PPO actor checkpoint -> causal LM (generative judge)"),
        ("scalar", "Bradley-Terry checkpoint -> sequence classification (scalar judge)"),
    ):
        sub = subparsers.add_parser(kind, help=help_text)
        sub.add_argument(
            "checkpoint", help="global_step_N folder, a PPO step folder, or a run's save folder (latest step)"
        )
        sub.add_argument("out", help="output folder (replaced if it holds an earlier export)")
        sub.add_argument("--dtype", choices=sorted(DTYPES), help="weights dtype (default: as saved in the checkpoint)")
        sub.add_argument(
            "--recipe", help="recorded in trained_with (judge.json or export.json), e.g. sft, bradley-terry"
        )
        sub.add_argument("--base-model", help="recorded in trained_with")
        sub.add_argument("--train-file", help="recorded in trained_with")
    subparsers.choices["causal-lm"].add_argument(
        "--prompt-format",
        choices=PROMPT_FORMATS,
        default="pointwise",
        help=f"the judge template the model was trained on, recorded in {SPEC_FILE} (GRPO pairwise: pairwise)",
    )
    subparsers.choices["causal-lm"].add_argument(
        "--not-a-judge",
        action="store_true",
        help=f"the model is not a judge (e.g. an RL policy): no {SPEC_FILE}, its record goes to {EXPORT_RECORD_FILE}",
    )
    scalar = subparsers.choices["scalar"]
    scalar.add_argument("--val-file", required=True, help="validation pairs: reward_center / reward_scale and accuracy")
    scalar.add_argument("--max-length", type=int, default=4096, help="as in training (data.max_length)")
    scalar.add_argument("--truncation", default="left", choices=["left", "right", "error"], help="as in training")
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    recorded = {"recipe": args.recipe, "base_model": args.base_model, "train_file": args.train_file}
    trained_with = {key: value for key, value in recorded.items() if value is not None}
    try:
        if args.kind == "scalar":
            out = export_scalar_judge(
                args.checkpoint, args.out, args.val_file, args.max_length, args.truncation, args.dtype, trained_with
            )
        else:
            out = export_causal_lm(
                args.checkpoint,
                args.out,
                args.dtype,
                trained_with,
                as_judge=not args.not_a_judge,
                prompt_format=args.prompt_format,
            )
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        raise SystemExit(f"export: {err}") from err
    not_a_judge = getattr(args, "not_a_judge", False)
    print(f"exported {args.kind} {'model' if not_a_judge else 'judge'} to {out}")
    print((out / (EXPORT_RECORD_FILE if not_a_judge else SPEC_FILE)).read_text(), end="")


if __name__ == "__main__":
    main()

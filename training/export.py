"""verl FSDP checkpoints -> plain Hugging Face model directories with a judge.json.

    export_causal_lm(checkpoint, out_dir)             SFT checkpoints (global_step_N/) and PPO actor checkpoints
                                                      (global_step_N/actor/): <Arch>ForCausalLM, judge kind generative;
                                                      with as_judge=False (an RL policy) no judge.json but export.json
    export_scalar_judge(checkpoint, out_dir, val_file) Bradley-Terry checkpoints: <Arch>ForSequenceClassification with
                                                      num_labels=1, judge kind scalar, reward_center / reward_scale =
                                                      mean / std of the validation rewards of the exported model
    export_attribute_judge(checkpoint, out_dir, val_file)
                                                      attribute-regression checkpoints: <Arch>ForSequenceClassification
                                                      with one label per attribute (the checkpoint's id2label), judge
                                                      kind scalar with attributes and their weights; the validation
                                                      MSE / Pearson r per attribute of the exported model recorded

    python -m training.export {causal-lm,scalar,attributes} CHECKPOINT OUT [options]
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

import dataclasses
import json
import logging
import re
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from judge_core.protocol import templates
from judge_core.protocol.judge_spec import PROMPT_FORMATS, SPEC_FILE, JudgeSpec
from judge_core.settings import REQUIRED, Command, option, run_command

FSDP_CONFIG_FILE = "fsdp_config.json"
HF_SUBDIR = "huggingface"  # where verl's checkpoint manager saves the config and tokenizer
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SCORING_BATCH_SIZE = 8  # most sequences per forward pass of the calibration (packed: of that many longest ones)
SCORING_MAX_PADDING_FRACTION = 0.25  # most padding per forward pass (the judge server's default)
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


def _staged_model(checkpoint: Path, out_dir: Path, dtype: str | None, config, tokenizer, auto_class) -> Path:
    """A staging folder next to `out_dir` with the checkpoint's merged weights as `auto_class` and the tokenizer."""
    staging = _staging_dir(out_dir)
    _write_model(merged_state_dict(checkpoint, DTYPES.get(dtype)), config, auto_class, staging)
    tokenizer.save_pretrained(staging)
    return staging


def _check_pad_token(checkpoint: Path, config, tokenizer, judge: str) -> None:
    """Scalar judges score padded batches from the last real token: the config must know the pad token."""
    if config.pad_token_id is None or config.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(
            f"{checkpoint}: {judge} needs the tokenizer's pad token id ({tokenizer.pad_token_id}) in its config; "
            f"it has pad_token_id={config.pad_token_id}"
        )


def _scoring_model(model_dir: Path):
    """The exported sequence classifier and its tokenizer, on the GPU if there is one, for validation scores."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, torch_dtype="auto").to(device).eval()
    return AutoTokenizer.from_pretrained(model_dir), model


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
    staging = _staged_model(checkpoint, out_dir, dtype, config, tokenizer, AutoModelForCausalLM)
    generation_config = checkpoint / HF_SUBDIR / "generation_config.json"
    if generation_config.is_file():
        shutil.copy(generation_config, staging / generation_config.name)
    record = _trained_with(checkpoint, trained_with)
    if as_judge:
        pointwise, train_file = prompt_format == "pointwise", record.get("train_file")
        spec = JudgeSpec(
            "generative",
            prompt_format=prompt_format,
            reference_in_prompts=every_prompt(train_file, templates.shows_reference) if pointwise else None,
            pairwise_ties=None if pointwise else every_prompt(train_file, templates.prompt_offers_tie),
            trained_with=record,
        )
        spec.save(staging)
    else:
        (staging / EXPORT_RECORD_FILE).write_text(json.dumps({"trained_with": record}, indent=2) + "\n")
    _replace_dir(staging, out_dir)
    return out_dir


def every_prompt(train_file: str | None, holds) -> bool | None:
    """Whether the judge prompts of a parquet `train_file` (SFT `messages` or RL `prompt`) each `holds` (a test
    of a message list; for example, shows a reference answer): True if every one does, False if none does, None
    if some do or the file has none here."""
    if not train_file or not Path(train_file).is_file() or not train_file.endswith(".parquet"):
        return None
    import pyarrow.parquet as pq  # not in vLLM's serving environment, whose tests export without a train file

    names = pq.read_schema(train_file).names
    column = next((name for name in ("messages", "prompt") if name in names), None)
    if column is None:
        return None
    conversations = pq.read_table(train_file, columns=[column]).column(column).to_pylist()
    found = {holds(messages) for messages in conversations}
    return found.pop() if len(found) == 1 else None


# --- scalar (Bradley-Terry) --------------------------------------------------------------------------


def validation_rewards(model_dir: Path, val_file: str, max_length: int, truncation: str):
    """The validation pairs (a PairDataset), tokenized as in training, and the exported model's rewards of
    their sequences: pair 0's chosen and rejected, then pair 1's, and so on. Each pair's prompt is computed
    once, as the trainer and the judge server compute it (judge_models/packing.py)."""
    from judge_models.packing import use_packed_attention
    from judge_models.scalar_model import prompt_once_outputs
    from training.bt_trainer import PairDataConfig, PairDataset

    tokenizer, model = _scoring_model(model_dir)
    use_packed_attention(model)
    pairs = PairDataset(val_file, tokenizer, PairDataConfig(max_length, truncation, need_margin=False))
    groups = [[chosen, rejected] for chosen, rejected, _ in pairs.pairs]
    outputs = prompt_once_outputs(model, groups, SCORING_BATCH_SIZE * max_length)
    return pairs, [sequence[0] for group in outputs for sequence in group]


def validation_summary(pairs, rewards: list[float]) -> dict:
    """The validation rewards' mean and std (the judge's reward_center / reward_scale) and the pairs'
    accuracy and Bradley-Terry loss; `pairs` and `rewards` as validation_rewards returns them."""
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
    if config.num_labels != 1:
        raise ValueError(
            f"{checkpoint}: a scalar judge needs num_labels=1 (one reward); it has num_labels={config.num_labels}"
        )
    _check_pad_token(checkpoint, config, tokenizer, "a scalar judge")
    staging = _staged_model(checkpoint, out_dir, dtype, config, tokenizer, AutoModelForSequenceClassification)
    summary = validation_summary(*validation_rewards(staging, val_file, max_length, truncation))
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


# --- attributes (multi-aspect) -----------------------------------------------------------------------


def checkpoint_attributes(checkpoint: Path, config) -> list[str]:
    """The attribute names of a checkpoint's labels, in output order (the trainer writes them in id2label)."""
    names = [config.id2label[index] for index in range(config.num_labels)]
    if names == [f"LABEL_{index}" for index in range(config.num_labels)]:
        raise ValueError(
            f"{checkpoint}: its labels are not named after attributes ({names}): not an attribute-regression "
            "checkpoint; use the export that matches how it was trained"
        )
    return names


def validation_outputs(model_dir: Path, val_file: str, attributes: list[str], max_length: int, truncation: str):
    """The validation conversations (an AttributeDataset), tokenized as in training, and the exported model's
    outputs for them, (conversations, attributes)."""
    from judge_models.scalar_model import sequence_outputs
    from training.attribute_trainer import AttributeDataConfig, AttributeDataset

    tokenizer, model = _scoring_model(model_dir)
    rows = AttributeDataset(val_file, tokenizer, AttributeDataConfig(max_length, truncation, tuple(attributes)))
    outputs = sequence_outputs(
        model, [ids for ids, _ in rows.items], tokenizer.pad_token_id, SCORING_MAX_PADDING_FRACTION,
        max_batch_size=SCORING_BATCH_SIZE,
    )  # fmt: skip
    return rows, torch.tensor(outputs)


def attribute_summary(rows, outputs: torch.Tensor, attributes: list[str]) -> dict:
    """The validation loss, MSE and Pearson r per attribute, computed as the trainer's validation does;
    `rows` and `outputs` as validation_outputs returns them."""
    from training.attribute_trainer import attribute_metrics, attribute_totals, regression_losses

    ratings = torch.stack([ratings for _, ratings in rows.items]).float()
    totals = attribute_totals(regression_losses(outputs, ratings), outputs, ratings)
    metrics = attribute_metrics(totals, attributes, "val")
    return {
        "conversations": len(rows),
        "loss": metrics["val/loss"],
        "mse": {name: metrics[f"val/mse/{name}"] for name in attributes},
        "pearson": {name: metrics[f"val/pearson/{name}"] for name in attributes},
        "truncated_sequences": len(rows.truncated),
    }


def export_attribute_judge(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    val_file: str,
    attribute_weights: str | None = None,
    max_length: int = 4096,
    truncation: str = "left",
    dtype: str | None = None,
    trained_with: dict | None = None,
) -> Path:
    """An attribute-regression checkpoint as an HF sequence-classification folder (one label per attribute)
    + tokenizer + chat template + judge.json (kind scalar, attributes, attribute_weights: `attribute_weights`
    as name=weight,... or the HelpSteer2 paper's, see training/attributes.py; the validation summary in
    trained_with). `max_length` / `truncation` tokenize the validation conversations as training did."""
    from transformers import AutoModelForSequenceClassification

    from training.attributes import score_weights

    checkpoint, out_dir = resolve_checkpoint(checkpoint_dir), Path(out_dir)
    config = _load_config(checkpoint, "ForSequenceClassification")
    tokenizer = _load_tokenizer(checkpoint)
    _check_pad_token(checkpoint, config, tokenizer, "an attribute judge")
    attributes = checkpoint_attributes(checkpoint, config)
    weights = score_weights(attributes, attribute_weights)
    staging = _staged_model(checkpoint, out_dir, dtype, config, tokenizer, AutoModelForSequenceClassification)
    validation = attribute_summary(
        *validation_outputs(staging, val_file, attributes, max_length, truncation), attributes
    )
    JudgeSpec(
        kind="scalar",
        attributes=attributes,
        attribute_weights=weights,
        trained_with={**_trained_with(checkpoint, trained_with), "val_file": val_file, "validation": validation},
    ).save(staging)
    _replace_dir(staging, out_dir)
    return out_dir


# --- command line ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportPaths:
    """The checkpoint to export, where the model goes, and in which dtype."""

    checkpoint: str = option(
        REQUIRED, "global_step_N folder, a PPO step folder, or a run's save folder (latest step)", positional=True
    )
    out: str = option(REQUIRED, "output folder (replaced if it holds an earlier export)", positional=True)
    dtype: str | None = option(None, "weights dtype (default: as saved in the checkpoint)", choices=sorted(DTYPES))


@dataclass(frozen=True)
class TrainingRecord:
    """How the model was trained, recorded in trained_with."""

    recipe: str | None = option(None, "recorded in trained_with (judge.json or export.json), e.g. sft, bradley-terry")
    base_model: str | None = option(None, "recorded in trained_with")
    train_file: str | None = option(None, "recorded in trained_with")

    def trained_with(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@dataclass(frozen=True)
class CausalLmOptions:
    """The template a generative judge was trained on, or a model that is not a judge."""

    prompt_format: str = option(
        "pointwise",
        f"the judge template the model was trained on, recorded in {SPEC_FILE} (GRPO pairwise: pairwise)",
        choices=PROMPT_FORMATS,
    )
    not_a_judge: bool = option(
        False,
        f"the model is not a judge (e.g. an RL policy): no {SPEC_FILE}, its record goes to {EXPORT_RECORD_FILE}",
    )


@dataclass(frozen=True)
class ScalarOptions:
    """The validation pairs that calibrate a scalar judge, tokenized as in training."""

    val_file: str = option(REQUIRED, "validation pairs: reward_center / reward_scale and accuracy")
    max_length: int = option(4096, "as in training (data.max_length)")
    truncation: str = option("left", "as in training", choices=("left", "right", "error"))


@dataclass(frozen=True)
class AttributeOptions:
    """The validation conversations that measure an attribute judge, tokenized as in training, and its weights."""

    val_file: str = option(REQUIRED, "validation conversations with their ratings: MSE and Pearson r per attribute")
    attribute_weights: str | None = option(
        None, "the score's weights as name=weight,... (others 0); default: the HelpSteer2 paper's, 0 for other names"
    )
    max_length: int = option(4096, "as in training (data.max_length)")
    truncation: str = option("left", "as in training", choices=("left", "right", "error"))


def run_causal_lm(paths: ExportPaths, record: TrainingRecord, options: CausalLmOptions) -> None:
    out = export_causal_lm(
        paths.checkpoint,
        paths.out,
        paths.dtype,
        record.trained_with(),
        as_judge=not options.not_a_judge,
        prompt_format=options.prompt_format,
    )
    if options.not_a_judge:
        _print_export("causal-lm model", out / EXPORT_RECORD_FILE)
    else:
        _print_export("causal-lm judge", out / SPEC_FILE)


def run_scalar(paths: ExportPaths, record: TrainingRecord, options: ScalarOptions) -> None:
    out = export_scalar_judge(
        paths.checkpoint,
        paths.out,
        options.val_file,
        options.max_length,
        options.truncation,
        paths.dtype,
        record.trained_with(),
    )
    _print_export("scalar judge", out / SPEC_FILE)


def run_attributes(paths: ExportPaths, record: TrainingRecord, options: AttributeOptions) -> None:
    out = export_attribute_judge(
        paths.checkpoint,
        paths.out,
        options.val_file,
        options.attribute_weights,
        options.max_length,
        options.truncation,
        paths.dtype,
        record.trained_with(),
    )
    _print_export("attribute judge", out / SPEC_FILE)


def _print_export(what: str, record_file: Path) -> None:
    print(f"exported {what} to {record_file.parent}")
    print(record_file.read_text(), end="")


COMMANDS = (
    Command(
        "causal-lm",
        "SFT or PPO actor checkpoint -> causal LM (generative judge)",
        (ExportPaths, TrainingRecord, CausalLmOptions),
        run_causal_lm,
    ),
    Command(
        "scalar",
        "Bradley-Terry checkpoint -> sequence classification (scalar judge)",
        (ExportPaths, TrainingRecord, ScalarOptions),
        run_scalar,
    ),
    Command(
        "attributes",
        "attribute-regression checkpoint -> sequence classification, one label per attribute (multi-aspect judge)",
        (ExportPaths, TrainingRecord, AttributeOptions),
        run_attributes,
    ),
)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    failures = (FileNotFoundError, FileExistsError, ValueError)
    run_command("python -m training.export", __doc__, COMMANDS, failures, argv)


if __name__ == "__main__":
    main()

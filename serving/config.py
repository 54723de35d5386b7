"""Typed configuration of the judge server beyond the judge (judge_models.config.JudgeConfig): how requests are
accepted, batched and limited (ServingConfig), and where it listens (HttpConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from judge_core.settings import option, require
from judge_models.engine import MAX_IMAGES_PER_PROMPT

API_KEY_ENV = "JUDGE_SERVER_API_KEY"


@dataclass
class ServingConfig:
    """How requests are accepted, batched and limited (the same for the HTTP server and Ray Serve)."""

    max_batch_size: int = option(16, "most judgements per model call (dynamic batching across concurrent requests)")
    batch_timeout: float = option(0.05, "seconds a batch waits for more judgements after its first one arrived")
    no_batching: bool = option(False, "one judgement per model call (as --max-batch-size 1), e.g. for benchmarks")
    max_queue_size: int = option(4096, "most judgements waiting or running; past it requests get 503")
    max_batch_requests: int = option(1024, "most requests in one /batch_judge call")
    max_group_size: int = option(
        64, "most completions in one /judge_group request (all_pairs compares N(N-1)/2 pairs: 2016 at 64)"
    )
    openrlhf_group_size: int = option(
        0,
        "/openrlhf/reward with a judge that compares: 0 = each sample judged alone; N >= 2 = samples gathered by "
        "prompt into groups of N (OpenRLHF's --n_samples_per_prompt) and rewarded as /judge_group's all_pairs",
    )
    openrlhf_group_window_s: float = option(
        2.0,
        "with --openrlhf-group-size: most seconds a prompt's first sample waits for its siblings; a group cut "
        "short is scored from what arrived (extra_logs group_size), a sample left alone fails",
    )
    max_text_chars: int = option(
        200_000, "longest prompt, completion, message content or answer in characters; a longer one is an item error"
    )
    max_body_bytes: int = option(64 * 1024 * 1024, "largest request body in bytes")
    max_images: int = option(MAX_IMAGES_PER_PROMPT, "most images in one request's prompt; more: 413")
    max_image_bytes: int = option(8 * 1024 * 1024, "largest image in bytes, decoded from its data URL; larger: 413")
    drop_images: bool = option(
        False,
        "a judge that reads no images judges an image-carrying prompt by its text alone, the response's metadata "
        "saying how many images it dropped (images_dropped); without this flag such a request is refused (422)",
    )
    api_key: str | None = option(
        None,
        f"when set, every route but /health needs `Authorization: Bearer <key>`; default: env {API_KEY_ENV}",
        env=API_KEY_ENV,
        secret=True,
    )

    def __post_init__(self):
        if self.no_batching:
            self.max_batch_size = 1
        require(self.max_batch_size > 0, "max_batch_size must be positive")
        require(self.batch_timeout >= 0, "batch_timeout must be >= 0")
        require(self.openrlhf_group_size == 0 or self.openrlhf_group_size >= 2, "openrlhf_group_size: 0 or >= 2")
        require(self.openrlhf_group_window_s > 0, "openrlhf_group_window_s must be positive")
        limits = ("max_queue_size", "max_batch_requests", "max_group_size", "max_text_chars", "max_body_bytes")
        for name in (*limits, "max_images", "max_image_bytes"):
            require(getattr(self, name) > 0, f"{name} must be positive")


@dataclass
class HttpConfig:
    """Where the standalone server listens."""

    host: str = option("127.0.0.1", "interface to listen on; 0.0.0.0 to accept other machines")
    port: int = option(8888, "TCP port")
    log_level: str = option("info", "log level", choices=("debug", "info", "warning", "error"))

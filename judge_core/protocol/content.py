"""Chat message content as OpenAI's API writes it: a message's `content` is text, or a list of parts,
`{"type": "text", "text": ...}` and `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`.

Images travel inline, as data URLs: a judge server fetches nothing. Everything that keys on a prompt (the client's
cache, a GRPO group, the server's batches) keys on each image's SHA-256 digest instead of its bytes."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

TEXT, IMAGE = "text", "image_url"
IMAGE_TYPES = ("png", "jpeg", "jpg", "gif", "webp")
_DATA_URL = re.compile(r"data:image/([a-z]+);base64,(.*)", re.DOTALL)


class ContentError(ValueError):
    """A content part that cannot be read; the message names where it is."""


def is_parts(content: Any) -> bool:
    return isinstance(content, list)


def check_parts(parts: list, where: str) -> None:
    """ContentError naming the first part that is neither a text part nor an image part with a data URL."""
    if not parts:
        raise ContentError(f"{where}: a list of content parts needs at least one part")
    for index, part in enumerate(parts):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == TEXT and isinstance(part.get("text"), str):
            continue
        if kind == IMAGE:
            image_bytes(_image_url(part, at), f"{at}.image_url.url")
            continue
        raise ContentError(f'{at}: a content part is {{"type": "text", "text": ...}} or {{"type": "image_url", ...}}')


def _image_url(part: dict, at: str) -> str:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise ContentError(f'{at}: an image part is {{"type": "image_url", "image_url": {{"url": "data:image/..."}}}}')
    return url


def image_bytes(url: str, where: str) -> bytes:
    """The bytes of a `data:image/<type>;base64,...` URL; ContentError naming `where` for any other URL."""
    match = _DATA_URL.fullmatch(url)
    if match is None or match.group(1) not in IMAGE_TYPES:
        shown = url[:40] + ("..." if len(url) > 40 else "")
        kinds = ",".join(IMAGE_TYPES)
        raise ContentError(
            f"{where}: {shown!r} is not a data:image/{{{kinds}}};base64 URL (the judge fetches nothing: send it inline)"
        )
    try:
        return base64.b64decode(match.group(2), validate=True)
    except binascii.Error as err:
        raise ContentError(f"{where}: the image's base64 does not decode: {err}") from None


def image_urls(messages: Sequence[dict]) -> Iterator[tuple[str, str]]:
    """(where, url) of every image part of the messages, in order."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if is_parts(content):
            for j, part in enumerate(content):
                if part.get("type") == IMAGE:
                    yield f"[{i}].content[{j}]", part["image_url"]["url"]


def image_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def keyed(messages: Sequence[dict]) -> list[dict]:
    """The messages with each image's URL replaced by its digest: what a key is computed from."""
    return [
        {**m, "content": [_keyed_part(p) for p in m["content"]]} if is_parts(m.get("content")) else m for m in messages
    ]


def _keyed_part(part: dict) -> dict:
    return {"type": IMAGE, "sha256": image_digest(part["image_url"]["url"])} if part.get("type") == IMAGE else part


def text_of(content: str | list) -> str:
    """A content's text: the text itself, or its text parts joined by blank lines (images left out)."""
    if not is_parts(content):
        return content
    return "\n\n".join(part["text"] for part in content if part.get("type") == TEXT)


def without_images(messages: Sequence[dict]) -> tuple[list[dict], int]:
    """The messages with their text only (each content's text parts joined), and how many images were dropped."""
    dropped = sum(1 for _ in image_urls(messages))
    return [{**m, "content": text_of(m["content"])} for m in messages], dropped


IMAGE_PLACEHOLDER = "<image>"  # verl's multimodal rows mark each image's place in the prompt text with it
_MAGIC = ((b"\x89PNG", "png"), (b"\xff\xd8", "jpeg"), (b"GIF8", "gif"))


def data_url(image: bytes | dict) -> str:
    """An image (its bytes, or a row's {"bytes": ...} as verl and HF datasets store it) as a data URL."""
    payload = image.get("bytes") if isinstance(image, dict) else image
    if not isinstance(payload, bytes | bytearray):
        raise ContentError(f"an image is its bytes or {{'bytes': ...}}, got {type(image).__name__}")
    kind = next((name for magic, name in _MAGIC if payload.startswith(magic)), None)
    if kind is None and payload[:4] == b"RIFF" and payload[8:12] == b"WEBP":
        kind = "webp"
    if kind is None:
        raise ContentError(f"an image's bytes are none of {IMAGE_TYPES}: they start {bytes(payload[:8])!r}")
    return f"data:image/{kind};base64,{base64.b64encode(payload).decode()}"


def with_images(text: str, images: Sequence[bytes | dict], placeholder: str = IMAGE_PLACEHOLDER) -> list[dict]:
    """A prompt text whose `placeholder`s mark images (verl's multimodal rows: `<image>` in the prompt, the
    `images` column beside it) as content parts, each image where its placeholder was."""
    pieces = text.split(placeholder)
    if len(pieces) - 1 != len(images):
        marks = len(pieces) - 1
        raise ContentError(f"the text has {marks} {placeholder} placeholders and the row {len(images)} images")
    parts: list[dict] = []
    for index, piece in enumerate(pieces):
        if piece:
            parts.append({"type": TEXT, "text": piece})
        if index < len(images):
            parts.append({"type": IMAGE, "image_url": {"url": data_url(images[index])}})
    return parts


def marked(messages: Sequence[dict]) -> tuple[list[dict], list[str]]:
    """The messages with each image part replaced by the text `[image k]` (k from 1), and the images' URLs in that
    order: a judge's prompt template renders the text, and the images go beside it (`attach`)."""
    urls: list[str] = []
    shown = []
    for message in messages:
        if not is_parts(message.get("content")):
            shown.append(message)
            continue
        parts = []
        for part in message["content"]:
            if part.get("type") == IMAGE:
                urls.append(part["image_url"]["url"])
                part = {"type": TEXT, "text": f"[image {len(urls)}]"}
            parts.append(part)
        shown.append({**message, "content": text_of(parts)})
    return shown, urls


def attach(messages: Sequence[dict], urls: Sequence[str]) -> list[dict]:
    """A judge's messages with the images placed before the text of its last user message, in their order."""
    last = max(i for i, message in enumerate(messages) if message["role"] == "user")
    images = [{"type": IMAGE, "image_url": {"url": url}} for url in urls]
    attached = {**messages[last], "content": [*images, {"type": TEXT, "text": text_of(messages[last]["content"])}]}
    return [*messages[:last], attached, *messages[last + 1 :]]

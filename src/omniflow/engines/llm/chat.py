"""OpenAI-style chat: a Prompt as chat messages, and the text deltas of streamed chunks.

Shared by the backends that talk in chat messages: MiniCPM-V (llama-cpp-python's chat
handler) and the remote server (``/v1/chat/completions``; its ``/v1/completions`` chunks
carry ``text`` instead of a ``delta`` and are read the same way).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from omniflow.core.prompt import Prompt
from omniflow.engines.llm.base import GenerationStats
from omniflow.errors import ConfigError, EngineError

__all__ = ["chat_messages", "image_data_uri", "stream_chat_chunks"]


def image_data_uri(image: Any, quality: int = 85) -> str:
    """An RGB uint8 frame (H, W, 3) as a JPEG ``data:`` URI; a string is passed through."""
    if isinstance(image, str):
        return image
    import cv2

    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise ConfigError(
            f"an image for the LLM must be RGB uint8 (H, W, 3); got {array.dtype} {array.shape}"
        )
    ok, jpeg = cv2.imencode(".jpg", array[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise EngineError(f"could not encode a {array.shape} frame as JPEG for the LLM")
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode("ascii")


def _with_scene(scene: str, text: str) -> str:
    """A user message with what the robot saw put before it."""
    text = text.strip()
    return f"(You see: {scene.strip()})\n{text}".strip() if scene.strip() else text


def chat_messages(prompt: Prompt, *, images: bool = True) -> list[dict[str, Any]]:
    """OpenAI-style chat messages for a prompt: system, history, then the user turn.

    The scene text goes into the user turn, an earlier user turn's into that one (a
    text-only model sees the frames as text); with
    ``images`` the prompt's frames go in before it as ``image_url`` content (data URIs).
    """
    messages: list[dict[str, Any]] = []
    if prompt.system.strip():
        messages.append({"role": "system", "content": prompt.system.strip()})
    for turn in prompt.history:
        if turn.role == "user":
            messages.append({"role": "user", "content": _with_scene(turn.scene, turn.text)})
        else:
            messages.append({"role": "assistant", "content": turn.text})
    text = _with_scene(prompt.scene, prompt.user)
    if images and prompt.images:
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": image_data_uri(image)}}
            for image in prompt.images
        ]
        content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
    else:
        messages.append({"role": "user", "content": text})
    return messages


def stream_chat_chunks(
    chunks: Iterator[Mapping[str, Any]], cancel: threading.Event, stats: GenerationStats, t0: float
) -> Iterator[str]:
    """Yield the content deltas of OpenAI-style stream chunks until done or cancelled."""
    stats.cancelled, stats.stop_reason = False, "eos"
    try:
        for chunk in chunks:
            if cancel.is_set():
                break
            choice = (chunk.get("choices") or [{}])[0]
            text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
            if text:
                if stats.generated_tokens == 0:
                    stats.first_token_s = time.perf_counter() - t0
                stats.generated_tokens += 1
                yield text
            finish = choice.get("finish_reason")
            if finish:
                stats.stop_reason = {"length": "length"}.get(finish, "stop")
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if cancel.is_set():
        stats.cancelled, stats.stop_reason = True, "cancelled"

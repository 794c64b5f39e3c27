"""The embed processor: ``EmbedRequest(texts)`` -> ``EmbedResponse(vectors, model)``.

Backends: ``onnx`` (default; all-MiniLM-L6-v2, int8, 384 dimensions, offline)
and ``openai`` (any OpenAI-compatible embeddings endpoint). Settings and
their defaults: ``settings.py``.
"""

from .processor import EmbedProcessor
from .settings import EmbedSettings, OnnxSettings, OpenAISettings

__all__ = ["EmbedProcessor", "EmbedSettings", "OnnxSettings", "OpenAISettings"]
